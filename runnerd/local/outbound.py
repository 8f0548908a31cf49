"""A session's outbound network stack: slirp4netns attached to its namespace.

Owns running the command line `runnerd.local.network` found at start-up
(`NetworkPlan.outbound`) for one session, for as long as its namespace
lives. Apart from `network` so that the start-up probes import no trio.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable

import trio

from runnerd.local.fdpass import passing
from runnerd.local.network import ATTACH_TIMEOUT_S, SLIRP, NetworkPlan, slirp_argv


@contextlib.asynccontextmanager
async def open_outbound(
    plan: NetworkPlan, pid: int, *, meanwhile: Callable[[], Awaitable[None]] | None = None
) -> AsyncIterator[trio.Process]:
    """Attach slirp4netns to the namespace of `pid`; entered once the
    namespace has its interface and route, held until exit. `meanwhile`
    is awaited once slirp4netns is started, before its ready wait (the
    session's set-up goes on while it attaches). Yields its process (to
    `poll`, never to wait for or signal: that is done here).

    Resource handling: slirp4netns exits when its exit fd (ours) closes, so
    a daemon killed outright takes it along; on exit (and when `meanwhile`
    raises) it is killed and reaped.

    Raises:
        OSError: it could not be started, or did not bring the network up;
            or what `meanwhile` raises.
    """
    assert plan.outbound is not None
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    try:
        # Two pipes made in turn: side by side unless handed on apart
        # (`runnerd.local.fdpass`).
        with passing() as hand:
            argv = slirp_argv(
                plan.outbound,
                pid,
                plan.user_namespace,
                ready_fd=hand(ready_w),
                exit_fd=hand(exit_r),
            )
            # Popen in a worker thread (trio's): on the loop, its vfork and a
            # session directory's writes stalled every other start whenever
            # the kernel made them wait, and 1,000 starts took 1.3-1.8x as
            # long; the spawner thread (one, in turn with every session's
            # fork) was slower still.
            proc = await trio.lowlevel.open_process(
                argv,
                pass_fds=hand.fds,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
    except BaseException:
        for fd in (ready_r, exit_w):
            os.close(fd)
        raise
    finally:
        os.close(ready_w)
        os.close(exit_r)
    try:
        if meanwhile is not None:
            await meanwhile()
        ready = False
        with trio.move_on_after(ATTACH_TIMEOUT_S):
            ready = await _read_ready(ready_r)
        if not ready:
            raise OSError(errno.EIO, f"{SLIRP} did not bring the session's network up")
        yield proc
    finally:
        os.close(exit_w)
        # Killed, not left to notice its exit fd: the namespace's processes
        # are gone, so it has nothing left to do, and at a shutdown 1,000 of
        # them each waking to exit took seconds of a loaded machine's CPU.
        proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()
        trio.lowlevel.notify_closing(ready_r)
        os.close(ready_r)


async def _read_ready(fd: int) -> bool:
    """Whether slirp4netns wrote its ready byte (False on EOF: it exited)."""
    os.set_blocking(fd, False)
    while True:
        try:
            return bool(os.read(fd, 1))
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
