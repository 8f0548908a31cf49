"""Warm sandboxes: the next run sessions' sandboxes, made ahead (issue 22).

Owns `WarmPool` (`local.warm_sandboxes` slots kept ready, in the backend's
nursery: `runnerd.local.provider.open_backend`) and `WarmSlot` (one of
them). A slot is a run session's sandbox as the cold path makes it, stopped
just before the workload: its uid from the session uid allocator, its
directory's skeleton (`workdir/.warm-<n>/{app,work}`, empty), its PTY
(80x24), the compiled init spawned with `--warm` (`nsinit.c`): the same
namespaces, parent-death signal, covers and mounts, slirp4netns attached
and ready; waiting for its go. A session that takes one renames the
directory to its id (`WarmSlot.take`), writes its bundle there, sets the
terminal size and sends the go with its argv, cwd and env
(`sessioninit.go_file`); the init moves its bind mount to the session's
name before the workload runs, so the workload sees what a cold start
shows it (`runnerd.local.backend`'s `_run_warm`).

Invariants: a slot holds no secret and no client data until taken (no env,
no bundle, no name of a session); each is taken by one session at most and
never comes back; the pool closes every slot it still holds (processes
killed and reaped, slirp4netns too, directory discarded, uid released) when
the slot dies, is evicted (`evict`: a cold start short of a uid) or the pool
stops. A daemon killed outright takes the slots' processes along (the
init's parent-death signal, slirp4netns's exit fd) and leaves their
directories to the next start's sweep (`workdir.WARM_PREFIX`).

Error handling: a slot that cannot be made is logged and tried again after
`RETRY_S`, doubling up to `MAX_RETRY_S`; one that dies while waiting is
logged and replaced. A taken slot is its session's to close.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import trio

from runnerd.backend import BundleSpec, StartError
from runnerd.local.forward import SessionNetwork, open_session_network
from runnerd.local.identity import SessionIdentity, SessionUids
from runnerd.local.network import NetworkPlan
from runnerd.local.pty import PtyProcess
from runnerd.local.sessioninit import Launch, go_file
from runnerd.local.spawn import spawn_warm_pty_process, start_warm
from runnerd.local.trash import Trash
from runnerd.local.workdir import (
    WARM_PREFIX,
    SessionDir,
    WorkdirError,
    prepare_session_dir,
    session_layout,
    write_bundle,
)

log = logging.getLogger(__name__)

RETRY_S = 1.0
MAX_RETRY_S = 60.0
# A bundle this small is written on the event loop (~4 syscalls a file,
# well under a millisecond): a worker thread's hop cost more than the
# writes, waiting for the GIL behind the loop that serves the session's
# own requests meanwhile (strace of a pooled start: 8 ms of its 21).
ON_LOOP_FILES = 8
ON_LOOP_BYTES = 64 * 1024


class SlotKit:
    """What the backend makes its slots of (one per backend): `launch`
    gives a session directory's and a uid's `Launch` (the cold path's)."""

    def __init__(
        self,
        workdir: Path,
        stop_grace_s: float,
        network: NetworkPlan,
        uids: SessionUids | None,
        trash: Trash,
        launch: Callable[[SessionDir, SessionIdentity | None], Launch],
    ) -> None:
        self.workdir, self.stop_grace_s, self.network = workdir, stop_grace_s, network
        self.uids, self.trash, self.launch = uids, trash, launch

    def uid_free(self) -> bool:
        return self.uids is None or self.uids.free > 0


class WarmSlot:
    """One sandbox made ahead (see the module). Closed once, by `aclose`:
    by the pool until taken, by its session after."""

    def __init__(self, name: str, layout: SessionDir, kit: SlotKit) -> None:
        self.name = name
        self.layout = layout  # where its directory is now (renamed by `take`)
        self._kit = kit
        self._stack = contextlib.AsyncExitStack()
        self.identity: SessionIdentity | None = None
        self.watching = trio.CancelScope()  # its keeper's wait, cancelled by a take
        # Set once made (`open_slot`):
        self.proc: PtyProcess
        self.net: SessionNetwork
        self._status_r: int | None = None

    def alive(self) -> bool:
        """Whether its init and slirp4netns still run; never blocks."""
        return not self.proc.has_exited() and self.net.alive()

    async def adopt(self, session_id: str, bundle: BundleSpec | None) -> SessionDir:
        """Its directory renamed to `session_id`'s (on the host; the init
        moves its bind mount at the go) with `bundle` written in; its log
        lines are that session's from now on.

        Raises:
            StartError: as the cold path's session directory.
        """
        root = self._kit.workdir / session_id
        try:
            # mkdir first, as the cold path's (a name taken is an error:
            # rename(2) alone would replace an empty directory), then the
            # rename onto it. On the loop: two syscalls, and the directory
            # must be known renamed before anything can fail (`_discard_dir`).
            os.mkdir(root, 0o700)
            try:
                os.rename(self.layout.root, root)
            except OSError:
                os.rmdir(root)
                raise
        except OSError as exc:
            why = f"cannot create the session directory: {exc.strerror}"
            raise StartError("provision", why) from exc
        self.layout = session_layout(root)
        self.proc.relabel(session_id)
        self.net.label = session_id
        owner = None if self.identity is None else (self.identity.uid, self.identity.gid)
        try:
            if bundle is None or _small(bundle):
                await trio.lowlevel.checkpoint()
                return write_bundle(self.layout, bundle, owner)
            return await trio.to_thread.run_sync(write_bundle, self.layout, bundle, owner)
        except WorkdirError as exc:
            raise StartError("provision", str(exc)) from exc

    async def go(
        self,
        session_dir: SessionDir,
        argv: Sequence[str],
        env: Mapping[str, str],
        size: tuple[int, int] | None,
    ) -> PtyProcess | None:
        """Its workload (`argv`, `env`) started in `session_dir` (`adopt`'s)
        on a terminal of `size` (None: 80x24); its process once exec'd, or
        None when the sandbox failed (logged; its directory has its own
        name back, for the session to start cold under its).

        Raises:
            OSError: the program could not be executed (`filename` argv[0]).
            StartError: `argv` or `env` holds a NUL.
        """
        if size is not None:
            self.proc.resize(*size)
        cwd = session_dir.work if session_dir.entry is None else session_dir.app
        try:
            go_fd = go_file(session_dir.root, cwd, argv, env)
        except ValueError as exc:
            raise StartError("provision", str(exc)) from exc
        status_r, self._status_r = self._status_r, None
        assert status_r is not None, "one go per slot"
        try:
            go = functools.partial(self.net.go, go_fd)
            return await start_warm(self.proc, status_r, argv[0], go)
        except OSError as exc:
            if exc.filename is not None:
                raise  # the workload's program: as a cold start's
            log.warning("warm sandbox %s failed: %s", self.name, exc, extra=self.proc.log_extra)
        finally:
            os.close(go_fd)
        with contextlib.suppress(OSError):
            os.rename(self.layout.root, self._kit.workdir / self.name)
            self.layout = session_layout(self._kit.workdir / self.name)
        return None

    async def aclose(self) -> None:
        """Its processes stopped and reaped, its directory discarded, its
        uid released. Shielded."""
        with trio.CancelScope(shield=True):
            await self._stack.aclose()

    async def _discard_dir(self) -> None:
        with trio.CancelScope(shield=True):
            await self._kit.trash.discard(self.layout.root)

    def _close_status(self) -> None:
        if self._status_r is not None:
            os.close(self._status_r)
            self._status_r = None


def _small(bundle: BundleSpec) -> bool:
    if len(bundle.files) > ON_LOOP_FILES:
        return False
    return sum(len(contents) for _, contents in bundle.files) <= ON_LOOP_BYTES // 4  # UTF-8


async def open_slot(kit: SlotKit, name: str) -> WarmSlot:
    """A slot named `name` (see the module), made as a session's sandbox is.

    Raises:
        OSError: no uid free, or it could not be spawned or attached.
        WorkdirError: its directory could not be made.
    """
    async with contextlib.AsyncExitStack() as stack:
        identity = None
        if kit.uids is not None:
            identity = kit.uids.acquire()
            if identity is None:
                raise OSError(errno.EAGAIN, "every session uid is in use")
            # Last out: every process of the uid is gone by then.
            stack.callback(kit.uids.release, identity)
        owner = None if identity is None else (identity.uid, identity.gid)
        layout = await trio.to_thread.run_sync(prepare_session_dir, kit.workdir, name, None, owner)
        slot = WarmSlot(name, layout, kit)
        slot.identity = identity
        stack.push_async_callback(slot._discard_dir)
        slot.net = await stack.enter_async_context(open_session_network(kit.network, name))
        launch = replace(kit.launch(layout, identity), warm=True)
        slot.proc, slot._status_r = await spawn_warm_pty_process(
            cwd=layout.app,
            stop_grace_s=kit.stop_grace_s,
            launch=launch,
            label=name,
            sockets_fd=slot.net.child_fd,
            attach=slot.net.attach_warm,
        )
        stack.push_async_callback(slot.proc.aclose)
        stack.callback(slot._close_status)
        slot._stack = stack.pop_all()
    return slot


class WarmPool:
    """Up to `size` slots kept ready while `run` runs (see the module)."""

    def __init__(self, size: int, kit: SlotKit) -> None:
        self.size = size
        self._kit = kit
        self._ready: list[WarmSlot] = []  # oldest first
        self._wanted = trio.Event()  # taken, lost or evicted: make another
        self._names = itertools.count(1)
        self._scope = trio.CancelScope()
        self._done = trio.Event()
        self._changed = trio.lowlevel.ParkingLot()  # `ready` changed

    @property
    def ready(self) -> tuple[WarmSlot, ...]:
        """The slots ready now, oldest first (to look at: `take` takes)."""
        return tuple(self._ready)

    async def wait_until(self, condition: Callable[[WarmPool], bool]) -> None:
        """Return once `condition(self)` holds, checked after every change
        of `ready` (what the tests and the benchmarks wait for)."""
        while not condition(self):
            await self._changed.park()

    def take(self) -> WarmSlot | None:
        """The oldest ready slot, now the caller's to close (check `alive`
        first: one that died a moment ago is not noticed yet), replaced
        once the caller says `refill`; None when none is ready (then one
        is made meanwhile). Never blocks."""
        if not self._ready:
            self.refill()
            return None
        slot = self._ready.pop(0)
        slot.watching.cancel()  # its keeper lets go of it
        self._changed.unpark_all()
        return slot

    def refill(self) -> None:
        """Make slots again until `size` are ready: called once a taken
        slot's session has its workload (or has given the slot up), so
        that making its replacement (a session's start's worth of work)
        does not compete with that start. Never blocks."""
        self._wanted.set()

    async def evict(self) -> bool:
        """Close one ready slot (its uid is then free for a cold start);
        False when none was ready."""
        slot = self.take()
        if slot is None:
            return False
        await slot.aclose()
        self.refill()  # (it finds no uid free until a session ends)
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Make slots until `size` are ready, one at a time, and again
        after each take or loss, until `aclose` (or cancelled); every slot
        still held is closed before it returns."""
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    task_status.started()
                    await self._refill(nursery)
        finally:
            self._done.set()

    async def aclose(self) -> None:
        """Stop `run` and wait until it has closed every slot. Shielded."""
        self._scope.cancel()
        with trio.CancelScope(shield=True):
            await self._done.wait()

    async def _refill(self, nursery: trio.Nursery) -> None:
        retry_s = RETRY_S
        while True:
            if len(self._ready) >= self.size or not self._kit.uid_free():
                self._wanted = trio.Event()
                await self._wanted.wait()
                continue
            name = f"{WARM_PREFIX}{next(self._names)}"
            try:
                await nursery.start(self._keep, name)
                retry_s = RETRY_S
            except (OSError, WorkdirError) as exc:
                log.warning("warm sandbox %s not made: %s; again in %gs", name, exc, retry_s)
                await trio.sleep(retry_s)
                retry_s = min(retry_s * 2, MAX_RETRY_S)

    async def _keep(self, name: str, *, task_status: trio.TaskStatus[None]) -> None:
        """Make the slot `name`, hold it ready until a take (then it is the
        taker's) or its death (then it is closed, and replaced)."""
        slot = await open_slot(self._kit, name)
        try:
            watch = os.pidfd_open(slot.proc.pid)  # its own: the session waits on the other
        except BaseException:
            await slot.aclose()
            raise
        self._ready.append(slot)
        self._changed.unpark_all()
        task_status.started()
        try:
            with slot.watching:
                await trio.lowlevel.wait_readable(watch)
                log.warning("warm sandbox %s died before a session took it", name)
        finally:
            trio.lowlevel.notify_closing(watch)
            os.close(watch)
            if slot in self._ready:  # not taken: still ours
                self._ready.remove(slot)
                await slot.aclose()
                # Replaced once closed: its uid is free again by then.
                self._wanted.set()
                self._changed.unpark_all()
