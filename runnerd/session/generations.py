"""One app of a watch session, generation after generation.

Owns `AppPeriod`: while a watch session's workspace is live, one task per
app (`start_app`) runs its generations one at a time over the `WatchHost`:

    generation: nursery.start(host.run_app, launch, sink)
        started (AppStarted) -> `run started {trigger}`; the handle attached;
                                the core's watchers of its address started
        StartError first     -> `run started` + `run failed {reason}`
        Exited(code)         -> `run completed {code, durationMs}`
        Failed(message)      -> `run failed {reason: message}`
    then it waits for a restart (`AppChannel.request_restart`); a restart
    cancels the generation (the backend stops the process) and, when one
    was open, ends it `completed` with the process's exit code as the
    backend reported it (`AppSink.exited`; `RESTART_CODE` when none came),
    before the next generation's `started`.

A restart asked while a generation is still starting lets it start (its
`started` is sent, so every restart asked is at least one generation), then
restarts it; several asked meanwhile are one restart, with the latest
trigger.

So, per app: `run` events in generation order, `started` before its
`completed`, generation N ended before N+1's event, and at most one
process (the next `run_app` starts only after the last one returned or was
cancelled, which the seam says stops its process first). `first_round` is
set once every app of the period reported its first generation (started or
failed to start): the session's `running`.

A self-watching app (`AppStarted.self_watching`, `telo run --watch`) is not
restarted on `watch` changes (the debounce skips it); its generations come
from its kernel's debug frames (`runnerd.watch.kernel.KernelProjection`,
fed by `AppReport.debug`): the process's start only sets the trigger the
next `Kernel.Starting` is attributed to (initial, manual, resume; `watch`
for the kernel's own restarts), and an exit under an open generation closes
it `completed {code}`. When its process offers an in-place reload
(`AppStarted.reload`), a `manual` restart (and a kept app's `resume` on a
live host) while the process is up is that reload, not a restart: the
projection expects the trigger, the process stays, and a reload that raises
is a `progress` line with `app` (nothing else changes). Its first report
(what `running` waits for) is its kernel's first run; a runtime without a
debug stream reports at its process's start. A process that exits before
its kernel reported any run (bad arguments, a crash at load) is that
generation's failure to start: `started` then `failed`, naming the exit
code. A write restarts a self-watching app only when its process is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from runnerd.backend import Exited, Failed, StartError
from runnerd.backend.watch import AppStarted, WatchHost
from runnerd.contract import progress_event
from runnerd.errors import RunnerdError
from runnerd.session.apps import AppChannel
from runnerd.session.appsink import AppOutputSink, AppReport
from runnerd.session.running import leaves
from runnerd.watch.kernel import KernelProjection
from runnerd.watch.runs import RunPhase, RunTrigger
from runnerd.workload.supervision import supervise, tcp_ports

if TYPE_CHECKING:
    from runnerd.session.watchsession import WatchSession

log = logging.getLogger("runnerd.sessions")

# The code a generation a restart stopped is completed with when the
# backend reported no exit code of its process (`AppSink.exited`): the
# SIGTERM the stop sends first (128 + 15), as a run session's exit reads.
RESTART_CODE = 143
TRIGGERS: tuple[RunTrigger, ...] = ("initial", "watch", "manual", "resume")


class AppPeriod:
    """The apps' tasks over one live workspace (see the module docstring)."""

    def __init__(
        self,
        session: WatchSession,
        host: WatchHost,
        nursery: trio.Nursery,
        *,
        adopted: bool = False,
    ) -> None:
        """`adopted`: the host is a previous daemon's (`adopt_watch`), so each
        app's first generation here is the one that daemon left, continued:
        no new `started` (an open one stays open), no trigger expected."""
        self._session = session
        self._adopted = adopted
        self._host = host
        self._nursery = nursery
        self._waiting = {channel.name for channel in session.app_channels()}
        self.first_round = trio.Event()
        if not self._waiting:
            self.first_round.set()

    def start_app(self, channel: AppChannel, trigger: str) -> None:
        """Run `channel`'s generations from one with `trigger`, until the
        period ends or the app leaves the set (one that left: nothing)."""
        if channel.gone:
            self._reported(channel.name)
            return
        first: RunTrigger = next((t for t in TRIGGERS if t == trigger), "resume")
        channel.task_scope = trio.CancelScope()
        channel.ended = trio.Event()
        self._nursery.start_soon(
            self._app_loop, channel, first, self._adopted, name=f"app {channel.name}"
        )

    def _reported(self, name: str) -> None:
        self._waiting.discard(name)
        if not self._waiting:
            self.first_round.set()

    async def _app_loop(self, channel: AppChannel, trigger: RunTrigger, adopted: bool) -> None:
        try:
            with channel.task_scope:
                while True:
                    channel.pending_trigger = None
                    with trio.CancelScope() as scope:
                        channel.generation_scope, channel.starting = scope, True
                        await self._generation(channel, trigger, adopted)
                        adopted = False
                        channel.starting = False
                        if channel.pending_trigger is None:
                            await trio.sleep_forever()  # until a restart
                    channel.generation_scope = None
                    trigger = channel.pending_trigger or "manual"
                    now = trio.current_time()
                    code = channel.take_stopped_code(RESTART_CODE)
                    self._session.emit_run(channel.runs.complete(code, now))
        finally:
            # Stopped under it (a suspend, the app leaving the set, the
            # session ending): its generation ended, as a restart's does.
            channel.generation_scope = None
            code = channel.take_stopped_code(RESTART_CODE)
            if not self._session.detaching:  # detached, its process runs on for a successor
                self._session.emit_run(channel.runs.complete(code, trio.current_time()))
            channel.detach()
            self._reported(channel.name)  # an app gone before its first report
            channel.ended.set()

    async def _generation(self, channel: AppChannel, trigger: RunTrigger, adopted: bool) -> None:
        """One generation, to its end (see the module docstring)."""
        session = self._session
        outcome: Exited | Failed | None = None

        async def run(*, task_status: trio.TaskStatus[None]) -> None:
            nonlocal outcome
            status = _OnStarted(session, channel, trigger, nursery, task_status, self._reported)
            status.adopted = adopted
            sink = AppOutputSink(session, channel)
            outcome = await self._host.run_app(channel.launch(), sink, task_status=status)
            nursery.cancel_scope.cancel()  # its watchers go with it

        reason: str | None = None
        opened = channel.runs.generation  # a kernel's runs count on from here
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(run)
        except* StartError as group:
            first = leaves(group)[0]
            assert isinstance(first, StartError)
            reason = first.message
        finally:
            channel.detach()
        now = trio.current_time()
        if reason is not None:
            channel.runs.abandon()  # adopted: the open one the previous daemon left
            session.emit_run(*channel.runs.start_failed(trigger, reason, now))
            self._reported(channel.name)
        elif isinstance(outcome, Exited):
            completed = channel.runs.complete(outcome.code, now)  # kernel or not
            if completed is None and channel.self_watching and channel.runs.generation == opened:
                why = f"the runtime exited with code {outcome.code} before it reported a run"
                session.emit_run(*channel.runs.start_failed(trigger, why, now))
            session.emit_run(completed)
            channel.kernel = None
        elif isinstance(outcome, Failed):
            session.emit_run(channel.runs.fail(outcome.message))
        channel.on_kernel_run = None
        self._reported(channel.name)  # a self-watching one that ended before its kernel said


