"""Session pods, as the apiserver is asked to create them. Pure.

Owns the pod's name, labels and annotations, and the two shapes:

- `build_session_pod` (a bundle session): the plain kernel image under the
  session's pull policy; a `body-fetch` init container fetches the bundle
  from runnerd's tokenized URL into the `/app` emptyDir; the session container
  runs `telo run /app/<entry>` (plus `--inspect` when asked) with every write
  landing on an emptyDir (`/app`, `/telo-cache`, `/work`, `/home/telo`,
  `/tmp`) under a read-only root filesystem.
- `build_app_pod` (a catalog app): the operator's image runs its own
  entrypoint with the env the session manager already merged; no bundle.

Both: non-root where the image is ours to know, every capability dropped, no
privilege escalation, seccomp RuntimeDefault, no service-account token,
`activeDeadlineSeconds` from the session TTL, `restartPolicy: Never`, the pull
secret and RuntimeClass when configured, a TTY with stdin (the PTY bridge
attaches to it; no `stdinOnce`, so a re-attach still has stdin).

A bundle session's program is gated (`gated_command`): the image's `sh`
holds it until `START_LINE` (^D) arrives on its tty, which runnerd sends
through the first attach, so that attach is up before the program writes
anything and no `pods/log` read is needed to splice its start. Once it
read the line it prints `GATE_MARKER`, so the log says whether it opened
(`is_gated` tells an adopting daemon a pod has this gate). A catalog app
runs the operator's own entrypoint (not known here), so it is not gated.

Labels carry what the shared watch and the reaper select on (managed-by,
session id); annotations carry what a restarted daemon needs to rebuild a
session's record (created-at, kind, ports, inspect, app name) — never env,
which may hold catalog secrets.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from runnerd.backend import Limits, RunSpec
from runnerd.contract import PortMapping, PullPolicy
from runnerd.kube.settings import KubeSettings

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
SESSION_LABEL = "runnerd.telo.run/session-id"
ANNOTATION_PREFIX = "runnerd.telo.run/"
SESSION_CONTAINER = "session"
INIT_CONTAINER = "body-fetch"
INSPECT_PORT = 9230

APP_DIR = "/app"
CACHE_DIR = "/telo-cache"
WORK_DIR = "/work"
HOME_DIR = "/home/telo"
TMP_DIR = "/tmp"
# The kernel image's unprivileged user (`node` in telorun/node). Named rather
# than left to the image so `runAsNonRoot` can be checked before the start.
RUN_AS_UID = 1000
# The init container only moves bytes: small, fixed ceilings (a namespace
# quota on limits.cpu/memory needs them on every container).
INIT_LIMITS = {"cpu": "100m", "memory": "64Mi"}
FETCH_TIMEOUT_S = 30

_PULL_POLICY: Mapping[PullPolicy, str] = {
    "missing": "IfNotPresent",
    "always": "Always",
    "never": "Never",
}


# The gate: `read` returns at the terminal's end-of-file character (^D, what
# `START_LINE` is), which a tty in canonical mode (a pod's, by default) takes
# as the end of an empty line and never echoes: nothing shows in the terminal
# and nothing after it is taken from the program. Then `exec`: the program is
# the container's PID 1, with the argv, env, tty and exit code it had ungated.
# Between the two it prints `GATE_MARKER`, an OSC string terminals ignore, so
# that whether the gate has released is in the output (and the log): runnerd
# sends the ^D only while it is not (a second ^D would be end-of-input to the
# started program), and the splice strips it (`Splice.strip_head`).
GATE_MARKER = b"\x1b]6510;runnerd-started\x07"
_GATE_SCRIPT = "read -r _; printf '\\033]6510;runnerd-started\\007'; exec \"$@\""
START_LINE = b"\x04"


def gated_command(command: list[str]) -> list[str]:
    """`command` held by the gate until `START_LINE` arrives on stdin."""
    return ["sh", "-c", _GATE_SCRIPT, "runnerd-gate", *command]


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Whether `pod`'s session container runs this gate (with its marker).
    A pod gated without the marker (kube3's first gate, never released) or
    not at all (a catalog app, an older pod) is never sent a ^D."""
    for container in pod.get("spec", {}).get("containers", []):
        if container.get("name") == SESSION_CONTAINER:
            return bool(container.get("command", [])[:3] == ["sh", "-c", _GATE_SCRIPT])
    return False


def pod_name(session_id: str) -> str:
    """The pod's fixed name: a create that may have landed is retried by it."""
    return f"runnerd-{session_id}"


