"""Per-app generations and `run` events: the state machine's table, and the
contract's guarantees over any sequence of calls."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runnerd.watch.runs import AppRuns, RunPhase, RunStateError, SessionRuns


def test_runs_a_generation_starts_then_completes_with_its_duration() -> None:
    runs = AppRuns("web")
    assert (runs.generation, runs.phase) == (0, RunPhase.IDLE)
    assert runs.start("initial", now=10.0) == {
        "type": "run", "app": "web", "generation": 1, "phase": "started", "trigger": "initial",
    }  # fmt: skip
    assert runs.phase is RunPhase.OPEN
    assert runs.complete(0, now=10.4567) == {
        "type": "run", "app": "web", "generation": 1, "phase": "completed", "code": 0,
        "durationMs": 457,
    }  # fmt: skip
    assert (runs.generation, runs.phase) == (1, RunPhase.IDLE)


def test_runs_a_restart_ends_n_before_n_plus_1_starts() -> None:
    runs = AppRuns("web")
    runs.start("initial", 0.0)
    with pytest.raises(RunStateError):
        runs.start("watch", 1.0)  # two processes of one app: refused
    assert runs.generation == 1  # nothing changed
    killed = runs.complete(143, 1.0)  # SIGTERM'd by the restart: 128 + 15
    assert killed is not None and killed["code"] == 143
    assert runs.start("watch", 1.0)["generation"] == 2


def test_runs_a_generation_that_cannot_start_is_started_then_failed() -> None:
    runs = AppRuns("api", generation=4)
    started, failed = runs.start_failed("manual", "entry 'x.sh' is not a file", 2.0)
    assert (started["generation"], started["trigger"]) == (5, "manual")
    assert failed == {
        "type": "run", "app": "api", "generation": 5, "phase": "failed",
        "reason": "entry 'x.sh' is not a file",
    }  # fmt: skip
    assert runs.phase is RunPhase.IDLE


def test_runs_ending_nothing_is_a_no_op() -> None:
    runs = AppRuns("web")
    assert runs.complete(0, 1.0) is None and runs.fail("x") is None
    runs.start("initial", 0.0)
    runs.abandon()  # the session suspended under it: no event
    assert runs.complete(0, 2.0) is None  # the late exit of that process
    assert runs.start("resume", 3.0)["generation"] == 2


def test_runs_duration_is_never_negative() -> None:
    runs = AppRuns("web")
    runs.start("initial", 5.0)
    completed = runs.complete(0, 5.0)
    assert completed is not None and completed["durationMs"] == 0


def test_runs_put_apps_keeps_counters_by_name_and_drops_the_rest() -> None:
    session = SessionRuns(["web", "api"])
    for runs in session.apps.values():
        runs.start("initial", 0.0)
    session.apps["web"].complete(0, 1.0)
    session.apps["web"].start("watch", 1.0)
    dropped = session.replace(["worker", "web"])
    assert [r.app for r in dropped] == ["api"] and dropped[0].phase is RunPhase.IDLE
    assert list(session.apps) == ["worker", "web"]
    assert session.apps["web"].generation == 2 and session.apps["worker"].generation == 0
    session.abandon_all()
    assert all(r.phase is RunPhase.IDLE for r in session.apps.values())
    # Every app of the new set then starts a `resume` generation.
    assert [r.start("resume", 2.0)["generation"] for r in session.apps.values()] == [1, 3]


CALLS = st.lists(
    st.tuples(
        st.sampled_from(["start", "complete", "fail", "abandon", "start_failed"]),
        st.sampled_from(["initial", "watch", "manual", "resume"]),
        st.floats(min_value=0, max_value=5, allow_nan=False),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(CALLS)
def test_runs_property_the_contracts_guarantees_hold_for_any_calls(calls: list[Any]) -> None:
    runs, now, events = AppRuns("web"), 0.0, []
    for call, trigger, step in calls:
        now += step
        if call in ("start", "start_failed") and runs.phase is RunPhase.OPEN:
            with pytest.raises(RunStateError):
                runs.start(trigger, now)
            continue
        if call == "start":
            events.append(runs.start(trigger, now))
        elif call == "start_failed":
            events.extend(runs.start_failed(trigger, "no", now))
        elif call == "complete":
            events.append(runs.complete(0, now))
        elif call == "fail":
            events.append(runs.fail("no"))
        else:
            runs.abandon()
    sent = [event for event in events if event is not None]
    generations = [event["generation"] for event in sent]
    assert generations == sorted(generations)  # generation order
    last_started, ended = 0, set()
    for event in sent:
        if event["phase"] == "started":
            last_started = event["generation"]
        else:
            # Only the latest started generation ends, at most once, after its
            # `started` (an abandoned one never ends with an event).
            assert event["generation"] == last_started
            assert last_started not in ended
            ended.add(last_started)
    starts = [event["generation"] for event in sent if event["phase"] == "started"]
    assert starts == list(range(1, len(starts) + 1))
    assert all(event.get("durationMs", 0) >= 0 for event in sent)
