"""The reload budget: one sliding 60 s window, `reload_limit` admitted,
refused requests not counted."""

from __future__ import annotations

import pytest

from runnerd.watch.budget import ReloadBudget


def test_budget_admits_the_limit_then_refuses() -> None:
    budget = ReloadBudget(3)
    assert [budget.try_spend(t) for t in (0.0, 1.0, 2.0, 3.0)] == [True, True, True, False]


def test_budget_window_slides_one_admission_at_a_time() -> None:
    budget = ReloadBudget(2)
    assert budget.try_spend(10.0) and budget.try_spend(20.0)
    assert not budget.try_spend(69.9)
    assert budget.try_spend(70.0)  # the admission at 10 s left the window at 70 s
    assert not budget.try_spend(79.9)  # 20 s and 70 s are in it
    assert budget.try_spend(80.0)


def test_budget_refused_requests_are_not_counted() -> None:
    budget = ReloadBudget(1)
    assert budget.try_spend(0.0)
    # Hammering a spent budget does not keep it spent.
    assert not any(budget.try_spend(t) for t in (1.0, 30.0, 59.0, 59.999))
    assert budget.try_spend(60.0)


def test_budget_retry_after_says_when_the_next_is_admitted() -> None:
    budget = ReloadBudget(2)
    assert budget.retry_after_s(0.0) == 0.0
    budget.try_spend(5.0)
    budget.try_spend(15.0)
    assert budget.retry_after_s(25.0) == pytest.approx(40.0)
    assert budget.retry_after_s(65.0) == 0.0


def test_budget_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ReloadBudget(0)


def test_budget_a_refund_gives_the_admission_back_and_is_a_no_op_once_it_left() -> None:
    budget = ReloadBudget(1)
    assert budget.try_spend(10.0)
    assert not budget.try_spend(11.0)
    budget.refund(10.0)  # refused after all by a later check
    assert budget.try_spend(12.0)
    budget.refund(5.0)  # nothing admitted then: nothing changes
    assert not budget.try_spend(13.0)
