"""The backend seam as the manager drives it: `running` published once the
manager holds the handle, adoption, the TTL as a deadline, the end intent."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from runnerd.backend import (
    EndIntent,
    Exited,
    ImageSpec,
    Limits,
    Outcome,
    Recovered,
    RunSpec,
    SessionIdentity,
    Sink,
    Started,
    StopRefused,
)
from runnerd.contract import AvailabilityReport, exited, failed, ready, running, stopped
from runnerd.http.listing import session_entry
from runnerd.session.ending import format_ttl_failure
from runnerd.session.manager import DetachUnsupported, StopFailed
from runnerd.session.registry import RegistryFull
from runnerd.session.sink import DRAIN_TIMEOUT_S

from .backends import InProcessBackend, NullHandle
from .test_manager import build_spec, open_manager, status_kinds, wait_terminal


async def test_seam_stdin_sent_on_seeing_running_reaches_the_workload() -> None:
    received = trio.open_memory_channel[bytes](math.inf)

    async def body(sink: Sink) -> Outcome:
        sink.progress("boot", "reported right after started")
        return Exited(0) if await received[1].receive() == b"hi" else Exited(1)

    backend = InProcessBackend(body)
    backend.handle.stdin = received[0]
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        with trio.fail_after(10):
            while session.status["kind"] != "running":
                await session.wait_change()
        # No checkpoint since `running` was seen: the handle is already there.
        session.write_stdin(b"hi")
        assert await wait_terminal(session) == exited(0)
    # `running` comes before anything the backend reports after `started`.
    events = [event for _, event in session.events.since(0).items]
    kinds = [(e["type"], e["status"]["kind"] if e["type"] == "status" else None) for e in events]
    assert kinds[:3] == [("status", "starting"), ("status", "running"), ("progress", None)]
    assert status_kinds(session) == ["starting", "running", "exited"]


class AdoptingBackend:
    """Re-attaches to adopted workloads (records each spec it ran), can
    detach, and records the end intent each run saw in its teardown."""

    name = "adopting"
    notices: tuple[str, ...] = ()
    detach_supported = True

    def __init__(self) -> None:
        self.specs: list[RunSpec] = []
        self.intents: list[EndIntent] = []

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def recover(self) -> list[Recovered]:
        return []

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        self.specs.append(spec)
        task_status.started(Started(NullHandle()))
        try:
            await trio.sleep_forever()
        finally:
            self.intents.append(sink.end_intent())
        raise AssertionError("unreachable")


EPOCH = 1_700_000_000.0


def wall_clock() -> float:
    """Epoch seconds that move with trio's (fake) clock."""
    return EPOCH + trio.current_time()


def recovered(session_id: str, *, age_s: float, ttl_s: float = 60.0) -> Recovered:
    identity = SessionIdentity(
        session_id, Limits("50m", "100Mi", "512Mi", ttl_s), created_at=wall_clock() - age_s
    )
    return Recovered(identity, running())


async def test_seam_adopt_keeps_id_creation_time_and_status_past_capacity() -> None:
    backend = AdoptingBackend()
    async with open_manager(backend, max_sessions=1, wall_clock=wall_clock) as manager:
        live = manager.start(build_spec())
        with pytest.raises(RegistryFull):
            manager.start(build_spec())
        found = recovered("adoptedaaaa1", age_s=30)
        session = manager.adopt(found)
        assert manager.get("adoptedaaaa1") is session
        assert session.record.created_at == found.identity.created_at
        assert session.status == running()
        with trio.fail_after(10):
            while len(backend.specs) < 2:
                await trio.lowlevel.checkpoint()
        [adopted_spec] = [spec for spec in backend.specs if spec.session_id == "adoptedaaaa1"]
        assert adopted_spec.creation is None
        assert adopted_spec.identity == found.identity
        assert not live.is_terminal
        with pytest.raises(ValueError):
            manager.adopt(found)
        # Listed without an image: the adopted session's creation was never stored.
        entry = session_entry(session)
        assert entry["sessionId"] == "adoptedaaaa1" and "image" not in entry
        assert session_entry(live)["image"] == "sh"


async def test_seam_an_ended_session_keeps_neither_bundle_nor_env() -> None:
    # Retained for exit_ttl_seconds (hours) for replay: it must not pin a
    # 16 MiB bundle or a catalog secret that long.
    backend = InProcessBackend(lambda sink: _exit_at_once())
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        assert session.spec.creation is not None
        assert await wait_terminal(session) == exited(0)
        assert session.spec.creation is None
        assert session_entry(session)["image"] == "sh"  # still listed as it ran


async def _exit_at_once() -> Outcome:
    return Exited(0)


