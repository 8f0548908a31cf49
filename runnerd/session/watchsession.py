"""A watch session as the routes see it: `WatchSession`.

Owns a watch session's client-facing state around the `Session` it is (its
record, event ring, stop scope): its apps (`runnerd.session.appset.AppSet`:
`AppChannel`s, declaration order, kept across `PUT /apps` by name), the
live workspace while it runs (`host`), the reload budget, the restart
debounce, the latest checkpoint, and the members the routes call
(`runnerd.session.surface`), each refusing with the contract's
`WatchError`. The driver (`runnerd.session.watching`) runs it: it sets
`host` and `period` while the apps run, and answers the requests made here
(restarts, the debounce, a resume) there.

A run session's behaviour is untouched: this is a subclass, and only the
manager's `start_watch` makes one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Protocol

import trio

from runnerd.backend import CreationSpec, EndIntent, RunSpec
from runnerd.backend.watch import ChangeSet, Checkpoint, WatchHost, WatchSpec, WorkspaceFile
from runnerd.config import WatchConfig
from runnerd.contract import RunEvent, RunnerEndpoint, RunStatus, starting, suspended
from runnerd.errors import RunnerdError
from runnerd.metrics import NULL_METRICS, Metrics
from runnerd.session.apps import AppChannel
from runnerd.session.appset import AppSet
from runnerd.session.publishing import Publisher
from runnerd.session.registry import SessionRecord
from runnerd.session.reopen import REOPEN_WAIT_S, Reopen, ask_reopen
from runnerd.session.session import Session
from runnerd.session.watchspec import WatchSessionSpec
from runnerd.watch.apps import AppSpec
from runnerd.watch.budget import ReloadBudget
from runnerd.watch.debounce import RestartDebounce
from runnerd.watch.errors import WatchError
from runnerd.watch.kernel import KernelProjection
from runnerd.watch.runs import AppRunEvent, SessionRuns


class Keeper(Protocol):
    """What keeps the session's watch record (`runnerd.session.watchadopt`),
    told of every change the record holds. Synchronous, never raises."""

    def changed(self) -> None:
        """Its status, app set, generations or checkpoint changed."""

    def issued(self) -> None:
        """Event ids or `/io` seqs were issued (a cheap check of the floors)."""


class Period(Protocol):
    """The driver's running apps, while the workspace is live: where a new
    app's task starts (`PUT /apps`)."""

    def start_app(self, channel: AppChannel, trigger: str) -> None: ...


@dataclass(frozen=True)
class AgentPlan:
    """Whether the agent runs in this session's app set: `conflict` is the
    progress message when an app declares its port (it then does not)."""

    endpoint: RunnerEndpoint
    conflict: str | None


