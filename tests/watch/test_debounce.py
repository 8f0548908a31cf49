"""The restart debounce: 300 ms after a change, pushed back by each further
change, one restart per burst."""

from __future__ import annotations

import pytest

from runnerd.watch.debounce import DELAY_S, RestartDebounce


def test_debounce_a_change_is_due_300_ms_later() -> None:
    debounce = RestartDebounce()
    assert DELAY_S == 0.3
    assert debounce.change(10.0) == pytest.approx(10.3)
    assert not debounce.take(10.299)
    assert debounce.take(10.3)
    assert not debounce.take(11.0)  # taken once


def test_debounce_a_burst_is_one_restart_after_its_last_change() -> None:
    debounce = RestartDebounce()
    changes = [0.0, 0.25, 0.5, 0.75, 1.0]  # each < 300 ms after the previous
    due = [debounce.change(t) for t in changes]
    assert due[-1] == pytest.approx(1.3)
    # A task that woke at an earlier due time finds it pushed back.
    assert not any(debounce.take(t + 0.3 - 1e-9) for t in changes)
    assert debounce.take(1.3)
    assert debounce.due_at is None


def test_debounce_changes_further_apart_are_separate_restarts() -> None:
    debounce = RestartDebounce()
    debounce.change(0.0)
    assert debounce.take(0.4)
    debounce.change(0.5)
    assert debounce.take(0.8)


def test_debounce_nothing_pending_is_never_due_and_cancel_drops_it() -> None:
    debounce = RestartDebounce()
    assert not debounce.take(100.0)
    debounce.change(1.0)
    debounce.cancel()
    assert not debounce.take(5.0)
