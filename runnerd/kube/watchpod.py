"""Watch-session pods, as the apiserver is asked to create them. Pure.

Owns the watch pod's name, labels, annotations and shape (issue 20, the
Telo runner's `buildWatchPod`), and reading them back for adoption:

- one pod per watch session, named `runnerd-<id>-<6 hex>`, fresh on every
  create (a resume or a new app set makes a new pod while the old one may
  still be terminating under the same session id);
- labels: podspec's managed-by and session-id (the shared watch, the reaper
  and adoption select on them) plus the mode label (`MODE_LABEL`: watch);
- pod-wide as run pods: `restartPolicy: Never`, `activeDeadlineSeconds` from
  the session's TTL (`watch.max_ttl_seconds`), no service-account token, no
  service links, the pull secret and RuntimeClass when configured;
  `runAsNonRoot` as uid/gid 1000 with fsGroup 1000 (every container can
  write the shared workspace), seccomp RuntimeDefault;
- emptyDirs `workspace` (at `/workspace` in every container, each app's
  cwd), `telo-cache`, `work`, `home`, `tmp`, and the workspace
  application's ConfigMap (read-only, at `workspaceapp.MOUNT_PATH`);
- containers, in this order:
  `workspace` (the session image runs the workspace application on
  `WORKSPACE_PORT`; its env is runnerd's plumbing and the per-pod token
  `RUNNERD_WORKSPACE_TOKEN`, never the session env);
  `app-<name>` per app in declaration order (waits for its entry in the
  workspace, then `telo run --watch --inspect 0.0.0.0:<9230+slot> --no-open
  <entry>`; the session env; stdin always, a TTY only for a `tty` app; its
  declared ports as containerPorts);
  `agent` when there is one (the catalog image's own entrypoint, its env
  plus `WORKSPACE_DIR=/workspace`; the token stays out of it);
- every container but the agent locked down as run pods' session container
  (no privilege escalation, every capability dropped, read-only root); the
  agent, an operator's image, only the first two. Each has the `limits.app`
  ceilings (the watch tier's `spec.identity.limits`).

An app whose `app-<name>` is not a valid container name (a DNS label of at
most 63 characters) gets a deterministic one (`app_container_name`); the
apps annotation records each app's container, so adoption never recomputes
it. Annotations never hold env, which may carry secrets; the workspace
token is read back from the workspace container's env
(`read_workspace_token`), the pod spec runnerd itself created.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runnerd.backend.watch import AgentLaunch, AppLaunch, WatchSpec
from runnerd.contract import PortMapping
from runnerd.kube.podspec import (
    _PULL_POLICY,
    ANNOTATION_PREFIX,
    CACHE_DIR,
    HOME_DIR,
    MANAGED_BY_LABEL,
    RUN_AS_UID,
    SESSION_LABEL,
    TMP_DIR,
    WORK_DIR,
    _container_ports,
    _locked_down,
    _resources,
    _session_env,
    parse_created_at,
)
from runnerd.kube.settings import KubeSettings

MODE_LABEL = "runnerd.telo.run/mode"
WATCH_MODE = "watch"
WORKSPACE_CONTAINER = "workspace"
AGENT_CONTAINER = "agent"
WORKSPACE_PORT = 8099
WORKSPACE_DIR = "/workspace"
WORKSPACE_TOKEN_ENV = "RUNNERD_WORKSPACE_TOKEN"
# Where the workspace application's ConfigMap is mounted, and its file.
WORKSPACE_APP_DIR = "/etc/runnerd/workspace-app"
WORKSPACE_APP_FILE = "telo.yaml"
WORKSPACE_APP_VOLUME = "workspace-app"
INSPECT_BASE_PORT = 9230
# How often an app container looks for its entry before the kernel starts:
# the seed lands moments after the pod runs, and every poll missed is start
# latency (a `sleep` fork each, only until the entry is there).
ENTRY_POLL_S = 0.05

_CONTAINER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_MOUNTS = (
    ("workspace", WORKSPACE_DIR),
    ("telo-cache", CACHE_DIR),
    ("work", WORK_DIR),
    ("home", HOME_DIR),
    ("tmp", TMP_DIR),
)
# The app container's start: wait for the entry (seeding comes after the pod
# runs), then become the kernel. The entry is "$1" (never spliced into the
# script) and relative to the cwd, the workspace.
_WAIT_SCRIPT = f'until [ -f "$1" ]; do sleep {ENTRY_POLL_S}; done; shift; exec "$@"'
# A `streams` app first waits for one line on its stdin (`read` takes it
# byte by byte from the pipe, so nothing after it is taken from the kernel):
# runnerd sends it through the container's first attach (`START_LINE`), so the
# attach is up before the app writes anything. Its two streams cannot be
# backfilled from the pod log (which mixes them), so this is what keeps its
# first output. A `tty` app needs no gate: its one stream is spliced from the
# log as a run pod's is.
_GATED_SCRIPT = f"read -r _ || exit 1; {_WAIT_SCRIPT}"
START_LINE = b"\n"


def inspect_port(slot: int) -> int:
    """The debug port of the app in `slot` (apps share the pod's network)."""
    return INSPECT_BASE_PORT + slot


def watch_pod_name(session_id: str, suffix: str | None = None) -> str:
    """`runnerd-<id>-<6 hex>`: fresh on every (re)create unless `suffix` is given."""
    return f"runnerd-{session_id}-{suffix if suffix is not None else secrets.token_hex(3)}"


def app_container_name(app_name: str) -> str:
    """`app-<name>`, or, when that is no container name (over 63 characters,
    or not a DNS label), a deterministic one: a cut of the name plus 8 hex
    of its SHA-256 (distinct names map to distinct containers)."""
    plain = f"app-{app_name}"
    if _CONTAINER_NAME.fullmatch(plain):
        return plain
    digest = hashlib.sha256(app_name.encode()).hexdigest()[:8]
    kept = re.sub(r"[^a-z0-9-]+", "-", app_name.lower())[:50].strip("-")
    return f"app-{kept}-{digest}" if kept else f"app-{digest}"


def is_watch_pod(pod: Mapping[str, Any]) -> bool:
    """Whether `pod` carries the watch mode label (a run pod does not)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(MODE_LABEL) == WATCH_MODE


def _ports_json(ports: tuple[PortMapping, ...]) -> list[dict[str, Any]]:
    return [{"port": p.port, "protocol": p.protocol} for p in ports]


def _apps_json(apps: tuple[AppLaunch, ...]) -> str:
    listed = [
        {
            "name": app.name,
            "container": app_container_name(app.name),
            "entry": app.entry,
            "io": app.io,
            "ports": _ports_json(app.ports),
            "slot": app.slot,
        }
        for app in apps
    ]
    return json.dumps(listed, separators=(",", ":"))


def _metadata(
    settings: KubeSettings, spec: WatchSpec, name: str, created_at: str
) -> dict[str, Any]:
    annotations = {
        f"{ANNOTATION_PREFIX}created-at": created_at,
        f"{ANNOTATION_PREFIX}kind": WATCH_MODE,
        f"{ANNOTATION_PREFIX}apps": _apps_json(spec.apps),
    }
    if spec.agent is not None:
        agent = {"name": spec.agent.name, "port": spec.agent.port}
        annotations[f"{ANNOTATION_PREFIX}agent"] = json.dumps(agent, separators=(",", ":"))
    labels = {
        MANAGED_BY_LABEL: settings.managed_by,
        SESSION_LABEL: spec.session_id,
        MODE_LABEL: WATCH_MODE,
    }
    return {"name": name, "labels": labels, "annotations": annotations}


def _mounts(*, configmap: bool = False) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": n, "mountPath": p} for n, p in _MOUNTS]
    if configmap:
        mounts.append(
            {"name": WORKSPACE_APP_VOLUME, "mountPath": WORKSPACE_APP_DIR, "readOnly": True}
        )
    return mounts


def _workspace_container(spec: WatchSpec, token: str) -> dict[str, Any]:
    env = _session_env({})
    env += [
        {"name": "WORKSPACE_DIR", "value": WORKSPACE_DIR},
        {"name": "WORKSPACE_PORT", "value": str(WORKSPACE_PORT)},
        {"name": WORKSPACE_TOKEN_ENV, "value": token},
    ]
    image = spec.creation.image
    return {
        "name": WORKSPACE_CONTAINER,
        "image": image.image,
        "imagePullPolicy": _PULL_POLICY[image.pull_policy],
        "command": ["telo", "run", "--no-open", f"{WORKSPACE_APP_DIR}/{WORKSPACE_APP_FILE}"],
        "workingDir": WORKSPACE_DIR,
        "env": env,
        "ports": [{"name": "workspace", "containerPort": WORKSPACE_PORT, "protocol": "TCP"}],
        "resources": _resources(spec.identity.limits),
        "securityContext": _locked_down(read_only_root=True),
        "volumeMounts": _mounts(configmap=True),
    }


def _app_container(spec: WatchSpec, app: AppLaunch) -> dict[str, Any]:
    kernel = ["telo", "run", "--watch", "--inspect", f"0.0.0.0:{inspect_port(app.slot)}"]
    kernel += ["--no-open", app.entry]
    image = spec.creation.image
    script = _WAIT_SCRIPT if app.io == "tty" else _GATED_SCRIPT
    return {
        "name": app_container_name(app.name),
        "image": image.image,
        "imagePullPolicy": _PULL_POLICY[image.pull_policy],
        "command": ["sh", "-c", script, "wait-for-entry", app.entry, *kernel],
        "workingDir": WORKSPACE_DIR,
        "env": _session_env(spec.creation.env),
        "ports": _container_ports(app.ports),
        "resources": _resources(spec.identity.limits),
        "securityContext": _locked_down(read_only_root=True),
        # stdin for both modes (a `streams` app reads its stdin pipe); a TTY
        # only for `tty`: a `streams` app's stdout and stderr stay apart.
        "stdin": True,
        "tty": app.io == "tty",
        "volumeMounts": _mounts(),
    }


def _agent_container(spec: WatchSpec, agent: AgentLaunch) -> dict[str, Any]:
    env = [{"name": k, "value": v} for k, v in agent.env.items() if k != "WORKSPACE_DIR"]
    env.append({"name": "WORKSPACE_DIR", "value": WORKSPACE_DIR})
    return {
        "name": AGENT_CONTAINER,
        "image": agent.image.image,
        "imagePullPolicy": _PULL_POLICY[agent.image.pull_policy],
        "env": env,
        "ports": [{"containerPort": agent.port, "protocol": "TCP"}],
        "resources": _resources(spec.identity.limits),
        # An operator's image, built for itself: its root stays writable.
        "securityContext": _locked_down(read_only_root=False),
        "stdin": True,
        "tty": False,
        "volumeMounts": [{"name": "workspace", "mountPath": WORKSPACE_DIR}],
    }


def _pod_spec(settings: KubeSettings, spec: WatchSpec, configmap: str) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        # The TTL as the kubelet's own deadline: the pod ends even if runnerd is gone.
        "activeDeadlineSeconds": max(1, math.ceil(spec.identity.limits.ttl_s)),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
            "runAsGroup": RUN_AS_UID,
            "fsGroup": RUN_AS_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if settings.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": settings.image_pull_secret}]
    if settings.runtime_class:
        pod["runtimeClassName"] = settings.runtime_class
    volumes: list[dict[str, Any]] = [{"name": n, "emptyDir": {}} for n, _ in _MOUNTS]
    volumes.append(
        {"name": WORKSPACE_APP_VOLUME, "configMap": {"name": configmap, "defaultMode": 0o444}}
    )
    pod["volumes"] = volumes
    return pod


def build_watch_pod(
    settings: KubeSettings,
    spec: WatchSpec,
    *,
    name: str,
    configmap: str,
    workspace_token: str,
    created_at: str,
) -> dict[str, Any]:
    """The pod for a watch session (see the module docstring).

    `name`: from `watch_pod_name`; `configmap`: the workspace application's
    ConfigMap name (`workspaceapp.configmap_for`); `workspace_token`: the
    per-pod secret the workspace API checks; `created_at`: RFC 3339, as
    `podspec.format_created_at`.

    Raises:
        ValueError: `spec.apps` is empty, or two apps map to one container.
    """
    if not spec.apps:
        raise ValueError("a watch pod needs at least one app")
    containers = [_workspace_container(spec, workspace_token)]
    containers += [_app_container(spec, app) for app in spec.apps]
    if spec.agent is not None:
        containers.append(_agent_container(spec, spec.agent))
    names = [c["name"] for c in containers]
    if len(set(names)) != len(names):
        raise ValueError(f"container names collide: {names}")
    pod_spec = _pod_spec(settings, spec, configmap)
    pod_spec["containers"] = containers
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(settings, spec, name, created_at),
        "spec": pod_spec,
    }


@dataclass(frozen=True)
class WatchApp:
    """One app as a watch pod runs it: its launch and its container."""

    launch: AppLaunch
    container: str


@dataclass(frozen=True)
class WatchPodInfo:
    """What adoption reads back from a watch pod's labels and annotations."""

    name: str
    session_id: str
    created_at: float
    apps: tuple[WatchApp, ...]
    agent: tuple[str, int] | None  # (catalog name, port)
    mode: str = WATCH_MODE


def _read_ports(raw: Any) -> tuple[PortMapping, ...]:
    if not isinstance(raw, list):
        raise ValueError("ports")
    ports = tuple(PortMapping(port=int(p["port"]), protocol=p["protocol"]) for p in raw)
    if any(p.protocol not in ("tcp", "udp") or not 0 < p.port < 65536 for p in ports):
        raise ValueError("ports")
    return ports


def _read_app(raw: Any) -> WatchApp:
    if not isinstance(raw, dict) or raw.get("io") not in ("tty", "streams"):
        raise ValueError("app")
    name, entry, container, slot = raw["name"], raw["entry"], raw["container"], raw["slot"]
    if not all(isinstance(v, str) and v for v in (name, entry, container)):
        raise ValueError("app")
    if not isinstance(slot, int) or isinstance(slot, bool) or slot < 0:
        raise ValueError("slot")
    launch = AppLaunch(name, entry, raw["io"], _read_ports(raw.get("ports", [])), slot)
    return WatchApp(launch, container)


def _read_agent(text: str | None) -> tuple[str, int] | None:
    if text is None:
        return None
    raw = json.loads(text)
    name, port = raw["name"], raw["port"]
    if not isinstance(name, str) or not name or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError("agent")
    return name, port


def read_watch_annotations(pod: Mapping[str, Any]) -> WatchPodInfo | None:
    """A watch pod's identity (session id, created-at, apps, agent), or None
    when `pod` is no watch pod or its labels/annotations are missing or
    garbled (a pod edited by hand never raises here)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    notes: Mapping[str, str] = meta.get("annotations") or {}
    session_id = labels.get(SESSION_LABEL)
    if not is_watch_pod(pod) or not isinstance(session_id, str) or not session_id:
        return None
    if notes.get(f"{ANNOTATION_PREFIX}kind") != WATCH_MODE:
        return None
    created_at = parse_created_at(notes.get(f"{ANNOTATION_PREFIX}created-at") or "")
    try:
        raw_apps = json.loads(notes.get(f"{ANNOTATION_PREFIX}apps") or "null")
        apps = tuple(_read_app(raw) for raw in raw_apps)
        agent = _read_agent(notes.get(f"{ANNOTATION_PREFIX}agent"))
    except (KeyError, TypeError, ValueError):
        return None
    if created_at is None or not apps:
        return None
    return WatchPodInfo(str(meta.get("name", "")), session_id, created_at, apps, agent)


def read_workspace_token(pod: Mapping[str, Any]) -> str | None:
    """The workspace token runnerd put in the workspace container's env, or None."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") != WORKSPACE_CONTAINER:
            continue
        for var in container.get("env") or []:
            if var.get("name") == WORKSPACE_TOKEN_ENV and isinstance(var.get("value"), str):
                return str(var["value"])
    return None
