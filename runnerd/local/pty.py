"""A session's first process on its own pseudo-terminal, driven from trio.

Owns the PTY master, the child (started by `runnerd.local.spawn`) and its
teardown. The workload is a session leader whose controlling terminal is the
PTY slave; its stdin, stdout and stderr are all the slave, so it sees a real
terminal (`isatty`, `ttyname`, job control, SIGWINCH on resize) and its
output reaches us as one ordered byte stream.

In a PID namespace (`containment`) the child is `nsinit`, outside the
namespace, and the workload runs under the namespace's init; otherwise the
child is the workload itself.

Resource handling:
    A `PtyProcess` owns an open master fd, a pidfd and an unreaped child. Use
    it as `async with proc:` at once (no checkpoint in between). Leaving the
    block stops the session: in a namespace, SIGTERM to the child (the init
    hands it to every process in the namespace), then SIGKILL to the init
    after the grace period, whose exit is the kernel's word that the
    namespace is empty; otherwise SIGTERM then SIGKILL to the process group,
    plus descendants that job control moved to groups of their own (see
    `strays`). It then reaps the child and closes every fd, shielded, even
    when cancelled. When the child exits on its own, its namespace is gone
    with it, or whatever is left in its group is SIGKILLed.

Error handling:
    `write` and `resize` never raise and are no-ops once the child has exited.
    The reader treats EIO on the master (every slave fd closed) as end of
    output.

Limits: without a namespace, a descendant that calls `setsid()` and is
orphaned (a daemonising double fork) is out of reach.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import logging
import os
import signal
import struct
import subprocess
import termios
from collections.abc import Callable
from types import TracebackType

import trio

from runnerd.local.strays import StrayProcesses, pin_children

log = logging.getLogger(__name__)


# One read may return far less (a Linux PTY hands over ~4 KiB per read), so the
# reader keeps reading while bytes are ready and emits up to this much at once:
# fewer, larger chunks downstream is where the throughput comes from.
READ_CHUNK_BYTES = 64 * 1024
# Stdin the workload has not consumed yet. Beyond this, further bytes are
# dropped (and logged) rather than growing the daemon without bound.
MAX_PENDING_STDIN_BYTES = 4 * 1024 * 1024
DEFAULT_COLS = 80
DEFAULT_ROWS = 24


def set_window_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _exit_code(returncode: int) -> int:
    # Popen reports "killed by signal N" as -N; a shell reports it as 128+N.
    return 128 - returncode if returncode < 0 else returncode


class PtyState(enum.Enum):
    """A `PtyProcess`'s lifecycle; it only moves forward. EXITED: the child is
    reaped (`exit_code` set), the terminal still open for the last output.
    CLOSED: the fds are closed (whether or not the child was reaped)."""

    RUNNING = "running"
    EXITED = "exited"
    CLOSED = "closed"


class PtyProcess:
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
        # Log lines carry the session id as a field (`[id]` in the log line).
        self._log_extra: dict[str, object] = {"session_id": label} if label else {"pid": popen.pid}
        self._popen = popen
        self._master = master
        self._pidfd = pidfd
        self._stop_grace_s = stop_grace_s
        # The child is `nsinit` outside a PID namespace (see `containment`).
        self._namespaced = namespaced
        self._pending = bytearray()
        self._pending_lot = trio.lowlevel.ParkingLot()
        self._exit_code: int | None = None
        self._state = PtyState.RUNNING
        # When the stop's SIGTERM went out (`_begin_stop`; namespaced only).
        self._term_sent_at: float | None = None

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def state(self) -> PtyState:
        return self._state

    # -- WorkloadHandle ----------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue bytes for the workload's stdin. Never blocks; no-op after exit."""
        if self._state is not PtyState.RUNNING or not data:
            return
        if len(self._pending) + len(data) > MAX_PENDING_STDIN_BYTES:
            log.warning("stdin backlog full, dropped %d bytes", len(data), extra=self._log_extra)
            return
        self._pending += data
        self._pending_lot.unpark_all()

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal size; the kernel sends SIGWINCH. No-op after exit."""
        if self._state is not PtyState.RUNNING:
            return
        with contextlib.suppress(OSError):
            set_window_size(self._master, max(1, min(cols, 0xFFFF)), max(1, min(rows, 0xFFFF)))

    # -- long-lived tasks ----------------------------------------------------

    async def run_reader(self, on_output: Callable[[bytes], None], done: trio.Event) -> None:
        """Forward every byte the workload writes to `on_output`, in order, until
        the terminal closes (EIO: no process holds the slave any more); then set
        `done`. Cancellable."""
        fd = self._master
        while True:
            try:
                data = os.read(fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)
                continue
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            data, eof = self._read_more(fd, data)
            on_output(data)
            if eof:
                break
            # Data may be ready forever; let other tasks (and cancellation) in.
            await trio.lowlevel.checkpoint()
        done.set()

    @staticmethod
    def _read_more(fd: int, first: bytes) -> tuple[bytes, bool]:
        """Coalesce what is ready right now behind `first`, up to one chunk."""
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

    async def run_writer(self) -> None:
        """Feed queued stdin to the master as the terminal accepts it. Cancellable."""
        fd = self._master
        while True:
            while not self._pending:
                await self._pending_lot.park()
            try:
                written = os.write(fd, self._pending[:READ_CHUNK_BYTES])
            except BlockingIOError:
                await trio.lowlevel.wait_writable(fd)
                continue
            except OSError:
                # The terminal is gone (the workload ended): nothing can arrive.
                self._pending.clear()
                return
            del self._pending[:written]
            await trio.lowlevel.checkpoint()

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

    async def __aenter__(self) -> PtyProcess:
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
        bounded by the grace period plus one second."""
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self._stop_grace_s + 1.0):
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
        self._exit_code = _exit_code(self._popen.wait())
        if self._state is PtyState.RUNNING:
            self._state = PtyState.EXITED
        return self._exit_code

    def _close_fds(self) -> None:
        if self._state is PtyState.CLOSED:
            return
        self._state = PtyState.CLOSED
        self._pending.clear()
        for fd in (self._master, self._pidfd):
            trio.lowlevel.notify_closing(fd)
            os.close(fd)
        if self._exit_code is None:
            # Only if a SIGKILLed child did not die within the bound (stuck in
            # the kernel): do not leave it to the GC's "still running" warning.
            log.error(
                "pid %s did not exit after SIGKILL; leaving it", self.pid, extra=self._log_extra
            )
