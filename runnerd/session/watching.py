"""A watch session's run: from `open_watch` to how it ended, suspends included.

Owns the driver of `runnerd.session.watchsession.WatchSession`, in the
session's task under its stop scope:

    loop:  under the TTL (`ttl_s` from creation, afresh from each resume)
             async with backend.open_watch(spec, progress) as host:
               (entered with `session.open_spec()`: the app set, the agent,
                 the latest checkpoint)
               serve: the agent, every app's generation (trigger initial /
                 resume); once each app's first one started or failed to
                 start, the port set published (`runnerd.session.publishing`)
                 and `running` with what the host published;
                 the debounce, the republishing, the checkpoint period and
                 the idle watch beside them
               idle → checkpoint while they run (a failure: a `progress`
                 saying why, still running, try again after the next idle
                 period), stop the apps and the agent, checkpoint again
                 (a failure: the first one stands)
           `suspended`; wait for `resume()` (→ again) or the suspended TTL
           (→ evicted: gone)

A session a previous daemon left (`runnerd.session.watchadopt`) begins
`adopt`: its first period re-enters the place with `adopt_watch` (each
app's first generation there is the one left running, continued; a reopen
later opens afresh), and `PlaceGone` suspends it when a checkpoint was
kept, else ends it `failed "the session's pod was gone after a restart"`;
or `suspended`: it waits for a resume first, the suspended TTL counted
from its original suspend. A place is left for a successor on a detach
(`ProgressReport.detaching`).

How it ends is one `Ending` (`runnerd.session.ending`): a detach (SIGUSR2)
`Detached`; a stop (DELETE, shutdown, eviction) `Stopped`; the TTL `TtlExpired`; a `StartError` of
`open_watch` `StartFailed`; a `PlaceEnded` out of a live place
`Failed(message)`; anything else `Internal` (logged). An app never
ends the session: a generation that cannot start is the pair `run started`
+ `run failed`, one that exits `run completed`, and the app waits for its
next restart. The per-app loop and its guarantees are `runnerd.session.
generations`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import trio

from runnerd.backend import Backend, EndIntent, Failed, StartError
from runnerd.backend.watch import CheckpointFailed, PlaceEnded, PlaceGone, WatchHost
from runnerd.contract import progress_event
from runnerd.session.appsink import AgentSink, SessionProgress
from runnerd.session.ending import (
    Detached,
    Ending,
    Internal,
    Produced,
    StartFailed,
    Stopped,
    TtlExpired,
)
from runnerd.session.generations import AppPeriod
from runnerd.session.publishing import Publisher
from runnerd.session.reopen import Reopen
from runnerd.session.running import leaves
from runnerd.session.watchsession import WatchSession
from runnerd.watch.kernel import KernelProjection
from runnerd.watch.runs import RunTrigger

log = logging.getLogger("runnerd.sessions")


# How a session's driver begins: a new session (`initial`), one a previous
# daemon left running (`adopt_watch`), or one it left suspended.
Beginning = Literal["fresh", "adopt", "suspended"]
PLACE_GONE = "the session's pod was gone after a restart"
# How long past the debounce a self-watching app's kernel has to react to a
# burst by itself before runnerd reloads it (its poll and settle take a
# fraction of this; the contract allows a restart 2 s after the write).
KERNEL_REACT_S = 1.0


async def drive_watch(
    session: WatchSession,
    backend: Backend,
    wall_clock: Callable[[], float],
    beginning: Beginning = "fresh",
) -> Ending:
    """Run the session until it ends; return how (see the module docstring).
    Its last checkpoint is discarded before this returns (kept on a detach:
    its record names it for a successor)."""
    produced: Produced | None = None
    ttl_s = session.spec.limits.ttl_s
    extra = {"session_id": session.id}
    expired = False
    try:
        with session.stop_scope:
            end = await _periods(session, backend, wall_clock, beginning)
            expired = end == "expired"
            if end == "evicted":
                session.evicted = True
            elif end == "gone":
                produced = Failed(PLACE_GONE)
    except* StartError as group:
        first = leaves(group)[0]
        assert isinstance(first, StartError)
        log.info("watch start failed: %s", first, exc_info=first.__cause__, extra=extra)
        produced = StartFailed(first.stage, first.message)
    except* PlaceEnded as group:
        ended = leaves(group)[0]
        log.info("watch place ended: %s", ended, extra=extra)
        produced = Failed(str(ended))
    except* Exception as group:
        log.error("watch session runner failed", exc_info=group, extra=extra)
        produced = produced or Internal()
    finally:
        session.unserve()
        session.end_reopen()  # a reopen that failed or never ran: its waiters go on
        # Detached, what is open stays open and the checkpoint stays: the
        # session's record names both for a successor.
        if not session.detaching:
            session.runs.abandon_all()
            with trio.CancelScope(shield=True):
                await _discard_checkpoint(session)
    return _decide(session, produced, expired, ttl_s)


async def _periods(
    session: WatchSession,
    backend: Backend,
    wall_clock: Callable[[], float],
    beginning: Beginning,
) -> Literal["expired", "gone", "evicted"]:
    """Live periods and suspends, until the TTL expires, an adopted place
    is gone with no checkpoint to suspend with, or the suspended TTL passes."""
    ttl_s = session.spec.limits.ttl_s
    # The TTL counts from creation or the last resume, also across a restart.
    elapsed_s = max(0.0, wall_clock() - session.live_since)
    deadline = trio.current_time() + ttl_s - elapsed_s
    trigger: RunTrigger = "initial"
    adopt, live = beginning == "adopt", beginning != "suspended"
    while True:
        if live:
            with trio.move_on_at(deadline) as ttl_scope:
                gone = await _first_period(session, backend, trigger, adopt)
            if ttl_scope.cancelled_caught:
                return "expired"
            if gone:
                return "gone"
        live, adopt = True, False
        if not await _wait_resume(session, wall_clock):
            return "evicted"
        trigger, deadline = "resume", trio.current_time() + ttl_s


def _decide(
    session: WatchSession, produced: Produced | None, expired: bool, ttl_s: float
) -> Ending:
    if session.end_requested is EndIntent.DETACH:
        return Detached()
    if session.end_requested is not None or session.evicted:
        return Stopped()
    if expired:
        return TtlExpired(ttl_s)
    return produced if produced is not None else Stopped()


async def _first_period(
    session: WatchSession, backend: Backend, trigger: RunTrigger, adopt: bool
) -> bool:
    """A live period (`_live_period`); adopting, True when the place was
    gone and no checkpoint was kept to suspend with (it is suspended when
    one was: a resume restores it)."""
    if not adopt:
        await _live_period(session, backend, trigger)
        return False
    gone: PlaceGone | None = None
    try:
        await _live_period(session, backend, trigger, adopt=True)
    except* PlaceGone as group:
        first = leaves(group)[0]
        assert isinstance(first, PlaceGone)
        gone = first
    if gone is None:
        return False
    session.runs.abandon_all()  # what the previous daemon left open ended with its place
    kept = session.checkpoint is not None
    log.info("adopt: %s (checkpoint kept: %s)", gone, kept, extra={"session_id": session.id})
    if kept:
        session.mark_suspended()
    return not kept


async def _wait_resume(session: WatchSession, wall_clock: Callable[[], float]) -> bool:
    """Suspended: True once resumed, False when `suspended_ttl_seconds`
    passed since it was suspended (before a restart, too)."""
    dormant_at = session.record.dormant_at
    waited_s = 0.0 if dormant_at is None else max(0.0, wall_clock() - dormant_at)
    with trio.move_on_after(session.limits().suspended_ttl_seconds - waited_s):
        await session.resume_requested.wait()
        return True
    return False


async def _discard_checkpoint(session: WatchSession) -> None:
    checkpoint, session.checkpoint = session.checkpoint, None
    if checkpoint is not None:
        await checkpoint.discard()


async def _live_period(
    session: WatchSession, backend: Backend, trigger: RunTrigger, *, adopt: bool = False
) -> None:
    """One stretch with a live workspace: open it (`adopt`: re-enter the
    previous daemon's, `adopt_watch`), serve until idle, and return
    suspended (status `suspended`, the host left). A reopen for a new app
    set (`runnerd.session.reopen`) leaves the host and enters `open_watch`
    again within the stretch, every app starting `resume`."""
    while True:
        enter = backend.adopt_watch if adopt else backend.open_watch
        async with enter(session.open_spec(), SessionProgress(session)) as host:
            reopen = await _serve(session, host, trigger, adopted=adopt)
            adopt = False
            # Stopped now: the last checkpoint. If it fails, the one taken
            # at idle (or by the reopen's PUT, moments ago) stands.
            await _take_checkpoint(session, host)
            if reopen is not None:
                session.apply_reopen(reopen)  # the new set: its PUT answers
        if reopen is None:
            break
        trigger = "resume"
    session.mark_suspended()


async def _serve(
    session: WatchSession, host: WatchHost, trigger: RunTrigger, *, adopted: bool = False
) -> Reopen | None:
    """The apps and the agent over `host` until the session is idle (None)
    or a reopen is asked (returned); when this returns they are stopped and
    the workspace routes answer 409 (or, reopening, wait). `adopted`: each
    app's first generation here is the one the previous daemon left."""
    session.host = host
    try:
        async with trio.open_nursery() as nursery:
            period = AppPeriod(session, host, nursery, adopted=adopted)
            session.period = period
            publisher = session.publisher = Publisher(session, host)
            _start_agent(session, host, nursery)
            for channel in session.app_channels():
                period.start_app(channel, trigger)
            await period.first_round.wait()
            session.serve()
            await publisher.publish()  # `running`, with what the host published
            nursery.start_soon(publisher.run)
            nursery.start_soon(_debounce, session)
            nursery.start_soon(_checkpoint_every, session, host)
            while not await _until_idle_or_reopen(session):
                # Idle: a checkpoint before anything stops. One that fails
                # leaves the session running untouched (and says why), to
                # try again after the next idle period.
                failure = await _take_checkpoint(session, host)
                if failure is None:
                    break
                session.emit(progress_event("boot", f"not suspended while idle: {failure}"))
            # Decided here, with no wait before `unserve`: a reopen asked
            # meanwhile (the idle checkpoint) is carried out, not lost.
            reopen = session.take_reopen()
            session.unserve()
            nursery.cancel_scope.cancel()
        return reopen
    finally:
        session.unserve()
        session.host = session.period = session.publisher = None
        session.debounce.cancel()
        session.burst_marks = None
        if not session.detaching:  # what is open stays open, for a successor's record
            session.runs.abandon_all()


async def _until_idle_or_reopen(session: WatchSession) -> bool:
    """Return once idle (False) or a reopen was asked (True)."""
    async with trio.open_nursery() as nursery:

        async def idle() -> None:
            await _until_idle(session)
            nursery.cancel_scope.cancel()

        nursery.start_soon(idle)
        await session.reopen_asked.wait()
        nursery.cancel_scope.cancel()
    return session.reopen is not None


def _start_agent(session: WatchSession, host: WatchHost, nursery: trio.Nursery) -> None:
    plan = session.agent_plan()
    agent = session.watch_spec.agent
    if plan is None or agent is None:
        return
    if plan.conflict is not None:
        session.emit(progress_event("boot", plan.conflict))
        return

    async def run_agent() -> None:
        sink = AgentSink(session)
        try:
            async with trio.open_nursery() as inner:
                await inner.start(host.run_agent, agent, sink)
                session.agent_running = True
        except* StartError as group:
            first = leaves(group)[0]
            message = f"co-resident agent {agent.name!r} could not start: {first}"
            session.emit(progress_event("boot", message))
        finally:
            session.agent_running = False

    nursery.start_soon(run_agent)


async def _debounce(session: WatchSession) -> None:
    """The `watch` restarts: one per burst of changes, `DELAY_S` after its last."""
    debounce = session.debounce
    while True:
        await session.debounce_changed.wait()
        session.debounce_changed = trio.Event()
        while debounce.due_at is not None:
            await trio.sleep_until(debounce.due_at)
            if debounce.take(trio.current_time()):
                marks, session.burst_marks = session.burst_marks or {}, None
                for channel in session.app_channels():
                    # A kernel that watches by itself restarts on its own
                    # while its process is up (or being restarted); one
                    # that ended (crashed, or exited before it reported a
                    # run) is started again.
                    if not channel.self_watching or channel.exited:
                        channel.request_restart("watch")
                await _reload_unmoved(session, marks)


def _unmoved(session: WatchSession, marks: dict[str, tuple[KernelProjection, int]]) -> list[str]:
    """The self-watching apps offering a reload whose kernel (the same
    process's) has projected no lifecycle frame since the burst began."""
    return [
        c.name
        for c in session.app_channels()
        if c.self_watching
        and c.reload_in_place is not None
        and c.name in marks
        and marks[c.name] == (c.kernel, c.kernel.consumed if c.kernel else -1)
    ]


async def _reload_unmoved(
    session: WatchSession, marks: dict[str, tuple[KernelProjection, int]]
) -> None:
    """A write restarts every app (the contract), but a kernel watches only
    its entry's directory: one that has not reacted to the burst within
    `KERNEL_REACT_S` more did not see it, and is reloaded (`watch`)."""
    if not _unmoved(session, marks):
        return
    await trio.sleep(KERNEL_REACT_S)  # its own watch's poll and settle, first
    for name in _unmoved(session, marks):
        channel = session.app_channel(name)
        if channel is not None and channel.reload_in_place is not None:
            channel.reload_in_place("watch")


async def _checkpoint_every(session: WatchSession, host: WatchHost) -> None:
    while True:
        await trio.sleep(session.limits().checkpoint_seconds)
        await _take_checkpoint(session, host)


async def _take_checkpoint(session: WatchSession, host: WatchHost) -> str | None:
    """A checkpoint now, kept as the latest (the one it replaces discarded);
    None, or why it failed (client-safe; logged)."""
    try:
        checkpoint = await host.checkpoint()
    except CheckpointFailed as exc:
        log.warning("checkpoint failed: %s", exc, extra={"session_id": session.id})
        return f"the workspace checkpoint failed: {exc}"
    await session.keep_checkpoint(checkpoint)
    return None


async def _until_idle(session: WatchSession) -> None:
    """Return once no subscriber was there for `idle_seconds`, counted from
    the later of now (`running`) and the last one leaving."""
    idle_since = trio.current_time()
    while True:
        if session.subscriber_count > 0:
            await session.wait_subscribers_changed()
            idle_since = trio.current_time()
            continue
        with trio.move_on_at(idle_since + session.limits().idle_seconds):
            await session.wait_subscribers_changed()
            idle_since = trio.current_time()
            continue
        if session.subscriber_count == 0:
            return
