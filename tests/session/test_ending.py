"""The one lifecycle value (`runnerd.session.ending`) as pure code: every
ending to its wire status (the table in `runnerd.session.manager`'s
docstring, byte for byte), the precedence that picks the ending, and the
stage the start-failure metric counts; then the phase and the metric
through a real manager."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runnerd.backend import EndIntent, Exited, Failed
from runnerd.metrics import Metrics
from runnerd.session.ending import (
    Detached,
    Ending,
    Internal,
    Produced,
    StartFailed,
    Stopped,
    TtlExpired,
    decide,
    failed_stage,
    format_ttl_failure,
    wire_status,
)
from runnerd.session.session import SessionPhase

from .backends import FailingStartBackend, InProcessBackend
from .test_manager import build_spec, open_manager, wait_terminal

WIRE: list[tuple[Ending, dict[str, Any] | None]] = [
    (Exited(0), {"kind": "exited", "code": 0}),
    (Exited(137), {"kind": "exited", "code": 137}),
    (Failed("the session pod is gone"), {"kind": "failed", "message": "the session pod is gone"}),
    (Stopped(), {"kind": "stopped"}),
    (
        TtlExpired(1.5),
        {"kind": "failed", "message": "ttl: session exceeded its time limit of 1.5 s"},
    ),
    (
        TtlExpired(60.0),
        {"kind": "failed", "message": "ttl: session exceeded its time limit of 60 s"},
    ),
    (
        StartFailed("provision", "image telorun/nope could not be pulled"),
        {"kind": "failed", "message": "provision: image telorun/nope could not be pulled"},
    ),
    (
        Internal(),
        {"kind": "failed", "message": "internal: the session runner failed unexpectedly"},
    ),
    (
        Internal("the backend returned no outcome"),
        {"kind": "failed", "message": "internal: the backend returned no outcome"},
    ),
    (Detached(), None),
]


@pytest.mark.parametrize(("ending", "status"), WIRE, ids=[repr(e) for e, _ in WIRE])
def test_ending_each_has_its_wire_status(ending: Ending, status: dict[str, Any] | None) -> None:
    assert wire_status(ending) == status


def test_ending_the_table_covers_every_kind_of_ending() -> None:
    kinds = {type(ending) for ending, _ in WIRE}
    assert kinds == {Exited, Failed, Stopped, TtlExpired, StartFailed, Internal, Detached}
    assert format_ttl_failure(2) == "ttl: session exceeded its time limit of 2 s"


START = StartFailed("boot", "could not execute 'sh'")
# (what the run produced, the end asked, the TTL expired) -> the ending
PRECEDENCE: list[tuple[Produced | None, EndIntent | None, bool, Ending]] = [
    # The workload's own outcome beats any end asked, and the TTL.
    (Exited(3), EndIntent.STOP, True, Exited(3)),
    (Failed("evicted"), EndIntent.DETACH, False, Failed("evicted")),
    # A detach leaves it running, whatever the start did.
    (None, EndIntent.DETACH, True, Detached()),
    (START, EndIntent.DETACH, False, Detached()),
    # A stop is a stop, never a failure: not even a TTL or a start error.
    (None, EndIntent.STOP, True, Stopped()),
    (START, EndIntent.STOP, False, Stopped()),
    (Internal(), EndIntent.STOP, False, Stopped()),
    # Then the TTL, then what the backend raised.
    (None, None, True, TtlExpired(60.0)),
    (START, None, True, TtlExpired(60.0)),
    (START, None, False, START),
    (Internal(), None, False, Internal()),
    # Cancelled with no cause recorded: a bug.
    (None, None, False, Internal()),
]


@pytest.mark.parametrize(("produced", "end", "ttl_expired", "ending"), PRECEDENCE)
def test_ending_decide_takes_the_first_rule_that_holds(
    produced: Produced | None, end: EndIntent | None, ttl_expired: bool, ending: Ending
) -> None:
    assert decide(produced, end, ttl_expired=ttl_expired, ttl_s=60.0) == ending


def test_ending_failed_stage_is_read_from_the_value_not_the_message() -> None:
    # A message with a colon of its own says nothing about the stage.
    assert failed_stage(StartFailed("create", "quota: pods exceeded")) == "create"
    assert failed_stage(TtlExpired(5)) == "ttl"
    assert failed_stage(Internal()) == "internal"
    assert failed_stage(Failed("create: not a stage")) == "unknown"
    for ending in (Exited(0), Stopped(), Detached()):
        assert failed_stage(ending) is None


class CountingMetrics(Metrics):
    def __init__(self) -> None:
        self.starts: list[tuple[str, str]] = []
        self.failures: list[str] = []

    def session_started(self, backend: str, outcome: str) -> None:
        self.starts.append((backend, outcome))

    def start_failed(self, stage: str) -> None:
        self.failures.append(stage)


async def test_ending_a_failed_start_counts_its_stage_once() -> None:
    metrics = CountingMetrics()
    async with open_manager(FailingStartBackend(), metrics=metrics) as manager:
        session = manager.start(build_spec())
        status = await wait_terminal(session)
    assert status == {
        "kind": "failed",
        "message": "provision: image telorun/nope could not be pulled",
    }
    assert metrics.starts == [("failing-start", "failed")]
    assert metrics.failures == ["provision"]
    assert session.phase is SessionPhase.ENDED


async def test_ending_the_phase_moves_forward_through_a_run() -> None:
    seen: list[SessionPhase] = []
    metrics = CountingMetrics()

    async def body(sink: Any) -> Exited:
        seen.append(session.phase)
        await trio.lowlevel.checkpoint()
        return Exited(0)

    async with open_manager(InProcessBackend(body), metrics=metrics) as manager:
        session = manager.start(build_spec())
        seen.append(session.phase)
        assert await wait_terminal(session) == {"kind": "exited", "code": 0}
    seen.append(session.phase)
    assert seen == [SessionPhase.STARTING, SessionPhase.RUNNING, SessionPhase.ENDED]
    # It ran: counted as a start that reached `running`, never as unstarted.
    assert metrics.starts == [("in-process", "running")]
    assert metrics.failures == []
