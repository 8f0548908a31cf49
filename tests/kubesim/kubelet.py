"""The simulated kubelet: runs the store's pods as real host processes and reports their status.

Owns the node: it watches the store, schedules every new pod onto itself
(nodeName, a loopback podIP of its own), runs init containers in order and
then the containers (kubelet_runtime) once the pod's volumes are set up
(kubelet_volumes: configMap volumes as files), writes every state change through
`store.update` with the real status shapes (kubelet_status), enforces
`activeDeadlineSeconds`, carries out graceful deletion (SIGTERM, SIGKILL after
the grace period, then `store.remove`), and serves attach/exec connections
(`serve_stream`, the channel protocol in attach.py).

Resource handling: each pod is one task; its processes, its host directory
and its IP never outlive the pod or `run()` (cancel `run` and everything is
killed and removed).
"""

from __future__ import annotations

import logging
import secrets
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from . import kubelet_status as st
from . import kubelet_streams as ks
from .attach import Conn as Conn
from .attach import send_failure
from .images import Image, ImageMap, InvalidReference, parse_image_ref
from .kubelet_env import names_of, skipped_message, wait_for_env
from .kubelet_events import NORMAL, WARNING, EventRecorder, PodRef, container_path
from .kubelet_logs import ContainerLog
from .kubelet_pull import ImagePuller
from .kubelet_runtime import (
    HostProcess,
    PodNetwork,
    ProcessPlan,
    StartError,
    build_plan,
    install_programs,
    open_host_process,
)
from .kubelet_volumes import container_root, mount_dir, mount_volumes
from .store import NotFound, Store, build_timestamp

log = logging.getLogger(__name__)
# What a real kubelet says of a pod it evicts for memory pressure.
EVICTED_MESSAGE = "The node was low on resource: memory."
Obj = dict[str, Any]


class PodStopped(Exception):
    """The pod is being deleted or has run out of time: start nothing more."""


@dataclass(eq=False)
class PodWorker:
    """What the kubelet holds for one pod while its task runs."""

    ns: str
    name: str
    uid: str
    spec: Obj
    dir: Path
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    stopping: trio.Event = field(default_factory=trio.Event)  # deletion or deadline
    deleting: trio.Event = field(default_factory=trio.Event)  # deletionTimestamp appeared
    delete_grace_s: float = 0.0
    removed: trio.Event = field(default_factory=trio.Event)
    model: st.PodModel | None = None
    processes: dict[str, HostProcess] = field(default_factory=dict)
    plans: dict[str, ProcessPlan] = field(default_factory=dict)
    mounts: dict[str, dict[str, Path]] = field(default_factory=dict)
    execs: dict[str, set[HostProcess]] = field(default_factory=dict)  # container → running execs
    stdin_once_used: set[str] = field(default_factory=set)
    logs: dict[str, ContainerLog] = field(default_factory=dict)  # container → its run's output

    @property
    def ref(self) -> PodRef:
        return PodRef(self.ns, self.name, self.uid)

    def container(self, name: str) -> Obj | None:
        every = (self.spec.get("initContainers") or []) + self.spec["containers"]
        return next((c for c in every if c["name"] == name), None)


