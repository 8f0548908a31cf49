"""One app of a watch session as a client sees it: `AppChannel`.

Owns an app's output ring (its own `ByteRing`, its own seqs from 1: each
chunk is ONE stream byte, `runnerd.backend.watch.OutputStream`, then at most
`CHUNK_BYTES` of payload, as the `/io` binary frame carries it), its spec
(`io`, `ports`, entry), its generations (`runnerd.watch.runs.AppRuns`), and
the current process's handle: stdin goes to it (dropped while none runs),
and a `tty` app's resizes reach it coalesced (`runnerd.session.resize`, as
a run session's). The driver (`runnerd.session.watching`) attaches and
detaches the handle around each generation and keeps the restart requests
here (`request_restart`), so a restart cancels exactly the generation that
runs.

Every ring append calls `notify` (the session's wake-up), so `/io` readers
follow the session's reader contract (`Session.wait_change`).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from runnerd.backend import WorkloadHandle
from runnerd.backend.watch import AppLaunch, OutputStream
from runnerd.contract import IoMode, PortMapping
from runnerd.session.resize import ResizeCoalescer
from runnerd.session.rings import CHUNK_BYTES, ByteRing
from runnerd.watch.apps import AppSpec
from runnerd.watch.kernel import KernelProjection
from runnerd.watch.runs import AppRuns, RunTrigger


class AppChannel:
    """One app of a watch session (see the module docstring)."""

    def __init__(
        self,
        spec: AppSpec,
        runs: AppRuns,
        *,
        slot: int,
        ring_bytes: int,
        notify: Callable[[], None],
        session_id: str = "",
        seq_floor: int = 0,
    ) -> None:
        self.spec = spec
        self.runs = runs
        self.slot = slot
        self.ring = ByteRing(ring_bytes, seq_floor)
        self._notify = notify
        self._extra = {"session_id": session_id, "app": spec.name}
        self._handle: WorkloadHandle | None = None
        self._resize: ResizeCoalescer | None = None
        self._size: tuple[int, int] | None = None  # the latest asked, for the next process
        # The driver's: its runtime restarts it on changes by itself, and
        # its generations are projected from its kernel's debug frames.
        self.self_watching = False
        self.kernel: KernelProjection | None = None
        # Adopted: the lifecycle frames of its process the previous daemon's
        # projection consumed (the kernel's replay of them is skipped).
        self.kernel_frames = 0
        # Called once its kernel reported a run (a self-watching app's first
        # report, what `running` waits for), then cleared.
        self.on_kernel_run: Callable[[], None] | None = None
        # The driver's restart bookkeeping (`request_restart`).
        self.pending_trigger: RunTrigger | None = None
        # Set while a self-watching process that offers an in-place reload
        # (`AppStarted.reload`) is up: starts one for `trigger` and says
        # True, or False when it cannot (restart it then).
        self.reload_in_place: Callable[[RunTrigger], bool] | None = None
        self.generation_scope: trio.CancelScope | None = None
        self.starting = False  # its generation's process is being started
        # The exit code the backend reported for a process it stopped
        # (`AppSink.exited`), until the stopped generation's `completed` takes it.
        self.stopped_code: int | None = None
        # Cancelled when the app leaves the set (`PUT /apps`); `ended` once its task is gone.
        self.task_scope = trio.CancelScope()
        self.ended = trio.Event()
        self.gone = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def io(self) -> IoMode:
        return self.spec.io

    @property
    def ports(self) -> tuple[PortMapping, ...]:
        return self.spec.ports

    @property
    def generation(self) -> int:
        """The latest generation (0 before the first)."""
        return self.runs.generation

    @property
    def running(self) -> bool:
        """A process of this app exists now (its handle is attached)."""
        return self._handle is not None

    @property
    def exited(self) -> bool:
        """Its last process ended on its own: none runs, none is being
        started, and no restart is asked."""
        return self._handle is None and not self.starting and self.pending_trigger is None

    def launch(self) -> AppLaunch:
        """What its next generation runs."""
        spec = self.spec
        return AppLaunch(spec.name, spec.entry, spec.io, spec.ports, self.slot)

    # -- the client's side ---------------------------------------------------

    def write_stdin(self, data: bytes) -> None:
        """To the current process's stdin; dropped while none runs."""
        if data and self._handle is not None:
            self._handle.write(data)

    def resize(self, cols: int, rows: int) -> None:
        """A `tty` app's terminal, coalesced (50 ms, latest wins); the size
        is kept for the next generation's process too. A no-op on `streams`."""
        if self.io != "tty":
            return
        self._size = (cols, rows)
        if self._resize is not None:
            self._resize.request(cols, rows)

    # -- the driver's side -----------------------------------------------------

    def output(self, data: bytes, stream: OutputStream) -> None:
        """Append `data` as chunks tagged with `stream` (≤ CHUNK_BYTES payload each)."""
        if not data:
            return
        tag = bytes((int(stream),))
        view = memoryview(data)
        for start in range(0, len(view), CHUNK_BYTES):
            self.ring.append_chunk(tag + bytes(view[start : start + CHUNK_BYTES]))
        self._notify()

    def output_lost(self) -> None:
        self.ring.mark_lost()
        self._notify()

    def attach(self, handle: WorkloadHandle, nursery: trio.Nursery) -> None:
        """A generation's process exists: stdin and resizes reach `handle`
        (deferred resizes run in `nursery`, the generation's)."""
        self._handle = handle
        self.stopped_code = None  # a new process: nothing of the last one's
        if self.io == "tty":
            self._resize = ResizeCoalescer(handle.resize, nursery, self._extra)
            if self._size is not None:
                self._resize.request(*self._size)

    def detach(self) -> None:
        """The generation's process is gone: stdin is dropped from now on."""
        self._handle = None
        self.reload_in_place = None
        if self._resize is not None:
            self._resize.close()
            self._resize = None

    def take_stopped_code(self, default: int) -> int:
        """The code a generation stopped under it completes with: its
        process's real exit code as the backend reported it, else `default`;
        taken once."""
        code, self.stopped_code = self.stopped_code, None
        return default if code is None else code

    def request_restart(self, trigger: RunTrigger) -> None:
        """Start a new generation with `trigger`: the running one (or the
        wait after the last one ended) is cancelled, and the backend stops
        its process before the next starts. One still starting is let
        start first (its `started` is sent), then restarted. A
        self-watching process that is up and offers an in-place reload is
        reloaded instead (`manual`, `resume`): its kernel starts the next
        generation without the process stopping."""
        up = self._handle is not None and not self.starting and self.pending_trigger is None
        if trigger in ("manual", "resume") and up and self.reload_in_place is not None:
            if self.reload_in_place(trigger):
                return
        self.pending_trigger = trigger
        if self.generation_scope is not None and not self.starting:
            self.generation_scope.cancel()
