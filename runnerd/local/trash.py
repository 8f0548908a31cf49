"""Finished sessions' directories, removed after the session ended: `workdir/.trash`.

Owns the daemon's trash directory (0700, the daemon's: no session uid can
reach into it). A session's teardown moves its directory in (`discard`: one
rename), so the session is terminal as soon as its processes are gone;
`run` removes whatever arrives (`rm -rf`, `REMOVERS` at a time), and once
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
import shutil
import subprocess
from pathlib import Path

import trio

from runnerd.local.workdir import TRASH_NAME, remove_session_dir

log = logging.getLogger(__name__)

# Removals in flight at once: a few hide the disk's latency (the journal
# commits theirs together); and at most this many directories per `rm`.
REMOVERS = 4
BATCH = 128


class Trash:
    """`workdir/.trash` and its remover (see the module)."""

    def __init__(self, workdir: Path, *, rm: str | None = None) -> None:
        """`rm`: the program that removes (`rm` on PATH by default)."""
        self.path = workdir / TRASH_NAME
        # Paths as str: a set of PurePath spent the loop's time hashing.
        self._pending: list[str] = []  # moved in, not yet handed to a remover
        self._queued: set[str] = set()  # handed to a remover, not yet removed
        self._rm = rm or shutil.which("rm") or "/bin/rm"
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
                self._pending.append(str(target))
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
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(REMOVERS):
                    nursery.start_soon(self._remover)
        finally:
            self._accepting = False
            with trio.CancelScope(shield=True):
                for target in [*self._pending, *self._queued]:
                    await trio.to_thread.run_sync(remove_session_dir, Path(target))
                await trio.to_thread.run_sync(self._remove_dir)

    async def _remover(self) -> None:
        """Remove what is pending, up to `BATCH` at a time, until `close`
        and nothing is pending. While every remover is busy arrivals pile
        up, so a burst (a shutdown) is removed in a few large batches."""
        while True:
            while not self._pending:
                if self._closed:
                    return
                if self._arrived.is_set():
                    self._arrived = trio.Event()
                await self._arrived.wait()
            batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
            self._queued.update(batch)
            await self._remove(batch)
            self._queued.difference_update(batch)

    async def _remove(self, batch: list[str]) -> None:
        """`rm -rf` in a process of its own, off the daemon's GIL (threads
        contended for it with the busy event loop at a shutdown); what it
        could not remove (a directory a workload made unwritable, when the
        daemon is not root) is removed by `remove_session_dir` after."""
        try:
            done = await trio.run_process(
                [self._rm, "-rf", "--", *batch],
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if done.returncode == 0:
                return
        except OSError:
            pass
        for target in batch:
            await trio.to_thread.run_sync(remove_session_dir, Path(target))

    def _create(self) -> None:
        self.path.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.path, 0o700)  # an existing one too: it holds sessions' files

    def _remove_dir(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass  # missing, or not empty: the next start's sweep takes it
