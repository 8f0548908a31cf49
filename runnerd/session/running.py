"""One session's workload run: from `backend.run` to how it ended.

Owns what happens inside a session's task between registration and the
terminal status: the stop scope (a user stop or a detach cancels it), the
TTL deadline (`spec.limits.ttl_s` from creation), and the workload nursery
in which `nursery.start(backend.run, spec, sink)` hands back the
`WorkloadHandle` for stdin and resizes. What it gathered goes to
`runnerd.session.ending.classify`, which decides the one terminal status;
the `SessionManager` records it.

Error handling: nothing the backend raises escapes `drive`: a `StartError`
and any other exception (ExceptionGroups too) are gathered for `classify`.
Cancellation of the caller's scope propagates (stop means cancel).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from runnerd.backend import Backend, EndIntent, Outcome, RunSpec, StartError
from runnerd.contract import RunStatus
from runnerd.session.admission import Catalog
from runnerd.session.ending import WorkloadRun, classify, leaves
from runnerd.session.session import AttachOnStart, Session, SessionSink


async def drive(
    session: Session, backend: Backend, wall_clock: Callable[[], float], catalog: Catalog
) -> RunStatus | None:
    """Run the workload under the stop scope and TTL; return the terminal
    status, or None when it was detached (left running for a successor).
    An app `catalog` no longer offers fails the start (`Catalog.recheck`)."""
    run = WorkloadRun()
    with trio.CancelScope() as stop_scope:
        session.set_stop_scope(stop_scope)  # cancels at once if already stopped
        with trio.move_on_at(ttl_deadline(session.spec, wall_clock())) as ttl_scope:
            try:
                run.outcome = await _run_workload(session, backend, SessionSink(session), catalog)
            except* StartError as group:
                first = leaves(group)[0]
                assert isinstance(first, StartError)
                run.start_error = first
            except* Exception as group:
                run.internal = group
    session.set_stop_scope(None)
    run.ttl_expired = ttl_scope.cancelled_caught
    if session.end_requested is EndIntent.DETACH and run.outcome is None:
        return None
    return classify(session, run)


def ttl_deadline(spec: RunSpec, now: float) -> float:
    """`created_at + ttl_s` on trio's clock (`now`: epoch seconds): a
    deadline from creation, so an adopted session keeps the time it had
    left, not a fresh TTL."""
    created_at = spec.identity.created_at
    elapsed_s = 0.0 if created_at is None else now - created_at
    return trio.current_time() + spec.limits.ttl_s - max(0.0, elapsed_s)


async def _run_workload(
    session: Session, backend: Backend, sink: SessionSink, catalog: Catalog
) -> Outcome | None:
    """Start the backend and wait for it; return its outcome (None when
    the run was cancelled before the backend returned one)."""
    outcome: Outcome | None = None

    async def run_backend(*, task_status: trio.TaskStatus[None]) -> None:
        nonlocal outcome
        # Here, with no checkpoint before `backend.run`: a reload that
        # withdrew the app at any point since the POST is seen.
        catalog.recheck(session.spec)
        attach = AttachOnStart(session, nursery, task_status)
        outcome = await backend.run(session.spec, sink, task_status=attach)
        # Nothing outlives the workload: a pending resize flush goes with it.
        nursery.cancel_scope.cancel()

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_backend)
    finally:
        session.detach()
    return outcome
