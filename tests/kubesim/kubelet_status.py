"""Pod status as the real kubelet writes it, rendered from the simulated kubelet's model (pure).

Owns `PodModel`/`ContainerModel` (what the kubelet knows about one pod) and
`render_status`, which turns that into `status` with the real shapes
(core/v1 `PodStatus`): phase derived from the container states, the five
conditions with stable `lastTransitionTime`s, `initContainerStatuses` and
`containerStatuses` (waiting / running / terminated), addresses, startTime,
qosClass. Also the waiting reasons' message texts and `derive_phase`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


@dataclass
class ContainerModel:
    """One container's last known state (`state` is the API's one-key dict)."""

    name: str
    image: str  # as the status shows it (normalized when the reference parsed)
    image_id: str = ""
    container_id: str = ""
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    ready: bool = False
    started: bool = False

    @property
    def terminated(self) -> Obj | None:
        return self.state.get("terminated")

    @property
    def running(self) -> bool:
        return "running" in self.state


@dataclass
class PodModel:
    init: list[ContainerModel]
    main: list[ContainerModel]
    pod_ip: str
    host_ip: str
    start_time: str
    qos_class: str
    reason: str | None = None  # pod-level: DeadlineExceeded
    message: str | None = None
    final_phase: str | None = None  # once terminal, the phase never changes
    sandbox_ready: bool = True  # False while the pod's volumes wait to be set up
    transitions: dict[str, tuple[str, str]] = field(default_factory=dict)


def build_models(pod: Obj, images: dict[str, str]) -> tuple[list[ContainerModel], ...]:
    """Initial models: every container waiting (PodInitializing when there are init containers)."""
    spec = pod["spec"]
    inits = spec.get("initContainers") or []
    default = "PodInitializing" if inits else "ContainerCreating"
    init = [_model(c, images, "PodInitializing") for c in inits]
    main = [_model(c, images, default) for c in spec["containers"]]
    return init, main


def _model(container: Obj, images: dict[str, str], reason: str) -> ContainerModel:
    image = images.get(container["name"]) or str(container.get("image", ""))
    return ContainerModel(container["name"], image, state={"waiting": {"reason": reason}})


def waiting(reason: str, message: str | None = None) -> Obj:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def terminated(
    code: int,
    started_at: str,
    finished_at: str,
    container_id: str,
    *,
    reason: str | None = None,
    message: str | None = None,
) -> Obj:
    """containerd's reasons: Completed (0), Error (non-zero), StartError (128)."""
    body: Obj = {
        "exitCode": code,
        "reason": reason or ("Completed" if code == 0 else "Error"),
    }
    if message:
        body["message"] = message
    body.update(startedAt=started_at, finishedAt=finished_at, containerID=container_id)
    return {"terminated": body}


def pull_error_message(ref: str, normalized: str) -> str:
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{normalized}": '
        f'failed to resolve reference "{normalized}": {normalized}: not found'
    )


def backoff_message(ref: str, pull_message: str) -> str:
    return f'Back-off pulling image "{ref}": ErrImagePull: {pull_message}'


def never_pull_message(ref: str) -> str:
    return f'Container image "{ref}" is not present with pull policy of Never'


def build_qos_class(spec: Obj) -> str:
    """Guaranteed / Burstable / BestEffort from the containers' requests and limits."""
    containers = (spec.get("initContainers") or []) + spec["containers"]
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits = r.get("limits") or {}
        requests = r.get("requests") or limits
        if not all(k in limits for k in ("cpu", "memory")) or any(
            requests.get(k, limits[k]) != limits[k] for k in ("cpu", "memory")
        ):
            return "Burstable"
    return "Guaranteed"


def derive_phase(model: PodModel) -> str:
    """The kubelet's getPhase for restartPolicy Never."""
    if model.final_phase:
        return model.final_phase
    if any(c.terminated and c.terminated["exitCode"] != 0 for c in model.init):
        return "Failed"
    if not all(c.terminated for c in model.init):
        return "Pending"
    if any("waiting" in c.state for c in model.main):
        return "Pending"
    if any(c.running for c in model.main):
        return "Running"
    codes = [c.terminated["exitCode"] for c in model.main if c.terminated]
    return "Succeeded" if all(code == 0 for code in codes) else "Failed"


def render_status(model: PodModel, now: str) -> Obj:
    """`status` for the pod (also fixes `final_phase` once the phase is terminal)."""
    phase = derive_phase(model)
    if phase in TERMINAL:
        model.final_phase = phase
    status: Obj = {"phase": phase, "conditions": _conditions(model, phase, now)}
    if model.reason:
        status["message"] = model.message
        status["reason"] = model.reason
    status.update(
        hostIP=model.host_ip,
        hostIPs=[{"ip": model.host_ip}],
        podIP=model.pod_ip,
        podIPs=[{"ip": model.pod_ip}],
        startTime=model.start_time,
    )
    if model.init:
        status["initContainerStatuses"] = [_container(c) for c in model.init]
    status["containerStatuses"] = [_container(c) for c in model.main]
    status["qosClass"] = model.qos_class
    return status


def _container(c: ContainerModel) -> Obj:
    out: Obj = {
        "name": c.name,
        "state": c.state,
        "lastState": {},
        "ready": c.ready,
        "restartCount": 0,
        "image": c.image,
        "imageID": c.image_id,
    }
    if c.container_id:
        out["containerID"] = c.container_id
    out["started"] = c.started
    return out


def _conditions(model: PodModel, phase: str, now: str) -> list[Obj]:
    terminal = phase in TERMINAL
    incomplete = [c.name for c in model.init if not (c.terminated and not c.terminated["exitCode"])]
    unready = [c.name for c in model.main if not c.ready]
    ready: tuple[str, str | None, str | None]
    if not unready:
        ready = ("True", None, None)
    elif phase == "Succeeded":
        ready = ("False", "PodCompleted", None)
    else:
        unready_text = f"containers with unready status: {_names(unready)}"
        ready = ("False", "ContainersNotReady", unready_text)
    initialized: tuple[str, str | None, str | None] = (
        ("True", None, None)
        if not incomplete
        else (
            "False",
            "ContainersNotInitialized",
            f"containers with incomplete status: {_names(incomplete)}",
        )
    )
    rows = [
        (
            "PodReadyToStartContainers",
            ("False" if terminal or not model.sandbox_ready else "True", None, None),
        ),
        ("Initialized", initialized),
        ("Ready", ready),
        ("ContainersReady", ready),
        ("PodScheduled", ("True", None, None)),
    ]
    return [_condition(model, kind, *value, now) for kind, value in rows]


def _names(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"


def _condition(
    model: PodModel, kind: str, status: str, reason: str | None, message: str | None, now: str
) -> Obj:
    previous = model.transitions.get(kind)
    if previous is None or previous[0] != status:
        model.transitions[kind] = (status, now)
    out: Obj = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": model.transitions[kind][1],
    }
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out