def managed_by_selector(settings: KubeSettings) -> str:
    """The label selector of every pod this runnerd manages."""
    return f"{MANAGED_BY_LABEL}={settings.managed_by}"


def is_ours(pod: Mapping[str, Any], settings: KubeSettings, session_id: str) -> bool:
    """Whether an existing pod is this session's (a 409 on create is then success)."""
    labels = pod.get("metadata", {}).get("labels") or {}
    return bool(
        labels.get(MANAGED_BY_LABEL) == settings.managed_by
        and labels.get(SESSION_LABEL) == session_id
    )


def _metadata(settings: KubeSettings, spec: RunSpec, created_at: str) -> dict[str, Any]:
    ports = [{"port": p.port, "protocol": p.protocol} for p in spec.ports]
    annotations = {
        f"{ANNOTATION_PREFIX}created-at": created_at,
        f"{ANNOTATION_PREFIX}kind": "app" if spec.bundle is None else "bundle",
        f"{ANNOTATION_PREFIX}ports": json.dumps(ports, separators=(",", ":")),
        f"{ANNOTATION_PREFIX}inspect": "true" if spec.inspect else "false",
    }
    if spec.app is not None:
        annotations[f"{ANNOTATION_PREFIX}app"] = spec.app
    return {
        "name": pod_name(spec.session_id),
        "labels": {MANAGED_BY_LABEL: settings.managed_by, SESSION_LABEL: spec.session_id},
        "annotations": annotations,
    }


def _resources(limits: Limits) -> dict[str, Any]:
    return {
        "limits": {
            "cpu": limits.cpu,
            "memory": limits.memory,
            "ephemeral-storage": limits.ephemeral_storage,
        }
    }


def _container_ports(ports: tuple[PortMapping, ...]) -> list[dict[str, Any]]:
    return [{"containerPort": p.port, "protocol": p.protocol.upper()} for p in ports]


def _locked_down(read_only_root: bool) -> dict[str, Any]:
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if read_only_root:
        context["readOnlyRootFilesystem"] = True
    return context


def _pod_spec(settings: KubeSettings, spec: RunSpec) -> dict[str, Any]:
    """What both shapes share: lifetime, identity, pull secret, runtime class."""
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        # The TTL as the kubelet's own deadline: the pod ends even if runnerd is gone.
        "activeDeadlineSeconds": max(1, math.ceil(spec.limits.ttl_s)),
        "automountServiceAccountToken": False,
        # Service env vars (FOO_SERVICE_HOST …) would leak the namespace's services.
        "enableServiceLinks": False,
    }
    if settings.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": settings.image_pull_secret}]
    if settings.runtime_class:
        pod["runtimeClassName"] = settings.runtime_class
    return pod


def _session_env(env: Mapping[str, str]) -> list[dict[str, str]]:
    # Runnerd's plumbing wins over a same-named client variable: under a
    # read-only root, a HOME outside the emptyDirs would break every write.
    merged = dict(env)
    merged.update(
        {
            "TELO_CACHE_DIR": CACHE_DIR,
            "HOME": HOME_DIR,
            "npm_config_cache": f"{HOME_DIR}/.npm",
            "FORCE_COLOR": "1",
        }
    )
    return [{"name": name, "value": value} for name, value in merged.items()]


def _fetch_script(bundle_url: str) -> str:
    # Download, then unpack: a pipe would hide wget's failure behind tar's
    # (no pipefail in every sh), and the archive lands on /app, never the rootfs.
    archive = f"{APP_DIR}/.bundle.tar.gz"
    return (
        f"wget -q -T {FETCH_TIMEOUT_S} -O {archive} {shlex.quote(bundle_url)}"
        f" && tar -xzf {archive} -C {APP_DIR} && rm -f {archive}"
    )


# Every path the session container writes to is one of these emptyDirs.
_SESSION_MOUNTS = (
    ("app", APP_DIR),
    ("telo-cache", CACHE_DIR),
    ("work", WORK_DIR),
    ("home", HOME_DIR),
    ("tmp", TMP_DIR),
)


def _fetch_container(settings: KubeSettings, bundle_url: str) -> dict[str, Any]:
    return {
        "name": INIT_CONTAINER,
        "image": settings.init_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c"],
        "args": [_fetch_script(bundle_url)],
        "resources": {"limits": dict(INIT_LIMITS)},
        "securityContext": _locked_down(read_only_root=True),
        "volumeMounts": [{"name": "app", "mountPath": APP_DIR}],
    }


