"""A session's first process on its own pseudo-terminal, driven from trio.

Owns the PTY master; the child's lifecycle (stdin queue, wait, teardown) is
`runnerd.local.child.ContainedChild`'s. The workload is a session leader
whose controlling terminal is the PTY slave; its stdin, stdout and stderr
are all the slave, so it sees a real terminal (`isatty`, `ttyname`, job
control, SIGWINCH on resize) and its output reaches us as one ordered byte
stream.

Resource handling: as `ContainedChild` (use it as `async with proc:` at
once); the master is closed with the pidfd.

Error handling:
    `write` and `resize` never raise and are no-ops once the child has exited.
    The reader treats EIO on the master (every slave fd closed) as end of
    output.

Limits: without a namespace, a descendant that calls `setsid()` and is
orphaned (a daemonising double fork) is out of reach.
"""

from __future__ import annotations

import contextlib
import fcntl
import struct
import subprocess
import termios
from collections.abc import Callable

import trio

from runnerd.local.child import READ_CHUNK_BYTES, ChildState, ContainedChild, ReadBurst

DEFAULT_COLS = 80
DEFAULT_ROWS = 24
# Full chunks the reader takes in one turn before it lets other tasks run.
# While the workload keeps the terminal full, a turn's chunks then reach a
# channel with one wake-up of its sender and one socket write, instead of
# one of each per chunk (issue 22; bench/README.md: the kernel's 4 KiB
# reads stay most of the cost). 4: ~2.5 ms of reads at the kernel's
# ~100 MB/s, the longest a turn holds the event loop.
TURN_CHUNKS = 4
PtyState = ChildState  # the name this module gave it first


def set_window_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class PtyProcess(ContainedChild):
    """The live child and its terminal. Implements `backend.WorkloadHandle`."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        master: int,
        pidfd: int,
        *,
        stop_grace_s: float,
        label: str = "",
        namespaced: bool = False,
    ) -> None:
        super().__init__(
            popen, pidfd, stop_grace_s=stop_grace_s, label=label, namespaced=namespaced
        )
        self._master = master

    def _stdio_fds(self) -> tuple[int, ...]:
        return (self._master,)

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal size; the kernel sends SIGWINCH. No-op after exit."""
        if self._state is not ChildState.RUNNING:
            return
        with contextlib.suppress(OSError):
            set_window_size(self._master, max(1, min(cols, 0xFFFF)), max(1, min(rows, 0xFFFF)))

    async def run_reader(self, on_output: Callable[[bytes], None], done: trio.Event) -> None:
        """Forward every byte the workload writes to `on_output`, in order, in
        chunks of at most `READ_CHUNK_BYTES` (up to `TURN_CHUNKS` of them per
        turn of the event loop), until the terminal closes (EIO: no process
        holds the slave any more); then set `done`. Cancellable."""
        fd, burst = self._master, ReadBurst.for_this_thread()
        while True:
            for _ in range(TURN_CHUNKS):
                data, eof = burst.read(fd)
                if data:
                    on_output(data)
                if eof or len(data) < READ_CHUNK_BYTES:
                    break  # the end, or all there was: nothing waits to be read
            if eof:
                break
            if not data:
                await trio.lowlevel.wait_readable(fd)
                continue
            # Data may be ready forever; let other tasks (and cancellation) in.
            await trio.lowlevel.checkpoint()
        done.set()

    async def run_writer(self) -> None:
        """Feed queued stdin to the master as the terminal accepts it. Cancellable."""
        await self._feed_stdin(self._master)