class _InPlace:
    """A self-watching process's in-place reload (`AppStarted.reload`), as
    `AppChannel.reload_in_place`: the kernel projection expects the trigger
    (its next `Kernel.Starting` is that generation), and the reload runs in
    the generation's nursery (it goes when the process does). One that
    raises is a `progress` line with the app and nothing else changes (the
    expectation taken back)."""

    def __init__(
        self,
        session: WatchSession,
        channel: AppChannel,
        reload: Callable[[], Awaitable[None]],
        nursery: trio.Nursery,
    ) -> None:
        self._session = session
        self._channel = channel
        self._reload = reload
        self._nursery = nursery

    def __call__(self, trigger: RunTrigger) -> bool:
        kernel = self._channel.kernel
        if kernel is None:
            return False
        before = kernel.expected
        kernel.expect(trigger)
        self._nursery.start_soon(self._run, kernel, trigger, before)
        return True

    async def _run(
        self, kernel: KernelProjection, trigger: RunTrigger, before: RunTrigger | None
    ) -> None:
        try:
            await self._reload()
        except RunnerdError as exc:
            if kernel.expected == trigger:
                kernel.expect(before)
            name = self._channel.name
            log.info("reload failed: %s", exc.message, extra={"session_id": self._session.id})
            self._session.emit(progress_event("boot", f"reload failed: {exc.message}", app=name))


class _OnStarted:
    """The `task_status` a generation's `run_app` is given: `started(AppStarted)`
    attaches the handle and emits `run started` inside the backend's call,
    before it can report anything else, then starts the core's watchers of
    its address in the generation's nursery."""

    def __init__(
        self,
        session: WatchSession,
        channel: AppChannel,
        trigger: RunTrigger,
        nursery: trio.Nursery,
        task_status: trio.TaskStatus[None],
        reported: Callable[[str], None],
    ) -> None:
        self._session = session
        self._channel = channel
        self._trigger = trigger
        self._nursery = nursery
        self._task_status = task_status
        self._reported = reported
        self.adopted = False  # the generation a previous daemon left (AppPeriod)

    def started(self, value: AppStarted | None = None) -> None:
        if not isinstance(value, AppStarted):
            raise TypeError(f"a watch host reports AppStarted, not {type(value).__name__}")
        channel = self._channel
        channel.starting = False
        channel.attach(value.handle, self._nursery)
        channel.self_watching = value.self_watching
        name = channel.name
        adopted = self.adopted
        if value.self_watching:
            # Adopted: its kernel replays the frames already projected.
            skip = channel.kernel_frames if adopted else 0
            channel.kernel = KernelProjection(channel.runs, skip=skip)
            if not adopted:  # adopted: its kernel's next run is its own (`watch`)
                channel.kernel.expect(self._trigger)
            if value.reload is not None:
                reload = _InPlace(self._session, channel, value.reload, self._nursery)
                channel.reload_in_place = reload
        else:
            channel.kernel = None
            if not (adopted and channel.runs.phase is RunPhase.OPEN):  # adopted: it goes on
                self._session.emit_run(channel.runs.start(self._trigger, trio.current_time()))
        address = value.address
        watched = address is not None and address.inspect_port is not None
        if value.self_watching and watched and not adopted:
            # Its generation 1 is its kernel's first run (or its exit before
            # one): `running` waits for that, not for the process.
            channel.on_kernel_run = lambda: self._reported(name)
        else:
            self._reported(name)
        if value.address is not None:
            report = AppReport(self._session, channel)
            self._nursery.start_soon(supervise, value.address, tcp_ports(channel.ports), report)
        self._task_status.started()
        if channel.pending_trigger is not None and channel.generation_scope is not None:
            channel.generation_scope.cancel()  # a restart asked while it started