async def test_seam_ttl_is_a_deadline_from_created_at(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = AdoptingBackend()
    async with open_manager(backend, wall_clock=wall_clock) as manager:
        fresh = manager.start(build_spec(ttl_s=60))
        adopted = manager.adopt(recovered("adoptedaaaa2", age_s=50, ttl_s=60))
        start = trio.current_time()
        assert await wait_terminal(adopted, timeout_s=1000) == failed(format_ttl_failure(60))
        assert trio.current_time() - start == pytest.approx(10)
        assert await wait_terminal(fresh, timeout_s=1000) == failed(format_ttl_failure(60))
        assert trio.current_time() - start == pytest.approx(60)
    assert backend.intents == [EndIntent.STOP, EndIntent.STOP]


async def test_seam_detach_is_refused_by_a_backend_that_cannot() -> None:
    backend = InProcessBackend()  # like the local backend: detach_supported False
    backend.detach_supported = False  # type: ignore[attr-defined]
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        with trio.fail_after(10):
            while session.status["kind"] != "running":
                await session.wait_change()
        with pytest.raises(DetachUnsupported, match="detach is not supported"):
            await manager.stop_all(EndIntent.DETACH)
        # Nothing changed: the session runs and new ones are still accepted.
        assert session.status == running()
        manager.start(build_spec())


async def test_seam_detach_reaches_the_backend_as_the_end_intent() -> None:
    backend = AdoptingBackend()
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        with trio.fail_after(10):
            while session.status["kind"] != "running":
                await session.wait_change()
        assert await manager.stop_all(EndIntent.DETACH) == []
    assert backend.intents == [EndIntent.DETACH]


async def test_seam_adopting_an_ended_workload_registers_it_for_replay_and_never_runs_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = AdoptingBackend()
    async with open_manager(backend, wall_clock=wall_clock, exit_ttl_s=60.0) as manager:
        found = recovered("adoptedaaaa3", age_s=30)
        session = manager.adopt(Recovered(found.identity, exited(3)))
        assert session.is_terminal and session.status == exited(3)
        assert session.exited_at is not None
        await trio.sleep(1)
        assert backend.specs == []  # never run: there is nothing to re-attach to
        assert manager.get("adoptedaaaa3") is session
        await trio.sleep(60)
        assert manager.get("adoptedaaaa3") is None  # kept exit_ttl_s, like any ended one


class RefusingStopBackend:
    """Gives a stop of its own (`Started.stop`) that refuses while `refuse`."""

    name = "refusing-stop"
    notices: tuple[str, ...] = ()
    detach_supported = False

    def __init__(self) -> None:
        self.refuse = True
        self.stops = 0

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def recover(self) -> list[Recovered]:
        return []

    async def stop(self) -> None:
        await trio.lowlevel.checkpoint()
        self.stops += 1
        if self.refuse:
            raise StopRefused("the runner is not permitted to do this")

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        task_status.started(Started(NullHandle(), stop=self.stop))
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def test_seam_a_refused_stop_changes_nothing_and_a_later_one_stops() -> None:
    backend = RefusingStopBackend()
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        with trio.fail_after(10):
            while session.status["kind"] != "running":
                await session.wait_change()
        with pytest.raises(StopFailed) as refused:
            await manager.stop(session.id)
        assert refused.value.code == "stop_failed"
        assert "still running: the runner is not permitted" in refused.value.message
        # Not marked stopped, not cancelled: still running.
        assert session.status == running([], None)
        assert session.end_requested is None
        backend.refuse = False
        await manager.stop(session.id)
        assert await wait_terminal(session) == stopped()
        assert backend.stops == 2
        await manager.stop(session.id)  # idempotent: an ended session asks nothing
        assert backend.stops == 2


class SlowStopBackend(RefusingStopBackend):
    """A stop of its own that takes a while (a pod delete in flight)."""

    async def stop(self) -> None:
        self.stops += 1
        await trio.sleep(0.2)
        if self.refuse:
            raise StopRefused("the runner is not permitted to do this")


@pytest.mark.parametrize("refuse", [False, True], ids=["accepted", "refused"])
async def test_seam_two_concurrent_stops_reach_the_backend_once(refuse: bool) -> None:
    # Two DELETEs of one session at once: the backend's stop (a pod delete)
    # runs once, and both get its answer.
    backend = SlowStopBackend()
    backend.refuse = refuse
    answers: list[str] = []
    async with open_manager(backend) as manager:
        session = manager.start(build_spec())
        with trio.fail_after(10):
            while session.status["kind"] != "running":
                await session.wait_change()

        async def delete() -> None:
            try:
                await manager.stop(session.id)
                answers.append("stopped")
            except StopFailed as exc:
                answers.append(exc.code)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(delete)
                nursery.start_soon(delete)
        assert backend.stops == 1
        if refuse:
            assert answers == ["stop_failed", "stop_failed"]
            assert session.status == running([], None)
        else:
            assert answers == ["stopped", "stopped"]
            assert await wait_terminal(session) == stopped()


class DrainingBackend:
    """Ends its workload at once, then drains with the given steps."""

    name = "draining"
    notices: tuple[str, ...] = ()
    detach_supported = False

    def __init__(self, *steps: Any) -> None:
        self.steps = steps
        self.drained: bool | None = None

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def recover(self) -> list[Recovered]:
        return []

    async def run(self, spec: RunSpec, sink: Sink, *, task_status: Any) -> Outcome:
        task_status.started(Started(NullHandle()))
        self.drained = await sink.drain(*self.steps)
        return Exited(0)


async def test_seam_the_drain_budget_is_the_cores(autojump_clock: trio.abc.Clock) -> None:
    # A backend whose output never finishes (something that escaped holds the
    # terminal) still ends its session within the core's budget, and is told.
    finished: list[str] = []

    async def output_through() -> None:
        finished.append("output")

    stuck = DrainingBackend(output_through, trio.sleep_forever)
    through = DrainingBackend(output_through, output_through)
    for backend, drained in ((stuck, False), (through, True)):
        async with open_manager(backend) as manager:
            session = manager.start(build_spec())
            began = trio.current_time()
            assert await wait_terminal(session) == exited(0)
            took = trio.current_time() - began
        assert backend.drained is drained
        assert took == pytest.approx(DRAIN_TIMEOUT_S if not drained else 0.0, abs=0.01)
    assert finished == ["output", "output", "output"]