def _session_container(spec: RunSpec, entry: str) -> dict[str, Any]:
    command = ["telo", "run", f"{APP_DIR}/{entry}"]
    if spec.inspect:
        # 0.0.0.0, not the kernel's loopback default: runnerd reaches it over
        # the pod network. The port is never published.
        command += ["--inspect", f"0.0.0.0:{INSPECT_PORT}", "--no-open"]
    return {
        "name": SESSION_CONTAINER,
        "image": spec.image.image,
        "imagePullPolicy": _PULL_POLICY[spec.image.pull_policy],
        "command": gated_command(command),
        "workingDir": WORK_DIR,
        "env": _session_env(spec.env),
        "ports": _container_ports(spec.ports),
        "resources": _resources(spec.limits),
        "securityContext": _locked_down(read_only_root=True),
        "stdin": True,
        "tty": True,
        "volumeMounts": [{"name": name, "mountPath": path} for name, path in _SESSION_MOUNTS],
    }


def build_session_pod(
    settings: KubeSettings, spec: RunSpec, *, bundle_url: str, created_at: str
) -> dict[str, Any]:
    """The pod for a bundle session (`spec.bundle` set).

    `bundle_url` is the tokenized `/internal/bundles/<id>?token=…` URL;
    `created_at` an RFC 3339 time, recorded as an annotation. `spec.limits`
    are the ceilings the pod runs under (the session manager picks the tier:
    a session pod resolves its module closure at boot, so the app tier).

    Raises:
        ValueError: `spec` has no bundle.
    """
    if spec.bundle is None:
        raise ValueError("build_session_pod needs a bundle session")
    pod_spec = _pod_spec(settings, spec)
    pod_spec["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_UID,
        "runAsGroup": RUN_AS_UID,
        "fsGroup": RUN_AS_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod_spec["initContainers"] = [_fetch_container(settings, bundle_url)]
    pod_spec["containers"] = [_session_container(spec, spec.bundle.entry)]
    pod_spec["volumes"] = [{"name": name, "emptyDir": {}} for name, _ in _SESSION_MOUNTS]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(settings, spec, created_at),
        "spec": pod_spec,
    }


def build_app_pod(settings: KubeSettings, spec: RunSpec, *, created_at: str) -> dict[str, Any]:
    """The pod for a catalog app (`spec.bundle` None): the image's own entrypoint.

    The root filesystem stays writable and the user is the image's: a catalog
    image is the operator's, built for itself, not for runnerd's layout.
    """
    pod_spec = _pod_spec(settings, spec)
    pod_spec["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    pod_spec["containers"] = [
        {
            "name": SESSION_CONTAINER,
            "image": spec.image.image,
            "imagePullPolicy": _PULL_POLICY[spec.image.pull_policy],
            "env": [{"name": k, "value": v} for k, v in spec.env.items()],
            "ports": _container_ports(spec.ports),
            "resources": _resources(spec.limits),
            "securityContext": _locked_down(read_only_root=False),
            "stdin": True,
            "tty": True,
        }
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(settings, spec, created_at),
        "spec": pod_spec,
    }


def build_pod(
    settings: KubeSettings, spec: RunSpec, *, bundle_url: str | None, created_at: str
) -> dict[str, Any]:
    """`build_session_pod` for a bundle session, `build_app_pod` for an app."""
    if spec.bundle is None:
        return build_app_pod(settings, spec, created_at=created_at)
    if bundle_url is None:
        raise ValueError("a bundle session needs a bundle_url")
    return build_session_pod(settings, spec, bundle_url=bundle_url, created_at=created_at)


def parse_annotations(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What a restarted daemon reads back: created-at, kind, ports, inspect, app.

    Missing or garbled values come back as None / empty, never raising: a pod
    edited by hand must not stop a daemon from starting.
    """
    raw: Mapping[str, str] = pod.get("metadata", {}).get("annotations") or {}

    def get(key: str) -> str | None:
        return raw.get(ANNOTATION_PREFIX + key)

    try:
        ports = json.loads(get("ports") or "[]")
    except ValueError:
        ports = []
    return {
        "created_at": get("created-at"),
        "kind": get("kind"),
        "ports": ports if isinstance(ports, list) else [],
        "inspect": get("inspect") == "true",
        "app": get("app"),
    }


def format_created_at(epoch_s: float) -> str:
    """The created-at annotation: RFC 3339 UTC with milliseconds, as the
    session's `createdAt` (an adopted session keeps it to the millisecond)."""
    moment = datetime.fromtimestamp(epoch_s, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_created_at(text: str) -> float | None:
    """Epoch seconds from a created-at annotation (with or without a
    fraction); None when it is not one."""
    for pattern in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None