class WatchSession(Session):
    """One watch session (see the module docstring)."""

    mode = "watch"

    def __init__(
        self,
        record: SessionRecord,
        spec: WatchSessionSpec,
        wall_clock: Callable[[], float],
        limits: Callable[[], WatchConfig],
        *,
        ring_bytes: int,
        metrics: Metrics = NULL_METRICS,
        backend_name: str = "",
        fixed_apps: bool = False,
    ) -> None:
        """`limits`: the `[watch]` table in effect (read when each limit
        applies). `fixed_apps`: the backend's places hold a fixed app set
        (`PUT /apps` is a reopen, `runnerd.session.reopen`)."""
        # The watch record's keeper (None: no record kept); first, as the
        # hooks below (`_notify`, `_set_status`) read it.
        self.keeper: Keeper | None = None
        super().__init__(
            record,
            RunSpec(spec.watch.identity, spec.watch.creation),
            wall_clock,
            metrics,
            backend_name,
        )
        self.watch_spec = spec
        self.limits = limits
        self._apps = AppSet(
            spec.apps, ring_bytes=ring_bytes, notify=self._notify, session_id=self.id
        )
        self.budget = ReloadBudget(limits().reload_limit)
        self.debounce = RestartDebounce()
        self.debounce_changed = trio.Event()
        # Each self-watching app's kernel and the lifecycle frames it had
        # projected when the pending burst's first change was written (None:
        # no burst pending): the debounce reloads those that did not react.
        self.burst_marks: dict[str, tuple[KernelProjection, int]] | None = None
        # The driver's: the live workspace and the running apps (None: not running).
        self.host: WatchHost | None = None
        self.period: Period | None = None
        self.publisher: Publisher | None = None
        self.checkpoint: Checkpoint | None = None
        self.agent_running = False
        self.evicted = False  # gone from the registry (suspended too long, or a full one)
        self.resume_requested = trio.Event()
        self._serving = False
        self.fixed_apps = fixed_apps
        self._apps_lock = trio.Lock()  # one `PUT /apps` at a time
        # A reopen (`runnerd.session.reopen`): the request the driver is to
        # carry out (`reopen_asked` wakes it), and while one is under way
        # the event the workspace routes wait on for the new host.
        self.reopen: Reopen | None = None
        self.reopen_asked = trio.Event()
        self._reopening: trio.Event | None = None
        # The TTL's base: creation, then each resume (epoch seconds).
        self.live_since = record.created_at

    @property
    def runs(self) -> SessionRuns:
        return self._apps.runs

    @property
    def _channels(self) -> dict[str, AppChannel]:
        return self._apps.channels

    def adopt_app(
        self,
        name: str,
        *,
        slot: int,
        generation: int,
        open_: bool,
        seq_floor: int,
        kernel_frames: int = 0,
    ) -> None:
        """Continue app `name` where a previous daemon left it (adoption):
        its slot, its counter (and open generation), its seqs above
        `seq_floor` (what came before is a replay gap), the lifecycle frames
        of its kernel already projected (`KernelProjection` `skip`)."""
        self._apps.adopt(
            name,
            slot=slot,
            generation=generation,
            open_=open_,
            seq_floor=seq_floor,
            kernel_frames=kernel_frames,
        )

    def _notify(self) -> None:
        super()._notify()
        if self.keeper is not None:
            self.keeper.issued()

    def _set_status(self, status: RunStatus) -> bool:
        changed = super()._set_status(status)
        if changed and self.keeper is not None:
            self.keeper.changed()
        return changed

    def _record_changed(self) -> None:
        if self.keeper is not None:
            self.keeper.changed()

    # -- what GET shows --------------------------------------------------------

    @property
    def agent_name(self) -> str | None:
        agent, plan = self.watch_spec.agent, self.agent_plan()
        return agent.name if agent is not None and plan is not None and not plan.conflict else None

    def app_channels(self) -> list[AppChannel]:
        return list(self._channels.values())

    def app_channel(self, name: str | None) -> AppChannel | None:
        if name is None:
            return next(iter(self._channels.values())) if len(self._channels) == 1 else None
        return self._channels.get(name)

    def agent_plan(self) -> AgentPlan | None:
        """The agent's endpoint, and whether an app's port keeps it from running."""
        agent = self.watch_spec.agent
        if agent is None:
            return None
        endpoint: RunnerEndpoint = {"host": "", "port": agent.port, "protocol": "tcp"}
        if self.watch_spec.agent_token is not None:
            endpoint["token"] = self.watch_spec.agent_token
        for channel in self._channels.values():
            if any(p.protocol == "tcp" and p.port == agent.port for p in channel.ports):
                message = (
                    f"co-resident agent {agent.name!r} was not started: it listens on tcp "
                    f"port {agent.port}, which app {channel.name!r} declares"
                )
                return AgentPlan(endpoint, message)
        return AgentPlan(endpoint, None)

    def open_spec(self) -> WatchSpec:
        """What entering the session's place is given now: the latest
        checkpoint (None: seed from the bundle), the app set (each app's
        launch, declaration order, with its slot) and the agent (None when
        there is none or an app's port keeps it from running)."""
        plan = self.agent_plan()
        agent = self.watch_spec.agent if plan is not None and plan.conflict is None else None
        launches = tuple(channel.launch() for channel in self._channels.values())
        watch = self.watch_spec.watch
        return replace(watch, checkpoint=self.checkpoint, apps=launches, agent=agent)

    # -- the routes' operations ------------------------------------------------

    @property
    def serving(self) -> bool:
        """The workspace is live and the session `running`."""
        return self._serving and self.host is not None and self.status["kind"] == "running"

    def require_running(self) -> None:
        """409 not_running unless serving (or reopening: still `running`)."""
        reopening = self._reopening is not None and self.status["kind"] == "running"
        if not self.serving and not reopening:
            kind = self.status["kind"]
            raise WatchError(409, "not_running", f"the session is {kind}: it has no live workspace")

    @contextmanager
    def reload_budget(self) -> Iterator[None]:
        self.budget.limit = self.limits().reload_limit
        now = trio.current_time()
        if not self.budget.try_spend(now):
            # Whole seconds, rounded up: a client that waits this long is
            # admitted (RFC 9110 Retry-After; the message says it too).
            wait_s = max(1, math.ceil(self.budget.retry_after_s(now)))
            raise WatchError(
                429,
                "reload_rate_limited",
                f"{self.budget.limit} workspace writes and reloads in the last 60 s "
                f"(watch.reload_limit); try again in {wait_s} s",
                headers={"retry-after": str(wait_s)},
            )
        try:
            yield
        except RunnerdError:
            self.budget.refund(now)  # refused after all: it changes nothing
            raise

    async def _live_host(self) -> WatchHost:
        """The live host; during a reopen, the new one once it serves."""
        reopening = self._reopening
        if reopening is not None:
            with trio.move_on_after(REOPEN_WAIT_S):
                await reopening.wait()
        if not self.serving:
            self.require_running()  # what it is now, said
            raise WatchError(409, "not_running", "the session has no live workspace yet")
        assert self.host is not None
        return self.host

    async def list_workspace(self) -> list[WorkspaceFile]:
        return await (await self._live_host()).list_files()

    async def read_workspace_file(self, path: str) -> bytes:
        return await (await self._live_host()).read_file(path)

    async def apply_changes(self, changes: ChangeSet) -> tuple[int, int]:
        host = await self._live_host()
        # Taken before the write lands: a kernel may react to it at once.
        marks = {n: (c.kernel, c.kernel.consumed) for n, c in self._channels.items() if c.kernel}
        written, deleted = await host.apply(changes)
        self.metrics.workspace_writes(written, deleted)
        if (written or deleted) and self.burst_marks is None:
            self.burst_marks = marks  # the burst's first change
        if written or deleted:  # a set that changed no path restarts nothing
            self.debounce.change(trio.current_time())
            self.debounce_changed.set()
        return written, deleted

    def reload(self, app: str | None) -> list[str]:
        if app is not None and app not in self._channels:
            raise WatchError(404, "unknown_app", f"the session has no app {app!r}")
        names = [app] if app is not None else list(self._channels)
        for name in names:
            self._channels[name].request_restart("manual")
        return names

    async def replace_apps(self, apps: tuple[AppSpec, ...]) -> list[str]:
        """`PUT /apps`: the set becomes `apps`; returns their names once GET
        shows it. On a live app set the dropped apps are stopped first and
        the rest restart (`resume`) on the same host; on a fixed one it is
        a reopen (`runnerd.session.reopen`)."""
        async with self._apps_lock:
            host = await self._live_host()
            if self.fixed_apps:
                await ask_reopen(self, host, apps)
                return [app.name for app in apps]
            return await self._replace_live(apps)

    async def _replace_live(self, apps: tuple[AppSpec, ...]) -> list[str]:
        names = [app.name for app in apps]
        dropped = [c for name, c in self._channels.items() if name not in names]
        for channel in dropped:  # stopped first: each ends its open generation
            channel.gone = True
            channel.task_scope.cancel()
        for channel in dropped:
            await channel.ended.wait()
        kept = self._swap_channels(apps)
        period = self.period  # None: suspended meanwhile; a resume starts them all
        for name, channel in self._channels.items():
            if name in kept:
                channel.request_restart("resume")
            elif period is not None:
                period.start_app(channel, "resume")
        if self._serving and self.publisher is not None:
            await self.publisher.publish()  # the new set's ports, before the 202
        self._notify()
        return names

    def _swap_channels(self, apps: tuple[AppSpec, ...]) -> set[str]:
        """The set becomes `apps` (`AppSet.swap`); the names kept."""
        kept = self._apps.swap(apps)
        self._record_changed()
        return kept

    # -- a reopen (`runnerd.session.reopen`) -------------------------------------

    async def keep_checkpoint(self, checkpoint: Checkpoint) -> None:
        """`checkpoint` is the latest from now on; the one it replaces is discarded."""
        old, self.checkpoint = self.checkpoint, checkpoint
        self._record_changed()
        if old is not None and old is not checkpoint:
            await old.discard()

    def ask_reopen(self, request: Reopen) -> None:
        """Hand the driver a reopen; from now the workspace routes wait.
        WatchError 409 not_running when the session no longer serves."""
        if not self.serving or self.reopen is not None:
            self.require_running()
            raise WatchError(409, "not_running", "the session is changing its app set")
        self.reopen = request
        self._reopening = trio.Event()
        self.reopen_asked.set()

    def take_reopen(self) -> Reopen | None:
        """The driver's: the reopen asked, if any (it is carried out now)."""
        request, self.reopen = self.reopen, None
        self.reopen_asked = trio.Event()
        return request

    def apply_reopen(self, request: Reopen) -> None:
        """The driver's, with every app stopped: the new set is the session's."""
        self._swap_channels(request.apps)
        request.applied.set()
        self._notify()

    def end_reopen(self) -> None:
        """The reopen is over (served again, or the session left its place):
        a request not taken is refused, and the waiting routes go on."""
        request = self.take_reopen()
        if request is not None:
            request.refused = True
            request.applied.set()
        reopening, self._reopening = self._reopening, None
        if reopening is not None:
            reopening.set()

    # -- the driver's side ------------------------------------------------------

    def emit_run(self, *events: AppRunEvent | None) -> None:
        """Append `run` events (None: the machine had nothing to say)."""
        for event in events:
            if event is not None and self.record.emit(event) is not None:
                if event["phase"] == "started":
                    self.metrics.app_restart(event["trigger"])
                self._record_changed()  # a counter, or whether one is open
                self._notify()

    def emit(self, event: RunEvent) -> None:
        """Append any non-status event (a `progress`/`debug`/`reachability`
        carrying `app`)."""
        if self.record.emit(event) is not None:
            self._notify()

    def set_status(self, status: RunStatus) -> None:
        """Publish `status` unless it is already the one in effect."""
        if self.status != status:
            self._set_status(status)

    def serve(self) -> None:
        """Every app's first generation of this period reported: the driver
        publishes the port set next, and that is `running`
        (`runnerd.session.publishing`). A reopen is over."""
        self._serving = True
        self.end_reopen()

    @property
    def detaching(self) -> bool:
        """The daemon restarts and leaves the session's place to a successor."""
        return self.end_requested is EndIntent.DETACH

    @property
    def serving_period(self) -> bool:
        """Between `serve` and `unserve`: the apps of a live host serve."""
        return self._serving

    def request_publish(self) -> None:
        """A port set changed while serving: publish the session's set again
        (`running.endpoints` follows what the host published)."""
        if self._serving and self.publisher is not None:
            self.publisher.request()

    def unserve(self) -> None:
        """The apps are being stopped: the workspace routes answer 409 from now on."""
        self._serving = False

    def mark_suspended(self) -> None:
        self.record.dormant_at = self._wall_clock()
        self.resume_requested = trio.Event()
        self.set_status(suspended())
        self.metrics.watch_suspend()

    def resume(self) -> None:
        """`POST /resume` on a suspended session: `starting` now, then the
        driver brings it back (the caller checked the status and the cap)."""
        self.record.dormant_at = None
        self.live_since = self._wall_clock()
        self.set_status(starting())
        self.resume_requested.set()
        self.metrics.watch_resume()

    def evict(self) -> None:
        """Gone from the registry while suspended: end it (its checkpoint is discarded)."""
        self.evicted = True
        self.request_stop()

    def release_creation(self) -> None:
        """Forget the bundle and the secrets (the env, the agent's token)."""
        super().release_creation()
        watch = self.watch_spec.watch
        creation = CreationSpec(watch.creation.image, {})
        self.watch_spec = replace(
            self.watch_spec, watch=replace(watch, creation=creation), agent=None, agent_token=None
        )
