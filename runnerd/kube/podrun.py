"""One session pod's run, from its create (or adoption) to its teardown.

Owns `PodRun`: what one `KubeBackend.run` needs (the spec, the sink, the
pod's informer subscription, the latest pod seen, the terminal's `Relay` and
`Splice`) and where it is (`podphase.Phase`, whose docstring draws the
moves). The steps are methods that return what they found (the created pod,
the running pod, the outcome); the backend's shared parts come in one
`PodRunContext`, the pods' bookkeeping across runs is the `ledger`'s.

The pod is created (classified errors, stage `create`), its ports published
(`backend.routing.session_routes`, open for the rest of the run: route
health is followed while the pod lives and reported as `route` events), its
start followed through the informer
(`progress` while Pending; a permanent cause, or a pull back-off past the
grace, fails the start; not Running by `start_deadline_seconds` fails it
too), `Started` reported the moment it runs (the `Relay` as the handle,
`stop` as its first step of a user stop), its terminal kept attached
(`terminal.keep_attached`; a bundle session's program waits for the start
line the relay sends through the first attach, so no log read splices its
start), its end read by `podstatus.terminal_outcome`,
and then torn down (`podphase.plan_teardown`, `podstop.tear_down`): deleted
on every path except a detach (SIGUSR2), which leaves it running for a
successor daemon. An adopted pod (`spec.creation` None) is re-announced and
supervised the same way, with no log splice (its clients saw that output
already) and one notice line that output from while runnerd was away may be
missing.

Cancellation: a cancelled run (DELETE, TTL, shutdown) deletes its pod in a
shielded teardown bounded by `podstop.STOP_WAIT_S`; a create cancelled in
flight is awaited CREATE_GRACE_S more, then left to the sweep.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

import runnerd.kube.errors as errors
from runnerd.backend import (
    EndIntent,
    Failed,
    Outcome,
    RunSpec,
    Sink,
    Started,
    StartError,
    WorkloadAddress,
)
from runnerd.contract import RouteState, RunnerEndpoint
from runnerd.kube.bundle import BundleArchiveError, BundleTokens, build_bundle_archive
from runnerd.kube.client import KubeClient
from runnerd.kube.endpoints import announced
from runnerd.kube.informer import GONE, PodInformer, PodState, PodSubscription
from runnerd.kube.ledger import PodLedger
from runnerd.kube.podphase import Phase, Teardown, advance, plan_teardown, stop_reads_log
from runnerd.kube.podspec import (
    GATE_MARKER,
    INSPECT_PORT,
    START_LINE,
    build_pod,
    format_created_at,
    is_gated,
    is_ours,
    pod_name,
)
from runnerd.kube.podstatus import Progress, StartFailed, StartWatch, terminal_outcome
from runnerd.kube.podstop import STOP_LOG_READ_S, delete_for_stop, tear_down
from runnerd.kube.routing import Routing
from runnerd.kube.settings import KubeSettings
from runnerd.kube.terminal import Relay, Splice, keep_attached, notice, read_log

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]

# A pod create cancelled in flight (a stop) is awaited this much longer, then
# given up on: the sweep deletes the pod if it lands later (the ledger keeps
# it in mind for ABANDONED_KEEP_S, past the client's own per-call deadline).
CREATE_GRACE_S = 2.0
RESTARTED_LINE = notice(
    "runnerd restarted and re-attached; output from while it was away may have been missed"
)


@dataclass(frozen=True)
class PodRunContext:
    """What every pod run of one backend shares."""

    settings: KubeSettings
    client: KubeClient
    informer: PodInformer
    tokens: BundleTokens
    ledger: PodLedger
    routing: Routing


class _SinkRoutes:
    """A run session's `routes.RouteReport`: `route` events, notices in the terminal."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink

    def route(self, host: str, port: int, state: RouteState, reason: str | None = None) -> None:
        self._sink.route(host, port, state, reason)

    def notice(self, text: str) -> None:
        self._sink.output(notice(text))


