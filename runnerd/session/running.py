"""One session's workload run: from `backend.run` to how it ended.

Owns what happens inside a session's task between registration and the
ending: the session's stop scope (a user stop or a detach cancels it), the
TTL deadline (`spec.limits.ttl_s` from creation), and the workload nursery
in which `nursery.start(backend.run, spec, sink)` hands back `Started` (the
handle for stdin and resizes; the address the core's watchers start on,
`AttachOnStart`). `drive` returns the one `Ending`
(`runnerd.session.ending.decide`); the `SessionManager` records its status.

Error handling: nothing the backend raises escapes `drive`: a `StartError`
becomes `StartFailed`, any other exception (ExceptionGroups too) is logged
and becomes `Internal`. Cancellation of the caller's scope propagates (stop
means cancel).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from runnerd.backend import Backend, Exited, Failed, RunSpec, Started, StartError
from runnerd.session.admission import Catalog
from runnerd.session.ending import NO_OUTCOME, Ending, Internal, Produced, StartFailed, decide
from runnerd.session.session import Session
from runnerd.session.sink import SessionReport, SessionSink
from runnerd.workload.supervision import supervise, tcp_ports

log = logging.getLogger("runnerd.sessions")


async def drive(
    session: Session, backend: Backend, wall_clock: Callable[[], float], catalog: Catalog
) -> Ending:
    """Run the workload under the session's stop scope and its TTL; return
    how it ended (`Detached` when it was left running for a successor). An
    app `catalog` no longer offers fails the start (`Catalog.recheck`)."""
    produced: Produced | None = None
    extra = {"session_id": session.id}
    with session.stop_scope:  # already cancelled if a stop came first
        with trio.move_on_at(ttl_deadline(session.spec, wall_clock())) as ttl_scope:
            try:
                produced = await _run_workload(session, backend, catalog)
            except* StartError as group:
                first = leaves(group)[0]
                assert isinstance(first, StartError)
                log.info("start failed: %s", first, exc_info=first.__cause__, extra=extra)
                produced = StartFailed(first.stage, first.message)
            except* Exception as group:
                log.error("session runner failed", exc_info=group, extra=extra)
                # A start failure in the same group says more (clauses run in order).
                produced = produced or Internal()
    expired, ttl_s = ttl_scope.cancelled_caught, session.spec.limits.ttl_s
    return decide(produced, session.end_requested, ttl_expired=expired, ttl_s=ttl_s)


def ttl_deadline(spec: RunSpec, now: float) -> float:
    """`created_at + ttl_s` on trio's clock (`now`: epoch seconds): a
    deadline from creation, so an adopted session keeps the time it had
    left, not a fresh TTL."""
    created_at = spec.identity.created_at
    elapsed_s = 0.0 if created_at is None else now - created_at
    return trio.current_time() + spec.limits.ttl_s - max(0.0, elapsed_s)


def leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    """Every exception in `group`, nested groups flattened, in order."""
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


async def _run_workload(
    session: Session, backend: Backend, catalog: Catalog
) -> Exited | Failed | Internal:
    """Start the backend and wait for its outcome (a backend that returns
    something else is a bug: `Internal`). Raises what the backend raises,
    and `Cancelled` when the run was ended first."""
    outcome: object = None

    async def run_backend(*, task_status: trio.TaskStatus[None]) -> None:
        nonlocal outcome
        # Here, with no checkpoint before `backend.run`: a reload that
        # withdrew the app at any point since the POST is seen.
        catalog.recheck(session.spec)
        attach = AttachOnStart(session, nursery, task_status)
        outcome = await backend.run(session.spec, SessionSink(session), task_status=attach)
        # Nothing outlives the workload: its watchers and a pending resize
        # flush go with it.
        nursery.cancel_scope.cancel()

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_backend)
    finally:
        session.drop_handle()
    if isinstance(outcome, Exited | Failed):
        return outcome
    log.error(
        "backend returned %r, not an Outcome",
        type(outcome).__name__,
        extra={"session_id": session.id},
    )
    return Internal(NO_OUTCOME)


class AttachOnStart:
    """The `task_status` a backend's `run()` is given. `started(Started)`
    attaches the handle and publishes `running` inside the backend's own call,
    before the backend can report anything else: load-bearing, so `running`
    is always the first event after `starting` and stdin sent after it is
    never lost. Then it starts the core's watchers of `Started.address` in
    the workload nursery (`nursery`), so none outlives the run."""

    def __init__(
        self, session: Session, nursery: trio.Nursery, task_status: trio.TaskStatus[None]
    ) -> None:
        self._session = session
        self._nursery = nursery
        self._task_status = task_status

    def started(self, value: Started | None = None) -> None:
        if not isinstance(value, Started):
            raise TypeError(f"a backend reports Started, not {type(value).__name__}")
        session = self._session
        session.attach(value, self._nursery)
        # One app per session today; a session of several apps (issue 19)
        # starts this once per app, each with its own address and ports.
        if value.address is not None:
            ports = tcp_ports(session.spec.ports)
            self._nursery.start_soon(supervise, value.address, ports, SessionReport(session))
        self._task_status.started()
