"""A session process's lifecycle: its stdin queue, its wait and its teardown.

Owns the child `runnerd.local.spawn` started (an unreaped `Popen` and its
pidfd) from then on, whatever its stdio is: `ContainedChild` is the part a
PTY session (`runnerd.local.pty.PtyProcess`) and a `streams` app
(`runnerd.local.streams.StreamsProcess`) share; each subclass owns the fds
of its stdio and reads them its own way.

In a PID namespace (`containment`) the child is `nsinit`, outside the
namespace, and the workload runs under the namespace's init; otherwise the
child is the workload itself, the leader of a process group.

Resource handling:
    A `ContainedChild` owns a pidfd, an unreaped child and its subclass's
    stdio fds (`_stdio_fds`). Use it as `async with proc:` at once (no
    checkpoint in between). Leaving the block stops it: in a namespace,
    SIGTERM to the child (the init hands it to every process in the
    namespace), then SIGKILL to the init after the grace period, whose exit
    is the kernel's word that the namespace is empty; otherwise SIGTERM then
    SIGKILL to the process group, plus descendants that job control moved
    to groups of their own (see `strays`). It then reaps the child and
    closes every fd, shielded, even when cancelled. When the child exits on
    its own, its namespace is gone with it, or whatever is left in its
    group is SIGKILLed.

Error handling: `write` never raises and is a no-op once the child has
exited; a stdin whose reader is gone drops what is queued.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import select
import signal
import subprocess
import threading
from types import TracebackType

import trio

from runnerd.local.strays import StrayProcesses, pin_children

log = logging.getLogger(__name__)
# After the SIGKILL, how long the kernel gets to end the process (and a
# namespace's tree) before the teardown gives up on it as stuck. A SIGKILL
# lands at once on an idle host; on a loaded one a nested namespace took
# over 1 s to go (seen once, 2 cores busy), so the bound is well inside
# the stop's own headroom (`provider.STOP_HEADROOM_S`), not at 1 s.
KILL_WAIT_S = 2.5

# The most one read or write moves; a Linux PTY hands over ~4 KiB per read
# and a pipe ~64 KiB, so readers coalesce what is ready up to this much.
READ_CHUNK_BYTES = 64 * 1024
# Stdin the workload has not consumed yet. Beyond this, further bytes are
# dropped (and logged) rather than growing the daemon without bound.
MAX_PENDING_STDIN_BYTES = 4 * 1024 * 1024


def read_ready(fd: int, first: bytes) -> tuple[bytes, bool]:
    """`first` and what more is ready on the non-blocking `fd` right now, up
    to one chunk (fewer, larger chunks downstream is where the throughput
    comes from), and whether the end was reached (EOF, or EIO: a PTY whose
    every slave fd is closed)."""
    pieces = [first]
    size = len(first)
    while size < READ_CHUNK_BYTES:
        try:
            more = os.read(fd, READ_CHUNK_BYTES - size)
        except BlockingIOError:
            break
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            return b"".join(pieces), True
        if not more:
            return b"".join(pieces), True
        pieces.append(more)
        size += len(more)
    return (first if len(pieces) == 1 else b"".join(pieces)), False


class ReadBurst:
    """Reads what a non-blocking fd has ready, up to one chunk, into one
    reusable buffer (a Linux PTY hands over at most ~4 KiB per read, so a
    chunk is ~16 reads: no 64 KiB bytes object allocated and shrunk per
    read, no join; one copy out per chunk). One burst at a time: `read` is
    not reentrant.

    `for_this_thread()` is the one a thread's readers share: `read` never
    yields and copies its bytes out before it returns, so readers on one
    thread (every PTY reader of the daemon's trio loop) cannot interleave
    in it. A session then costs no 64 KiB buffer of its own (zeroed at its
    start and held while it idles: 64 MB for 1,000 sessions).
    """

    _per_thread = threading.local()

    def __init__(self) -> None:
        self._buffer = bytearray(READ_CHUNK_BYTES)
        self._view = memoryview(self._buffer)

    @classmethod
    def for_this_thread(cls) -> ReadBurst:
        """The calling thread's burst, made on its first call."""
        burst: ReadBurst | None = getattr(cls._per_thread, "burst", None)
        if burst is None:
            burst = cls._per_thread.burst = cls()
        return burst

    def read(self, fd: int) -> tuple[bytes, bool]:
        """(the bytes ready, up to one chunk; b"" if none, and whether the end
        was reached: EOF, or EIO on a PTY whose every slave fd is closed)."""
        size, eof = 0, False
        while size < READ_CHUNK_BYTES:
            try:
                got = os.readv(fd, [self._view[size:]])
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                eof = True
                break
            if not got:
                eof = True
                break
            size += got
        return bytes(self._view[:size]), eof


def exit_code_of(returncode: int) -> int:
    """Popen's "killed by signal N" (-N) as a shell reports it (128+N)."""
    return 128 - returncode if returncode < 0 else returncode


class ChildState(enum.Enum):
    """A child's lifecycle; it only moves forward. EXITED: the child is
    reaped (`exit_code` set), its output still open for the last bytes.
    CLOSED: the fds are closed (whether or not the child was reaped)."""

    RUNNING = "running"
    EXITED = "exited"
    CLOSED = "closed"


class ContainedChild:
    """A live session process. Subclasses give `_stdio_fds` (closed with
    the pidfd) and read their output; stdin is queued here (`write`) and fed
    by `_feed_stdin` to the fd the subclass names."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        pidfd: int,
        *,
        stop_grace_s: float,
        label: str = "",
        namespaced: bool = False,
    ) -> None:
        # Log lines carry the session id as a field (`[id]` in the log line).
        self._log_extra: dict[str, object] = {"session_id": label} if label else {"pid": popen.pid}
        self._popen = popen
        self._pidfd = pidfd
        self._stop_grace_s = stop_grace_s
        # The child is `nsinit` outside a PID namespace (see `containment`).
        self._namespaced = namespaced
        self._pending = bytearray()
        self._pending_lot = trio.lowlevel.ParkingLot()
        self._exit_code: int | None = None
        self._state = ChildState.RUNNING
        # When the stop's SIGTERM went out (`_begin_stop`; namespaced only).
        self._term_sent_at: float | None = None

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def log_extra(self) -> dict[str, object]:
        """What its log lines carry (`extra=`): its session id."""
        return self._log_extra

    def relabel(self, label: str) -> None:
        """Log as session `label` from now on (a warm sandbox taken by it)."""
        self._log_extra = {"session_id": label}

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def state(self) -> ChildState:
        return self._state

    def has_exited(self) -> bool:
        """Whether the child has exited (reaped or not); never blocks."""
        if self._state is not ChildState.RUNNING:
            return True
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(0))

    def _stdio_fds(self) -> tuple[int, ...]:
        """The subclass's fds, closed once with the pidfd."""
        return ()

    # -- stdin -------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue bytes for the workload's stdin. Never blocks; no-op after exit."""
        if self._state is not ChildState.RUNNING or not data:
            return
        if len(self._pending) + len(data) > MAX_PENDING_STDIN_BYTES:
            log.warning("stdin backlog full, dropped %d bytes", len(data), extra=self._log_extra)
            return
        self._pending += data
        self._pending_lot.unpark_all()

    async def _feed_stdin(self, fd: int) -> None:
        """Write queued stdin to the non-blocking `fd` as it accepts it, until
        the reader is gone (then what is queued is dropped). Cancellable."""
        while True:
            while not self._pending:
                await self._pending_lot.park()
            try:
                written = os.write(fd, self._pending[:READ_CHUNK_BYTES])
            except BlockingIOError:
                await trio.lowlevel.wait_writable(fd)
                continue
            except OSError:
                # The terminal or pipe is gone (the workload ended).
                self._pending.clear()
                return
            del self._pending[:written]
            await trio.lowlevel.checkpoint()

    # -- exit ----------------------------------------------------------------

    async def wait(self) -> int:
        """Wait for the child to exit on its own and return its exit code
        (killed by signal N → 128+N). Anything left in its process group is
        then killed: nothing outlives the session.

        Cancellation: a cancelled wait means the session is ending, so in a
        namespace the stop's SIGTERM goes out at once (`_begin_stop`), not
        once every task of the session has unwound to `aclose`: at shutdown
        every session's wait is cancelled in one pass of trio's scheduler,
        so every workload is signalled together (1,000 of them took 1.4 to
        4.3 s to all get theirs the other way, under load). `aclose` still
        completes the stop; the grace period runs from this signal.
        """
        try:
            await trio.lowlevel.wait_readable(self._pidfd)
        except trio.Cancelled:
            if self._namespaced:
                self._begin_stop()
            raise
        # The child is a zombie until reaped, so its pid, which is also the
        # group id, cannot have been reused: the group kill is safe.
        self._kill_group(signal.SIGKILL)
        return self._reap()

    # -- teardown --------------------------------------------------------------

    async def __aenter__(self) -> ContainedChild:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the process group (if still running), reap, close. Shielded;
        bounded by the grace period plus `KILL_WAIT_S`."""
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self._stop_grace_s + KILL_WAIT_S):
                await self._stop()
            self._close_fds()

    async def _stop(self) -> None:
        if self._exit_code is not None:
            return
        if self._namespaced:
            await self._stop_namespace()
        else:
            await self._stop_process_group()
        await trio.lowlevel.wait_readable(self._pidfd)
        self._reap()

    def _begin_stop(self) -> None:
        """SIGTERM to our child alone, once: it hands it to the namespace's
        init, which sends it to every process in the namespace, once. (Not
        for a process group: its strays must be pinned before it is
        signalled, which `_stop_process_group` does.)"""
        if self._term_sent_at is None:
            self._term_sent_at = trio.current_time()
            self._signal_child(signal.SIGTERM)

    async def _stop_namespace(self) -> None:
        self._begin_stop()
        assert self._term_sent_at is not None
        grace_left_s = max(0.0, self._term_sent_at + self._stop_grace_s - trio.current_time())
        if await self._exited_within(grace_left_s):
            return
        log.info("alive %ss after SIGTERM; SIGKILL", self._stop_grace_s, extra=self._log_extra)
        # The init is pinned first and waited for after: its exit is the
        # kernel's word that nothing is left in the namespace.
        inits = pin_children(self.pid)
        try:
            for init in inits:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(init, signal.SIGKILL)
            self._kill_group(signal.SIGKILL)
            for init in inits:
                await trio.lowlevel.wait_readable(init)
        finally:
            for init in inits:
                trio.lowlevel.notify_closing(init)
                os.close(init)

    async def _stop_process_group(self) -> None:
        strays = StrayProcesses(self.pid)
        try:
            strays.collect()
            self._kill_all(signal.SIGTERM, strays)
            if not await self._exited_within(self._stop_grace_s):
                log.info(
                    "alive %ss after SIGTERM; SIGKILL", self._stop_grace_s, extra=self._log_extra
                )
                # Still alive: it may have started new jobs during the grace.
                strays.collect()
            self._kill_all(signal.SIGKILL, strays)
        finally:
            strays.close()

    async def _exited_within(self, seconds: float) -> bool:
        with trio.move_on_after(seconds):
            await trio.lowlevel.wait_readable(self._pidfd)
            return True
        return False

    def _signal_child(self, sig: signal.Signals) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self._pidfd, sig)

    def _kill_all(self, sig: signal.Signals, strays: StrayProcesses) -> None:
        self._kill_group(sig)
        strays.send(sig)

    def _kill_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, sig)

    def _reap(self) -> int:
        # The pidfd is readable: the child has exited, so this does not block.
        self._exit_code = exit_code_of(self._popen.wait())
        if self._state is ChildState.RUNNING:
            self._state = ChildState.EXITED
        return self._exit_code

    def _close_fds(self) -> None:
        if self._state is ChildState.CLOSED:
            return
        self._state = ChildState.CLOSED
        self._pending.clear()
        for fd in (*self._stdio_fds(), self._pidfd):
            trio.lowlevel.notify_closing(fd)
            os.close(fd)
        if self._exit_code is None:
            # Only if a SIGKILLed child did not die within the bound (stuck in
            # the kernel): do not leave it to the GC's "still running" warning.
            log.error(
                "pid %s did not exit after SIGKILL; leaving it", self.pid, extra=self._log_extra
            )
