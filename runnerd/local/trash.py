"""Finished sessions' directories, removed after the session ended: `workdir/.trash`.

Owns the daemon's trash directory (0700, the daemon's: no session uid can
reach into it). A session's teardown moves its directory in (`discard`: one
rename), so the session is terminal as soon as its processes are gone;
`run` removes whatever arrives, `REMOVERS` directories at a time, and once
`close` is called it removes the rest before it returns. The backend's
context (`runnerd.local.provider.open_backend`) runs it for the daemon's
lifetime, so nothing of a session is left on disk when the daemon exits. A
daemon killed outright leaves the trash to its successor, whose
`claim_workdir` sweeps it before any session starts.

Why: at SIGTERM with 1,000 live sessions every session removed its own
directory (a dozen syscalls in a worker thread, each waiting for the GIL
behind the busy event loop, each metadata write waiting on a journal that
a `discard` mount makes slow) before it could be reported terminal; the
last one was terminal 2.5 s after its workload had exited
(bench/README.md, "SIGTERM with 1,000 live sessions, under load").

Error handling: nothing here raises; a directory that cannot be moved is
removed in place, one that cannot be removed is logged
(`runnerd.local.workdir.remove_session_dir`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import trio

from runnerd.local.workdir import TRASH_NAME, remove_session_dir

log = logging.getLogger(__name__)

# Removals in flight at once: a few threads hide the disk's latency (the
# journal commits theirs together), more only contend for the GIL.
REMOVERS = 4


class Trash:
    """`workdir/.trash` and its remover (see the module)."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / TRASH_NAME
        self._pending: list[Path] = []  # moved in, not yet handed to a remover
        self._queued: set[Path] = set()  # handed to a remover, not yet removed
        self._arrived = trio.Event()
        self._accepting = False  # `run` is removing what arrives
        self._closed = False

    async def discard(self, root: Path) -> None:
        """Move the session directory `root` into the trash for `run` to
        remove; without a running `run`, or if the move fails, remove it in
        place. Returns once it is out of the workdir's session names."""
        if self._accepting:
            target = self.path / root.name
            try:
                # On the event loop, not in a worker thread: one syscall,
                # where at a shutdown a thread's handoff waited for the GIL
                # behind the busy loop (the directories left the workdir
                # 1.6 s after the last session process had; bench/README.md).
                os.rename(root, target)
            except OSError as exc:
                log.warning("could not move to the trash: %s", exc, extra={"session_id": root.name})
            else:
                self._pending.append(target)
                self._arrived.set()
                return
        await trio.to_thread.run_sync(remove_session_dir, root)

    def close(self) -> None:
        """No more arrivals: `run` removes what it holds, then returns."""
        self._closed = True
        self._accepting = False
        self._arrived.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Create the trash directory, then remove what `discard` moves in
        until `close`; return once all of it is removed (if cancelled, what
        is left is removed shielded) and the directory is gone."""
        try:
            await trio.to_thread.run_sync(self._create)
            self._accepting = not self._closed
        except OSError as exc:
            log.warning("no trash directory, sessions remove their own: %s", exc)
        task_status.started()
        limiter = trio.CapacityLimiter(REMOVERS)
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    await self._arrived.wait()
                    self._arrived = trio.Event()
                    batch, self._pending = self._pending, []
                    for target in batch:
                        self._queued.add(target)
                        nursery.start_soon(self._remove, target, limiter)
                    if self._closed:
                        break
        finally:
            self._accepting = False
            with trio.CancelScope(shield=True):
                for target in [*self._pending, *self._queued]:
                    await trio.to_thread.run_sync(remove_session_dir, target)
                await trio.to_thread.run_sync(self._remove_dir)

    async def _remove(self, target: Path, limiter: trio.CapacityLimiter) -> None:
        await trio.to_thread.run_sync(remove_session_dir, target, limiter=limiter)
        self._queued.discard(target)

    def _create(self) -> None:
        self.path.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.path, 0o700)  # an existing one too: it holds sessions' files

    def _remove_dir(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass  # missing, or not empty: the next start's sweep takes it