class PodRun:
    """One session's pod run (module docstring); `run` once."""

    def __init__(self, ctx: PodRunContext, spec: RunSpec, sink: Sink, sub: PodSubscription):
        self._ctx = ctx
        self._client = ctx.client
        self._spec = spec
        self._sink = sink
        self._sub = sub
        self.name = pod_name(spec.session_id)
        self.adopted = spec.creation is None
        self.phase = Phase.ADOPTING if self.adopted else Phase.CREATING
        self._pod: Pod | None = None  # the latest state seen; None: gone (or not yet created)
        self.relay = Relay()
        self._splice = Splice(sink.output, sink.output_lost)
        if self.adopted:  # the log is output its clients saw from the previous daemon
            self._splice.pass_through()
        elif spec.bundle is not None:
            # Its program waits for this line (`podspec.gated_command`), held
            # by the relay until the first attach is up: that attach sees all
            # its output, so no log read splices the start.
            self.relay.write(START_LINE)
            self._splice.from_start()
            self._splice.strip_head(GATE_MARKER)
            self._splice.gate_shut = lambda: self.relay.write(START_LINE)

    def _move(self, to: Phase) -> None:
        self.phase = advance(self.phase, to)

    async def run(self, task_status: trio.TaskStatus[Started]) -> Outcome:
        """`runnerd.backend.Backend.run` for this pod: `Started` once it runs
        (or, adopted, at once), then its outcome; torn down on every path."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                began = trio.current_time()  # the start deadline counts from the POST
                pod = self._adopt() if self.adopted else await self._create()
                endpoints = await self._publish(stack, pod)
                if not self.adopted:
                    assert pod is not None
                    self._pod = await self._await_running(pod, began)
                return await self._supervise(endpoints, task_status)
        finally:
            self._ctx.tokens.drop(self._spec.session_id)
            await self._tear_down()

    def _adopt(self) -> Pod | None:
        """An adopted pod (`recover()` saw it running), as last seen (None: gone)."""
        self._ctx.ledger.created(self.name)
        self._pod = _pod(self._sub.latest() or GONE)
        return self._pod

    async def _publish(
        self, stack: contextlib.AsyncExitStack, pod: Pod | None
    ) -> tuple[RunnerEndpoint, ...]:
        """The pod's routes, open in `stack` for the rest of the run (created
        while a new pod starts; an adopted one's re-created if they went
        missing); the endpoints `running` announces."""
        identity = self._spec.identity
        if pod is None:
            return announced(self._ctx.settings, identity, published=False)
        report = _SinkRoutes(self._sink)
        routes = await stack.enter_async_context(
            self._ctx.routing.session_routes(identity, pod, report, fresh=not self.adopted)
        )
        return (await routes.publish(identity.ports)).endpoints

    async def _supervise(
        self, endpoints: tuple[RunnerEndpoint, ...], task_status: trio.TaskStatus[Started]
    ) -> Outcome:
        """Report `Started`, then follow the pod to its end."""
        address = _address(self._spec, self._pod)
        task_status.started(Started(self.relay, endpoints, address, self.stop))
        if self.adopted:
            self._sink.output(RESTARTED_LINE)
        if self._pod is None:
            ended: Outcome | None = Failed("the session pod is gone")
        else:
            ended = terminal_outcome(self._pod)
        if ended is not None:  # it ended before it was seen running
            self._move(Phase.ENDED)
            if not self._splice.released or self._splice.gated:  # what its shell said
                self._splice.catch_up(await read_log(self._client, self.name))
            return ended
        # Entered before any checkpoint: a stop may need the splice next.
        self._move(Phase.RUNNING)
        try:
            return await self._follow()
        finally:
            self._move(Phase.ENDED)
            if not self._splice.released:  # stopped before the attach came up: keep what it wrote
                with trio.CancelScope(shield=True), trio.move_on_after(STOP_LOG_READ_S):
                    self._splice.release(await read_log(self._client, self.name))

    async def _follow(self) -> Outcome:
        """The running pod's terminal, to its end (its reachability and debug
        stream are the core's, from `Started.address`)."""
        attach_send, attach_end = trio.open_memory_channel[bool](1)
        if self.adopted and self._pod is not None and is_gated(self._pod):
            await self._open_adopted_gate()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._attach, attach_send)
            outcome = await self._watch_to_end()
            self._move(Phase.ENDING)
            if self._ctx.ledger.is_stopping(self.name):
                await trio.sleep_forever()  # a stop deleted it: its cancellation follows
            delivered = False  # the attach ended with the container, delivering everything

            async def attach_delivered() -> None:
                nonlocal delivered
                delivered = await attach_end.receive()

            # The container has ended: the attach delivers the rest, within
            # the core's drain budget.
            await self._sink.drain(attach_delivered)
            nursery.cancel_scope.cancel()
        # Gated, an attach that ended with the container saw all of it, even nothing.
        if delivered and self._splice.released and (self._splice.fed or self._splice.gated):
            self._splice.flush()
        else:  # no attach came up, it was cut short or saw nothing: the log has it all
            self._splice.catch_up(await read_log(self._client, self.name))
        return outcome

    async def _open_adopted_gate(self) -> None:
        """An adopted gated pod whose log is empty was never sent its start
        line (its daemon went before the first attach): send it through the
        coming attach, which then sees all the output, marker stripped. An
        unreadable log sends nothing: a second ^D would end a started
        program's input."""
        head = await read_log(self._client, self.name, len(GATE_MARKER))
        if head == b"":
            self.relay.write(START_LINE)
            self._splice.strip_head(GATE_MARKER)

    async def _attach(self, done: trio.MemorySendChannel[bool]) -> None:
        """The terminal kept attached while the pod runs; what
        `keep_attached` returned goes to `done` (one slot, never blocks)."""
        delivered = await keep_attached(
            self._client,
            self.name,
            self.relay,
            self._splice,
            self._sink.output,
            self._pod_runs,
            self._ctx.settings.attach_quiet_s,
        )
        done.send_nowait(delivered)

    def _pod_runs(self) -> bool:
        return self._pod is not None and terminal_outcome(self._pod) is None

    async def _watch_to_end(self) -> Outcome:
        """The pod's outcome, once the informer shows it ended or gone."""
        while (outcome := terminal_outcome(self._pod)) is None:
            self._pod = _pod(await self._sub.next())
        return outcome

    async def stop(self) -> None:
        """`Started.stop`: delete the pod with its grace, for a user stop;
        first, if no attach came up yet, read what it wrote from its log.

        Raises:
            StopRefused: the delete was refused or failed; the pod runs on.
        """
        if stop_reads_log(self.phase, self._splice.released):
            with trio.move_on_after(STOP_LOG_READ_S):
                self._splice.release(await read_log(self._client, self.name))
        await delete_for_stop(self._client, self.name)
        self._ctx.ledger.stop_accepted(self.name)

    async def _tear_down(self) -> None:
        """The pod's end on every path (`podphase.Teardown`); shielded."""
        if self.phase is not Phase.ENDED:
            self._move(Phase.ENDED)
        # Cancelled (it may arrive wrapped in a group): a stop, so the pod is
        # gone before the cancellation propagates; or a detach.
        cancelled = trio.current_effective_deadline() == -math.inf
        plan = plan_teardown(
            cancelled=cancelled,
            detach=cancelled and self._sink.end_intent() is EndIntent.DETACH,
            stop_accepted=self._ctx.ledger.is_stopping(self.name),
        )
        ids = {"session_id": self._spec.session_id, "pod": self.name}
        if plan is Teardown.LEAVE:
            log.info("session pod left running for a successor", extra=ids)
            return
        with trio.CancelScope(shield=True):
            deleted = await tear_down(self._client, self._ctx.ledger, self.name, self._sub, plan)
        log.log(
            logging.INFO if deleted else logging.WARNING,
            "session pod %s",
            "deleted" if deleted else "not deleted yet (retried in the background)",
            extra=ids,
        )

    # -- the start ----------------------------------------------------------

    async def _stage_bundle(self) -> str | None:
        """The URL the pod fetches its bundle from (None: no bundle), its
        archive built in a worker thread and staged under a token. Raises
        `StartError` (stage "build") when the bundle cannot be archived."""
        spec = self._spec
        if spec.bundle is None:
            return None
        try:
            archive = await trio.to_thread.run_sync(build_bundle_archive, spec.bundle)
        except BundleArchiveError as exc:
            raise StartError("build", str(exc)) from exc
        token = self._ctx.tokens.stage(spec.session_id, archive, trio.current_time())
        return f"{self._ctx.settings.self_url}/internal/bundles/{spec.session_id}?token={token}"

    async def _create(self) -> Pod:
        """The created pod, the phase moved to PENDING. Raises `StartError`
        (stages "build", "create")."""
        url = await self._stage_bundle()
        # The session's own creation time (stamped by the manager), to the
        # millisecond: an adopted session keeps its createdAt and its TTL.
        created_at = format_created_at(self._spec.identity.created_at or time.time())
        pod = build_pod(self._ctx.settings, self._spec, bundle_url=url, created_at=created_at)
        self._sink.progress("provision", "creating the session pod")
        self._ctx.ledger.created(self.name)
        created, failure = await self._create_within_grace(pod)
        # A stop that cut the create short ends as a stop, not as its error.
        await trio.lowlevel.checkpoint_if_cancelled()
        if failure is not None or created is None:
            error = failure or errors.Unreachable("could not create the session pod")
            log.warning(
                "pod create failed: %r",
                error.__cause__ or error,
                extra={"session_id": self._spec.session_id},
            )
            raise errors.start_error(error, "create") from error
        self._move(Phase.PENDING)
        return created

    async def _create_within_grace(self, pod: Pod) -> tuple[Pod | None, errors.KubeError | None]:
        """The create's answer: the pod, or its error, or neither (given up on).

        Shielded: a create cancelled in flight may still land, and the
        teardown's delete must come after it, or the pod would outlive its
        session. But only CREATE_GRACE_S past the cancellation (a stop must
        stay bounded whatever the apiserver does): then the name is left to
        the sweep, which deletes the pod if it lands later."""
        window = trio.CancelScope(shield=True)
        created: Pod | None = None
        failure: errors.KubeError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_grace_on_cancel, window)
            with window:
                try:
                    created = await self._client.create_pod(
                        pod,
                        operation="could not create the session pod",
                        is_ours=lambda p: is_ours(p, self._ctx.settings, self._spec.session_id),
                    )
                except errors.KubeError as exc:  # raised here, never as a group
                    failure = exc
            if window.cancelled_caught:  # given up on: the stop goes on without it
                log.warning(
                    "pod create unanswered %g s after the stop; the reaper deletes"
                    " the pod if it lands",
                    CREATE_GRACE_S,
                    extra={"session_id": self._spec.session_id},
                )
                self._ctx.ledger.gave_up_create(self.name, trio.current_time())
            nursery.cancel_scope.cancel()
        return created, failure

    async def _await_running(self, first: Pod, began: float) -> Pod | None:
        """The pod once it runs (or has already ended: None or its last state),
        within `start_deadline_seconds` of `began` (the session's start, so a
        slow bundle build or create counts too).

        Raises:
            StartError: a permanent cause, a pull back-off past the grace, or
                the start deadline.
        """
        settings = self._ctx.settings
        watch = StartWatch(settings.pull_backoff_grace_s)
        pod: Pod | None = _pod(self._sub.latest() or first)
        said = ""
        with trio.move_on_at(began + settings.start_deadline_s):
            while True:
                verdict = watch.observe(pod, trio.current_time())
                if isinstance(verdict, StartFailed):
                    raise StartError("provision", verdict.message)
                if isinstance(verdict, Progress):
                    if verdict.message != said:
                        self._sink.progress(verdict.phase, verdict.message)
                        said = verdict.message
                else:  # running, or ended before it was seen running
                    return pod
                pod = _pod(await self._sub.next())
        informer = self._ctx.informer
        refused = f"; {informer.refused}" if informer.refused else ""
        raise StartError(
            "provision",
            f"the session pod was not running after {settings.start_deadline_s:g} s"
            f" (last: {said or 'waiting'}{refused})",
        )


async def _grace_on_cancel(window: trio.CancelScope) -> None:
    """Give `window` CREATE_GRACE_S more once the caller is cancelled."""
    try:
        await trio.sleep_forever()
    finally:
        window.deadline = min(window.deadline, trio.current_time() + CREATE_GRACE_S)


def _pod(state: PodState) -> Pod | None:
    return None if state is GONE else state  # type: ignore[return-value]


def _address(spec: RunSpec, pod: Pod | None) -> WorkloadAddress | None:
    """Where the runner reaches a running pod: its own IP, with the kernel's
    debug server on INSPECT_PORT (never published) when asked. None before
    it has an IP, or once it has ended: nothing to watch."""
    ip = _pod_ip(pod)
    if ip is None or terminal_outcome(pod) is not None:
        return None
    return WorkloadAddress(ip, INSPECT_PORT if spec.inspect else None)


def _pod_ip(pod: Pod | None) -> str | None:
    ip = (pod.get("status") or {}).get("podIP") if pod else None
    return ip if isinstance(ip, str) and ip else None
