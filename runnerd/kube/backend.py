"""The Kubernetes backend: each session is a pod in the session namespace.

Owns a session's pod from create to delete (`run`), built from the parts in
this package (see its docstring): the pod is created (classified errors,
stage `create`), its ports published (`endpoints.publish_endpoints`: a
Service and an Ingress the pod owns, when `ingress_base_domain` is set), its
start followed through the one shared informer
(`progress` while Pending; a permanent cause, or a pull back-off past the
grace, fails the start; not Running by `start_deadline_seconds` fails it
too), `Started` reported the moment it runs (a `terminal.Relay` as the
handle), its terminal kept attached (`terminal.keep_attached`), its end read
by `podstatus.terminal_outcome`, and the pod deleted on every path: as soon
as its status is read, or on cancellation (DELETE, TTL, shutdown), except a
detach (SIGUSR2), which leaves it running for a successor daemon. A user
stop deletes it first, before the cancellation (`Started.stop`,
`podstop.PodStops`): a refused delete leaves the session running.

Restarts (`runnerd.kube.recovery`): `recover()` reads back the pods a
previous process left; `run()` with no creation re-attaches to one (no log
splice: its client saw that output already; one notice line says output
from while runnerd was away may be missing) and supervises it as usual.

`probe` answers whether sessions could start now (ready, unreachable,
forbidden, namespace missing), each with what the operator should do.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import trio

import runnerd.kube.errors as errors
from runnerd.backend import (
    DRAIN_TIMEOUT_S,
    EndIntent,
    Failed,
    ImageSpec,
    Outcome,
    Recovered,
    RunSpec,
    Sink,
    Started,
    StartError,
    WorkloadAddress,
)
from runnerd.config import AppEntry, KubeSettings
from runnerd.contract import AvailabilityReport
from runnerd.kube.bundle import BundleArchiveError, BundleTokens, build_bundle_archive
from runnerd.kube.client import KubeClient
from runnerd.kube.endpoints import announced, publish_endpoints
from runnerd.kube.informer import GONE, PodInformer, PodState, PodSubscription
from runnerd.kube.podspec import INSPECT_PORT, build_pod, format_created_at, is_ours, pod_name
from runnerd.kube.podstatus import Progress, StartFailed, StartWatch, terminal_outcome
from runnerd.kube.podstop import STOP_LOG_READ_S, PodStops
from runnerd.kube.probe import probe_cluster
from runnerd.kube.recovery import left_pods, recover_pods
from runnerd.kube.terminal import Relay, Splice, keep_attached, notice, read_log

log = logging.getLogger(__name__)

# A pod create cancelled in flight (a stop) is awaited this much longer, then
# given up on: the reaper deletes the pod if it lands later (kept in mind for
# ABANDONED_KEEP_S, past the client's own per-call deadline).
CREATE_GRACE_S = 2.0
ABANDONED_KEEP_S = 120.0
RESTARTED_LINE = notice(
    "runnerd restarted and re-attached; output from while it was away may have been missed"
)


def _pod(state: PodState) -> Mapping[str, Any] | None:
    return None if state is GONE else state  # type: ignore[return-value]


class KubeBackend:
    """`runnerd.backend.Backend` running sessions as pods."""

    name = "kubernetes"
    notices: tuple[str, ...] = ()
    # A pod outlives its daemon: a detach leaves it for a successor to adopt.
    detach_supported = True

    def __init__(
        self,
        settings: KubeSettings,
        client: KubeClient,
        informer: PodInformer,
        tokens: BundleTokens,
        *,
        apps: Callable[[], Mapping[str, AppEntry]],
    ) -> None:
        self._settings = settings
        self.client = self._client = client
        self._informer = informer
        self._tokens = tokens
        self._apps = apps
        # Pods this process created and has not deleted: the reaper spares them.
        self.live: set[str] = set()
        # Pods given up on (name → when): creates abandoned at a stop, and
        # deletes that failed; the sweep deletes those pods once it sees them.
        self.abandoned: dict[str, float] = {}
        # Pods the previous process stopped but could not delete (`giveup`).
        self.stopped_before: set[str] = set()
        self._stops = PodStops(client, self.live, self.abandoned)

    async def recover(self) -> list[Recovered]:
        """With `on_restart = "adopt"`, once the informer has listed them:
        the pods a previous process left, live and ended (the ended ones, and
        the unreadable ones, deleted); see `runnerd.kube.recovery`. Empty
        with "reap" (the provider's reaper deletes them)."""
        if self._settings.on_restart != "adopt":
            await trio.lowlevel.checkpoint()
            return []
        await self._informer.wait_synced()
        return await recover_pods(
            self._client, left_pods(self._informer.pods(), self.live, self.stopped_before)
        )

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        """Whether sessions could start now (`probe.probe_cluster`)."""
        return await probe_cluster(self._client)

    async def run(
        self,
        spec: RunSpec,
        sink: Sink,
        *,
        task_status: trio.TaskStatus[Started] = trio.TASK_STATUS_IGNORED,
    ) -> Outcome:
        if spec.creation is not None and spec.app is not None and spec.app not in self._apps():
            raise StartError("provision", f"app '{spec.app}' is no longer offered by this runner")
        name = pod_name(spec.session_id)
        ids = {"session_id": spec.session_id}
        with self._informer.subscribe(name) as sub:
            try:
                return await self._run(spec, sink, sub, task_status)
            finally:
                self._tokens.drop(spec.session_id)
                # Cancelled (it may arrive wrapped in a group): a stop, so the
                # pod is gone before the cancellation propagates; or a detach.
                stopped = trio.current_effective_deadline() == -math.inf
                if stopped and sink.end_intent() is EndIntent.DETACH:
                    log.info("session pod left running for a successor", extra={**ids, "pod": name})
                else:
                    with trio.CancelScope(shield=True):
                        deleted = await self._stops.delete(name, sub, wait=stopped)
                    log.log(
                        logging.INFO if deleted else logging.WARNING,
                        "session pod %s",
                        "deleted" if deleted else "not deleted yet (retried in the background)",
                        extra={**ids, "pod": name},
                    )

    async def _run(
        self, spec: RunSpec, sink: Sink, sub: PodSubscription, task_status: trio.TaskStatus[Started]
    ) -> Outcome:
        if spec.creation is None:
            return await self._readopt(spec, sink, sub, task_status)
        began = trio.current_time()  # the start deadline counts from here (the POST)
        first = await self._create(spec, sink)
        # Published while the pod starts; owned by it, so collected with it.
        endpoints = await publish_endpoints(
            self._client, self._settings, spec.identity, first, sink
        )
        running = await self._await_running(sub, first, sink, began)
        relay = Relay()
        stop = self._stops.stopper(pod_name(spec.session_id))
        task_status.started(Started(relay, endpoints, _address(spec, running), stop))
        return await self._supervise(spec, sink, sub, running, relay)

    async def _readopt(
        self, spec: RunSpec, sink: Sink, sub: PodSubscription, task_status: trio.TaskStatus[Started]
    ) -> Outcome:
        """An adopted pod (`recover()` saw it running): `Started` at once, then
        supervised as a pod this process started."""
        self.live.add(pod_name(spec.session_id))
        pod = _pod(sub.latest() or GONE)
        relay = Relay()
        # Re-announced (and re-created if they went missing) for the same pod.
        endpoints = (
            await publish_endpoints(self._client, self._settings, spec.identity, pod, sink)
            if pod is not None
            else announced(self._settings, spec.identity, published=False)
        )
        task_status.started(
            Started(
                relay,
                endpoints,
                _address(spec, pod),
                self._stops.stopper(pod_name(spec.session_id)),
            )
        )
        sink.output(RESTARTED_LINE)
        return await self._supervise(spec, sink, sub, pod, relay, adopted=True)

    async def _stage_bundle(self, spec: RunSpec) -> str | None:
        """The URL the pod fetches its bundle from (None: no bundle), its
        archive built in a worker thread and staged under a token. Raises
        `StartError` (stage "build") when the bundle cannot be archived."""
        if spec.bundle is None:
            return None
        try:
            archive = await trio.to_thread.run_sync(build_bundle_archive, spec.bundle)
        except BundleArchiveError as exc:
            raise StartError("build", str(exc)) from exc
        token = self._tokens.stage(spec.session_id, archive, trio.current_time())
        return f"{self._settings.self_url}/internal/bundles/{spec.session_id}?token={token}"

    async def _create(self, spec: RunSpec, sink: Sink) -> Mapping[str, Any]:
        url = await self._stage_bundle(spec)
        # The session's own creation time (stamped by the manager), to the
        # millisecond: an adopted session keeps its createdAt and its TTL.
        created_at = format_created_at(spec.identity.created_at or time.time())
        pod = build_pod(self._settings, spec, bundle_url=url, created_at=created_at)
        sink.progress("provision", "creating the session pod")
        name = pod["metadata"]["name"]
        self.live.add(name)
        # Shielded: a create cancelled in flight may still land, and the
        # teardown's delete must come after it, or the pod would outlive its
        # session. But only CREATE_GRACE_S past the cancellation (a stop must
        # stay bounded whatever the apiserver does): then the name is left to
        # the reaper, which deletes the pod if it lands later.
        window = trio.CancelScope(shield=True)
        created: Mapping[str, Any] | None = None
        failure: errors.KubeError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_grace_on_cancel, window)
            with window:
                try:
                    created = await self._client.create_pod(
                        pod,
                        operation="could not create the session pod",
                        is_ours=lambda p: is_ours(p, self._settings, spec.session_id),
                    )
                except errors.KubeError as exc:  # raised here, never as a group
                    failure = exc
            if window.cancelled_caught:  # given up on: the stop goes on without it
                log.warning(
                    "pod create unanswered %g s after the stop; the reaper deletes"
                    " the pod if it lands",
                    CREATE_GRACE_S,
                    extra={"session_id": spec.session_id},
                )
                self.abandoned[name] = trio.current_time()
            nursery.cancel_scope.cancel()
        # A stop that cut the create short ends as a stop, not as its error.
        await trio.lowlevel.checkpoint_if_cancelled()
        if failure is not None or created is None:
            error = failure or errors.Unreachable("could not create the session pod")
            log.warning(
                "pod create failed: %r",
                error.__cause__ or error,
                extra={"session_id": spec.session_id},
            )
            raise errors.start_error(error, "create") from error
        return created

    def take_landed(self, names: set[str], now: float) -> list[str]:
        """Abandoned pods among `names` (to delete: each stays abandoned
        until its delete succeeds); forgets those not seen for ABANDONED_KEEP_S
        (a create never lands that late)."""
        landed = [n for n in self.abandoned if n in names and n not in self.live]
        for name in list(self.abandoned):
            if name in landed:
                self.abandoned[name] = now
            elif now - self.abandoned[name] > ABANDONED_KEEP_S:
                del self.abandoned[name]
        return landed

    async def _await_running(
        self, sub: PodSubscription, first: Mapping[str, Any], sink: Sink, began: float
    ) -> Mapping[str, Any] | None:
        """The pod once it runs (or has already ended: None or its last state),
        within `start_deadline_seconds` of `began` (the session's start, so a
        slow bundle build or create counts too).

        Raises:
            StartError: a permanent cause, a pull back-off past the grace, or
                the start deadline.
        """
        watch = StartWatch(self._settings.pull_backoff_grace_s)
        pod: Mapping[str, Any] | None = _pod(sub.latest() or first)
        said = ""
        deadline_s = self._settings.start_deadline_s
        with trio.move_on_at(began + deadline_s):
            while True:
                verdict = watch.observe(pod, trio.current_time())
                if isinstance(verdict, StartFailed):
                    raise StartError("provision", verdict.message)
                if isinstance(verdict, Progress):
                    if verdict.message != said:
                        sink.progress(verdict.phase, verdict.message)
                        said = verdict.message
                else:  # running, or ended before it was seen running
                    return pod
                pod = _pod(await sub.next())
        refused = f"; {self._informer.refused}" if self._informer.refused else ""
        raise StartError(
            "provision",
            f"the session pod was not running after {deadline_s:g} s"
            f" (last: {said or 'waiting'}{refused})",
        )

    async def _supervise(
        self,
        spec: RunSpec,
        sink: Sink,
        sub: PodSubscription,
        pod: Mapping[str, Any] | None,
        relay: Relay,
        *,
        adopted: bool = False,
    ) -> Outcome:
        name = pod_name(spec.session_id)
        splice = Splice(sink.output, sink.output_lost)
        if adopted:  # the log is output its clients saw from the previous daemon
            splice.pass_through()
        outcome = terminal_outcome(pod) if pod is not None else Failed("the session pod is gone")
        if outcome is not None:  # it ended before it was seen running
            if not splice.released:
                splice.release(await read_log(self._client, name))
            return outcome
        try:
            # Entered before any checkpoint: a stop may need the splice next.
            with self._stops.supervising(name, splice):
                return await self._follow(spec, sink, sub, pod, relay, splice)
        finally:
            if not splice.released:  # stopped before the attach came up: keep what it wrote
                with trio.CancelScope(shield=True), trio.move_on_after(STOP_LOG_READ_S):
                    splice.release(await read_log(self._client, name))

    async def _follow(
        self,
        spec: RunSpec,
        sink: Sink,
        sub: PodSubscription,
        pod: Mapping[str, Any] | None,
        relay: Relay,
        splice: Splice,
    ) -> Outcome:
        """The running pod's terminal, to its end."""
        name = pod_name(spec.session_id)
        state: dict[str, Mapping[str, Any] | None] = {"pod": pod}
        outcome: Outcome | None = None

        def pod_runs() -> bool:
            return terminal_outcome(state["pod"]) is None and state["pod"] is not None

        delivered: list[bool] = []  # the attach ended with the container
        async with trio.open_nursery() as nursery:
            attached = trio.Event()

            async def attach() -> None:
                try:
                    delivered.append(
                        await keep_attached(
                            self._client, name, relay, splice, sink.output, pod_runs
                        )
                    )
                finally:
                    attached.set()

            nursery.start_soon(attach)
            while (outcome := terminal_outcome(state["pod"])) is None and state["pod"] is not None:
                state["pod"] = _pod(await sub.next())
            if self._stops.accepted(name):  # a stop deleted it: its cancellation follows
                await trio.sleep_forever()
            with trio.move_on_after(DRAIN_TIMEOUT_S):
                await attached.wait()
            nursery.cancel_scope.cancel()
        if delivered == [True] and splice.released and splice.fed:
            splice.flush()
        else:  # no attach came up, it was cut short or saw nothing: the log has it all
            splice.catch_up(await read_log(self._client, name))
        return (
            outcome
            if outcome is not None
            else Failed("the session pod was deleted outside runnerd")
        )


async def _grace_on_cancel(window: trio.CancelScope) -> None:
    """Give `window` CREATE_GRACE_S more once the caller is cancelled."""
    try:
        await trio.sleep_forever()
    finally:
        window.deadline = min(window.deadline, trio.current_time() + CREATE_GRACE_S)


def _address(spec: RunSpec, pod: Mapping[str, Any] | None) -> WorkloadAddress | None:
    """Where the runner reaches a running pod: its own IP, with the kernel's
    debug server on INSPECT_PORT (never published) when asked. None before
    it has an IP, or once it has ended: nothing to watch."""
    ip = _pod_ip(pod)
    if ip is None or terminal_outcome(pod) is not None:
        return None
    return WorkloadAddress(ip, INSPECT_PORT if spec.inspect else None)


def _pod_ip(pod: Mapping[str, Any] | None) -> str | None:
    ip = (pod.get("status") or {}).get("podIP") if pod else None
    return ip if isinstance(ip, str) and ip else None
