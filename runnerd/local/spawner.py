"""The one thread every session process is forked from.

Owns that thread. Why it exists: a child's parent-death signal
(`PR_SET_PDEATHSIG`, see `runnerd.local.containment`) fires when the *thread*
that forked it exits, not the process. trio's worker threads exit after a
few idle seconds, which would kill every session started from them. This
thread is started on first use and lives as long as the process, so the
signal fires exactly when the daemon dies.

Resource handling: the thread is a daemon thread; it holds nothing but its
job queue. `run_in_spawner` waits for its job even when cancelled (the job is
a fork: its child must always reach the caller, which owns it).

Error handling: the job's exception is re-raised in the caller.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TypeVar

import trio

T = TypeVar("T")

_Job = Callable[[], None]
_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def _serve() -> None:
    while True:
        _jobs.get()()


def _ensure_thread() -> None:
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_serve, name="runnerd-spawner", daemon=True)
            _thread.start()


async def run_in_spawner(fn: Callable[[], T]) -> T:
    """Run `fn` on the spawner thread and return its result (or raise its
    exception). Jobs run one at a time, in order. Not cancellable: see the
    module docstring."""
    _ensure_thread()
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    # Filled by the thread before `done` is set, read after: one value or
    # one exception, handed across the thread boundary.
    results: list[T] = []
    errors: list[BaseException] = []

    def job() -> None:
        try:
            results.append(fn())
        except BaseException as exc:
            errors.append(exc)
        token.run_sync_soon(done.set)

    _jobs.put(job)
    with trio.CancelScope(shield=True):
        await done.wait()
    if errors:
        raise errors[0]
    return results[0]
