"""A `streams` app's process: pipes for stdin, stdout and stderr, no terminal.

Owns the daemon's ends of the three pipes; the child's lifecycle (stdin
queue, wait, teardown: the same containment, parent-death and stop
guarantees as a PTY session) is `runnerd.local.child.ContainedChild`'s, and
`runnerd.local.spawn.spawn_streams_process` starts it. The workload's fd 0
is the read end of one pipe and fds 1 and 2 the write ends of two others,
so `isatty` is false on all three and what it writes to stdout and to
stderr reaches the daemon apart (the contract's `io: "streams"`: stream
byte 1 and 2 of a per-app `/io` frame).

Ordering: the bytes of one stream arrive in order, each chunk from one
stream only; there is no order between the two streams (as between two
pipes: a process that writes stderr then stdout may be read either way).

Resource handling: as `ContainedChild` (use it as `async with proc:` at
once); the three pipe ends are closed with the pidfd.

Error handling: `write` never raises; once the workload (and everything
holding its stdin) is gone, queued stdin is dropped.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import trio

from runnerd.local.child import READ_CHUNK_BYTES, ContainedChild, read_ready

STDOUT = 1
STDERR = 2
# What `run_reader` hands over: the stream (STDOUT or STDERR) and its bytes.
OnStreamOutput = Callable[[int, bytes], None]


class StreamsProcess(ContainedChild):
    """The live child and its pipes (the daemon's ends, non-blocking)."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        pipes: tuple[int, int, int],
        pidfd: int,
        *,
        stop_grace_s: float,
        label: str = "",
        namespaced: bool = False,
    ) -> None:
        """`pipes`: the write end of the workload's stdin, the read ends of its
        stdout and its stderr."""
        super().__init__(
            popen, pidfd, stop_grace_s=stop_grace_s, label=label, namespaced=namespaced
        )
        self._stdin, self._stdout, self._stderr = pipes

    def _stdio_fds(self) -> tuple[int, ...]:
        return (self._stdin, self._stdout, self._stderr)

    def resize(self, cols: int, rows: int) -> None:
        """No terminal to size: a no-op (`backend.WorkloadHandle`)."""

    async def run_reader(self, on_output: OnStreamOutput, done: trio.Event) -> None:
        """Hand every byte the workload writes to `on_output(stream, chunk)`
        (stream `STDOUT` or `STDERR`), in order per stream, until both pipes
        report EOF (no process holds their write ends any more); then set
        `done`. Cancellable."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_stream, self._stdout, STDOUT, on_output)
            nursery.start_soon(self._read_stream, self._stderr, STDERR, on_output)
        done.set()

    @staticmethod
    async def _read_stream(fd: int, stream: int, on_output: OnStreamOutput) -> None:
        while True:
            try:
                data = os.read(fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)
                continue
            if not data:
                return
            data, eof = read_ready(fd, data)
            on_output(stream, data)
            if eof:
                return
            # Data may be ready forever; let other tasks (and cancellation) in.
            await trio.lowlevel.checkpoint()

    async def run_writer(self) -> None:
        """Feed queued stdin to the pipe as the workload reads it. Cancellable."""
        await self._feed_stdin(self._stdin)