class Kubelet:
    """One node. `run()` serves until cancelled; see the module doc."""

    def __init__(
        self,
        store: Store,
        images: ImageMap,
        workdir: Path,
        *,
        node_name: str = "kubesim-node",
        pod_network: str = "127.0.0.0/16",  # 127.0.0.2, .3, ...: all of 127/8 is loopback
        host_ip: str = "127.0.0.1",
        image_pull_backoff_s: float = 1.0,
    ) -> None:
        self._store = store
        self.workdir = Path(workdir)
        self.node_name = node_name
        self.host_ip = host_ip
        self._network = PodNetwork(pod_network)
        self._workers: dict[str, PodWorker] = {}
        self.events = EventRecorder(store, node_name)
        self._puller = ImagePuller(images, self.events, image_pull_backoff_s)
        self._nursery: trio.Nursery | None = None

    @property
    def image_pull_backoff_s(self) -> float:
        """The first image pull back-off (doubling up to 300 s); tests may shorten it live."""
        return self._puller.backoff_s

    @image_pull_backoff_s.setter
    def image_pull_backoff_s(self, value: float) -> None:
        self._puller.backoff_s = value

    # ---- the watch loop -------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve pods until cancelled; started() once the first snapshot is taken."""
        (self.workdir / "pods").mkdir(parents=True, exist_ok=True)
        with self._store.kubelet_registered():
            try:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    await self._watch(task_status)
            finally:
                self._nursery = None
                shutil.rmtree(self.workdir / "pods", ignore_errors=True)

    async def _watch(self, task_status: trio.TaskStatus[None]) -> None:
        started = False
        while True:  # a cut subscription (fault injection) is re-opened and re-listed
            async with self._store.subscribe() as events:
                # Subscribe before the snapshot (load-bearing): nothing falls in between.
                live = {p["metadata"]["uid"]: p for p in self._store.list("pods", None)}
                for uid in set(self._workers) - set(live):
                    self._forget(uid)
                for pod in live.values():
                    self._on_pod("MODIFIED", pod)
                if not started:
                    task_status.started()
                    started = True
                async for kind, resource, obj in events:
                    if resource == "pods":
                        self._on_pod(kind, obj)

    def _on_pod(self, kind: str, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        worker = self._workers.get(uid)
        if kind == "DELETED":
            self._forget(uid)
        elif worker is None:
            if self._wants(pod):
                self._start(pod)
            elif self._orphaned(pod):
                # Marked for deletion with nothing running here: confirm it at once.
                assert self._nursery is not None
                self._nursery.start_soon(self._confirm_deletion, pod)
        elif meta.get("deletionTimestamp") and not worker.deleting.is_set():
            worker.delete_grace_s = float(meta.get("deletionGracePeriodSeconds") or 0)
            worker.deleting.set()
            worker.stopping.set()

    def _wants(self, pod: Obj) -> bool:
        node = pod.get("spec", {}).get("nodeName")
        return (
            node in (None, "", self.node_name)
            and not pod["metadata"].get("deletionTimestamp")
            and pod.get("status", {}).get("phase") not in st.TERMINAL
        )

    def _orphaned(self, pod: Obj) -> bool:
        node = pod.get("spec", {}).get("nodeName")
        return node == self.node_name and bool(pod["metadata"].get("deletionTimestamp"))

    async def _confirm_deletion(self, pod: Obj) -> None:
        meta = pod["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        current = self._store.get("pods", ns, name)
        if current is not None and current["metadata"]["uid"] == meta["uid"]:
            try:
                await self._store.remove("pods", ns, name)
            except NotFound:
                pass

    def _start(self, pod: Obj) -> None:
        meta = pod["metadata"]
        worker = PodWorker(
            meta.get("namespace", ""),
            meta["name"],
            meta["uid"],
            pod["spec"],
            self.workdir / "pods" / meta["uid"],
        )
        self._workers[worker.uid] = worker
        assert self._nursery is not None
        self._nursery.start_soon(self._run_pod, worker)

    def _forget(self, uid: str) -> None:
        worker = self._workers.get(uid)
        if worker is not None:
            worker.removed.set()
            worker.scope.cancel()  # removed from storage: nothing left to report to

    # ---- one pod ----------------------------------------------------------------------

    async def _run_pod(self, worker: PodWorker) -> None:
        try:
            await self._run_pod_inner(worker)
        except Exception:
            # A simulator bug in one pod must not take the node (and the cluster) down.
            log.exception(
                "kubesim kubelet: pod %s/%s crashed the simulator", worker.ns, worker.name
            )
        finally:
            self._workers.pop(worker.uid, None)
            self._network.release(worker.uid)
            shutil.rmtree(worker.dir, ignore_errors=True)

    async def _run_pod_inner(self, worker: PodWorker) -> None:
        with worker.scope:
            await self._schedule(worker)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._enforce_deadline, worker)
                nursery.start_soon(self._carry_out_deletion, worker)
                await self._run_containers(worker)
                nursery.cancel_scope.cancel()
            self._network.release(worker.uid)
            if worker.deleting.is_set():
                await self._remove(worker)
            await worker.removed.wait()

    async def _schedule(self, worker: PodWorker) -> None:
        ip = self._network.claim(worker.uid)
        images = {}
        for c in (worker.spec.get("initContainers") or []) + worker.spec["containers"]:
            try:
                images[c["name"]] = parse_image_ref(c.get("image", "")).normalized
            except InvalidReference:
                pass
        init, main = st.build_models({"spec": worker.spec}, images)
        worker.model = st.PodModel(
            init, main, ip, self.host_ip, build_timestamp(), st.build_qos_class(worker.spec)
        )
        # No sandbox until the volumes are set up (only configMap ones can keep it waiting).
        volumes = worker.spec.get("volumes") or []
        worker.model.sandbox_ready = not any("configMap" in v for v in volumes)
        for sub in ("volumes", "root"):
            (worker.dir / sub).mkdir(parents=True, exist_ok=True)

        def bind(pod: Obj) -> None:
            pod["spec"]["nodeName"] = self.node_name

        await self._write(worker, bind)
        await self.events.scheduled(worker.ref)

    async def _write(self, worker: PodWorker, also: Callable[[Obj], None] | None = None) -> None:
        """Publish the model as the pod's status (a MODIFIED event); a vanished pod is ignored."""
        model = worker.model
        assert model is not None

        def mutate(pod: Obj) -> None:
            if also is not None:
                also(pod)
            # Rendered at commit time, not before the store's checkpoint: trio may wake
            # concurrent writers in any order, and the last commit must be the newest.
            pod["status"] = st.render_status(model, build_timestamp())

        try:
            await self._store.update("pods", worker.ns, worker.name, mutate)
        except NotFound:
            worker.removed.set()
            worker.scope.cancel()

    async def _remove(self, worker: PodWorker) -> None:
        try:
            await self._store.remove("pods", worker.ns, worker.name)
        except NotFound:
            pass
        worker.removed.set()

    async def _enforce_deadline(self, worker: PodWorker) -> None:
        deadline_s = worker.spec.get("activeDeadlineSeconds")
        if deadline_s is None:
            return
        await trio.sleep(float(deadline_s))
        await self._fail_pod(worker, "DeadlineExceeded", st.DEADLINE_MESSAGE, NORMAL)

    async def evict(self, ns: str, name: str) -> None:
        """Node-pressure eviction of pod `ns/name` (a kubelet's own, no API
        call asked for it): the pod ends `Failed`/`Evicted` as a deadline does,
        its containers killed; a pod not running here is left as it is."""
        for worker in list(self._workers.values()):
            if (worker.ns, worker.name) == (ns, name) and worker.model is not None:
                await self._fail_pod(worker, "Evicted", EVICTED_MESSAGE, WARNING)

    async def kill_container(self, ns: str, name: str, container: str) -> None:
        """SIGKILL container `container` of pod `ns/name`, as the kernel's OOM
        killer does (it terminates 137; with `restartPolicy: Never` it stays
        so); a container not running here is left as it is."""
        await trio.lowlevel.checkpoint()
        for worker in list(self._workers.values()):
            proc = worker.processes.get(container)
            if (worker.ns, worker.name) == (ns, name) and proc is not None:
                proc.signal_group(signal.SIGKILL)

    async def _fail_pod(self, worker: PodWorker, reason: str, message: str, kind: str) -> None:
        """End the pod `Failed` with `reason` (pod-level), then kill its containers."""
        assert worker.model is not None
        if worker.model.final_phase:
            return
        worker.model.final_phase = "Failed"
        worker.model.reason = reason
        worker.model.message = message
        await self._write(worker)
        await self.events.pod_event(worker.ref, kind, reason, message)
        worker.stopping.set()
        await self._kill_all(worker, float(worker.spec.get("terminationGracePeriodSeconds", 30)))

    async def _carry_out_deletion(self, worker: PodWorker) -> None:
        await worker.deleting.wait()
        await self._kill_all(worker, worker.delete_grace_s)

    async def _kill_all(self, worker: PodWorker, grace_s: float) -> None:
        """SIGTERM every process group now, SIGKILL whatever is left after `grace_s`."""
        for name, proc in list(worker.processes.items()):
            proc.signal_group(signal.SIGTERM)
            path = container_path(
                name, init=name not in {c["name"] for c in worker.spec["containers"]}
            )
            await self.events.pod_event(
                worker.ref, NORMAL, "Killing", f"Stopping container {name}", field_path=path
            )
        await trio.sleep(grace_s)
        for proc in list(worker.processes.values()):
            proc.signal_group(signal.SIGKILL)

    # ---- containers -------------------------------------------------------------------

    async def _run_containers(self, worker: PodWorker) -> None:
        assert worker.model is not None
        try:
            if not await self._mount(worker):
                raise PodStopped
            for spec, model in zip(
                worker.spec.get("initContainers") or [], worker.model.init, strict=True
            ):
                if await self._run_container(worker, spec, model, init=True) != 0:
                    await self._write(worker)
                    return
            async with trio.open_nursery() as nursery:
                for spec, model in zip(worker.spec["containers"], worker.model.main, strict=True):
                    nursery.start_soon(self._run_main_container, worker, spec, model)
        except PodStopped:  # an init container's: raised here directly, never in a group
            pass
        await self._write(worker)

    async def _mount(self, worker: PodWorker) -> bool:
        """The pod's volumes, before any container (False: the pod stopped while waiting)."""

        async def report(message: str) -> None:
            await self.events.pod_event(worker.ref, WARNING, "FailedMount", message)

        root = worker.dir / "volumes"
        mounted = await mount_volumes(
            self._store, worker.ns, worker.spec, root, report, worker.stopping
        )
        assert worker.model is not None
        worker.model.sandbox_ready = mounted  # published with the next status write
        return mounted

    async def _env(self, worker: PodWorker, spec: Obj, model: st.ContainerModel, path: str) -> Obj:
        """`spec` with its ConfigMap env read (kubelet_env); waits in
        CreateContainerConfigError while it cannot be, raises PodStopped if stopped."""
        if not names_of(spec):
            return spec

        async def report(message: str) -> None:
            model.state = st.waiting("CreateContainerConfigError", message)
            await self._write(worker)
            error = f"Error: {message}"
            await self.events.pod_event(worker.ref, WARNING, "Failed", error, field_path=path)

        got = await wait_for_env(self._store, worker.ns, spec, report, worker.stopping)
        if got is None:
            raise PodStopped
        for name, keys in got[1].items():
            message = skipped_message(worker.ns, name, keys)
            await self.events.pod_event(
                worker.ref, WARNING, "InvalidEnvironmentVariableNames", message
            )
        return got[0]

    async def _run_main_container(
        self, worker: PodWorker, spec: Obj, model: st.ContainerModel
    ) -> None:
        """One main container; PodStopped ends only this one.

        Caught here, inside the nursery's child, not around the nursery: there it would
        arrive wrapped in an ExceptionGroup (trio's strict groups) and, worse, cancel the
        siblings, which must get their SIGTERM and grace period like any deletion.
        """
        try:
            await self._run_container(worker, spec, model)
        except PodStopped:
            pass

    async def _run_container(
        self, worker: PodWorker, spec: Obj, model: st.ContainerModel, *, init: bool = False
    ) -> int:
        path = container_path(spec["name"], init=init)
        image = await self._pull(worker, spec, model, path)
        if worker.stopping.is_set():
            raise PodStopped
        plan = self._plan(worker, await self._env(worker, spec, model, path), image)
        created = f"Created container: {spec['name']}"
        await self.events.pod_event(worker.ref, NORMAL, "Created", created, field_path=path)
        model.container_id = "containerd://" + secrets.token_hex(32)
        started_at = build_timestamp()
        log = worker.logs[spec["name"]] = ContainerLog()
        try:
            async with open_host_process(
                plan, tty=bool(spec.get("tty")), stdin=bool(spec.get("stdin")), record=log.write
            ) as proc:
                worker.processes[spec["name"]] = proc
                try:
                    model.state = {"running": {"startedAt": started_at}}
                    model.ready = model.started = not init
                    await self._write(worker)
                    started = f"Started container {spec['name']}"
                    await self.events.pod_event(
                        worker.ref, NORMAL, "Started", started, field_path=path
                    )
                    code = await proc.wait()
                finally:
                    del worker.processes[spec["name"]]  # exec/attach find only running ones
                    for exec_proc in worker.execs.pop(spec["name"], set()):
                        exec_proc.signal_group(signal.SIGKILL)  # the container's namespace is gone
        except StartError as exc:
            code = 128
            model.state = st.terminated(
                code,
                started_at,
                build_timestamp(),
                model.container_id,
                reason="StartError",
                message=str(exc),
            )
            await self.events.pod_event(
                worker.ref, WARNING, "Failed", f"Error: {exc}", field_path=path
            )
        else:
            model.state = st.terminated(code, started_at, build_timestamp(), model.container_id)
        finally:
            log.end()
        model.ready = init and code == 0
        model.started = False
        await self._write(worker)
        return code

    def _plan(self, worker: PodWorker, spec: Obj, image: Image) -> ProcessPlan:
        """The host process for `spec`; remembered (with its mounts) for exec."""
        assert worker.model is not None
        mounts = {m["mountPath"]: mount_dir(worker.dir, m) for m in spec.get("volumeMounts") or []}
        pod = {
            "metadata": {"name": worker.name, "namespace": worker.ns, "uid": worker.uid},
            "spec": {**worker.spec, "nodeName": self.node_name},
            "status": {"podIP": worker.model.pod_ip, "hostIP": self.host_ip},
        }
        plan = build_plan(
            spec,
            image,
            pod=pod,
            mounts=mounts,
            root_dir=container_root(worker.dir, worker.spec, spec["name"]),
            bin_dir=install_programs(image, self.workdir / "bin"),
        )
        worker.plans[spec["name"]] = plan
        worker.mounts[spec["name"]] = mounts
        return plan

    async def _pull(
        self, worker: PodWorker, spec: Obj, model: st.ContainerModel, path: str
    ) -> Image:
        """The image to run; raises PodStopped once the pod stops while it is stuck."""

        async def publish() -> None:
            await self._write(worker)

        image = await self._puller.pull(
            worker.ref, spec, model, path, stopping=worker.stopping, publish=publish
        )
        if image is None:
            raise PodStopped
        return image

    def container_log(self, uid: str, container: str) -> ContainerLog | None:
        """The output of the container's run in the pod with `uid` (None: it never started)."""
        worker = self._workers.get(uid)
        return worker.logs.get(container) if worker else None

    # ---- attach and exec ------------------------------------------------------------------

    async def serve_stream(
        self,
        conn: Conn,
        pod: Obj,
        container: str,
        *,
        kind: str,
        stdin: bool,
        stdout: bool,
        stderr: bool,
        tty: bool,
        command: list[str],
        protocol: str,
    ) -> None:
        """Run the channel protocol for an attach or exec the apiserver has upgraded.

        Only running containers are reachable (as the kubelet looks among running
        ones); anything else is a channel-3 InternalError. Never raises for a
        client that goes away; cancellation propagates.
        """
        worker = self._workers.get(pod["metadata"]["uid"])
        spec = worker.container(container) if worker else None
        proc = worker.processes.get(container) if worker else None
        streams = ks.build_streams(
            kind, spec, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty, protocol=protocol
        )
        if not (stdin or stdout or stderr):  # the kubelet's NewOptions check, after the upgrade
            cause = (
                "unable to upgrade connection: you must specify at least 1 of stdin, stdout, stderr"
            )
            await send_failure(conn, streams, cause)
        elif worker is None or spec is None or proc is None:
            meta = pod["metadata"]
            cause = ks.not_running_cause(kind, container, meta["name"], meta.get("namespace", ""))
            await send_failure(conn, streams, cause)
        elif kind == "attach":
            await ks.serve_attach(conn, streams, proc, spec, worker.stdin_once_used)
        else:
            plan = ks.build_exec_plan(worker.plans[container], worker.mounts[container], command)
            await ks.serve_exec(conn, streams, plan, worker.execs.setdefault(container, set()))
