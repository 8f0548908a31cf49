"""runnerd.kube.podspec: both pod shapes, validated against the strict
Kubernetes 1.37 schema (kubernetes-validate), and what each field promises."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from runnerd.backend import BundleSpec, ImageSpec, Limits, RunSpec
from runnerd.contract import PortMapping
from runnerd.kube.podspec import (
    build_app_pod,
    build_pod,
    build_session_pod,
    is_gated,
    is_ours,
    managed_by_selector,
    parse_annotations,
    pod_name,
)
from runnerd.kube.settings import KubeSettings

K8S_VERSION = "1.37"
URL = "http://runnerd.runnerd.svc:8063/internal/bundles/abcdefgh2345?token=0f1e2d"
CREATED = "2026-12-01T00:00:00Z"
SETTINGS = KubeSettings(self_url="http://runnerd.runnerd.svc:8063")
LIMITS = Limits(cpu="500m", memory="512Mi", ephemeral_storage="1Gi", ttl_s=21600.5)
SPEC = RunSpec.create(
    session_id="abcdefgh2345",
    image=ImageSpec("telorun/node:0.30.1-slim", "always"),
    env={"API_TOKEN": "tok-secret", "HOME": "/root"},
    limits=LIMITS,
    bundle=BundleSpec(entry="telo.yaml", files=(("telo.yaml", "kind: x"),)),
    ports=(PortMapping(port=3000, protocol="tcp"), PortMapping(port=5353, protocol="udp")),
)
APP_SPEC = RunSpec.create(
    session_id=SPEC.session_id,
    image=ImageSpec("acme/tool:1", "missing"),
    env={"SERVICE_TOKEN": "tok-operator"},
    limits=LIMITS,
    app="tool",
    ports=SPEC.ports,
)


def reshaped(spec: RunSpec, **identity: Any) -> RunSpec:
    """`spec` with some of its identity changed (ports, inspect, ...)."""
    return RunSpec(replace(spec.identity, **identity), spec.creation)


def validate(pod: dict[str, Any]) -> None:
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def container(pod: dict[str, Any]) -> dict[str, Any]:
    [only] = pod["spec"]["containers"]
    assert isinstance(only, dict)
    return only


def test_session_pod_is_valid_in_strict_mode_with_every_option() -> None:
    full = replace(SETTINGS, runtime_class="gvisor", image_pull_secret="regcred")
    for spec in (SPEC, reshaped(SPEC, inspect=True, ports=())):
        validate(build_session_pod(full, spec, bundle_url=URL, created_at=CREATED))
        validate(build_session_pod(SETTINGS, spec, bundle_url=URL, created_at=CREATED))


def test_strict_validation_catches_a_typo() -> None:
    # The guard the other tests rely on: strict mode rejects unknown fields.
    pod = build_session_pod(SETTINGS, SPEC, bundle_url=URL, created_at=CREATED)
    container(pod)["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(pod)


def test_session_pod_runs_the_entry_on_the_kernel_image_under_the_pull_policy() -> None:
    pod = build_session_pod(SETTINGS, SPEC, bundle_url=URL, created_at=CREATED)
    c = container(pod)
    assert c["image"] == "telorun/node:0.30.1-slim"
    assert c["imagePullPolicy"] == "Always"
    # Held by the gate (sh, until ^D on its tty), then exec'd: the same argv.
    assert c["command"][:2] == ["sh", "-c"]
    assert c["command"][3:] == ["runnerd-gate", "telo", "run", "/app/telo.yaml"]
    assert is_gated(pod)  # what an adopting daemon checks before it sends a ^D
    assert c["workingDir"] == "/work"
    assert c["stdin"] is True and c["tty"] is True and "stdinOnce" not in c
    inspected = build_session_pod(
        SETTINGS, reshaped(SPEC, inspect=True), bundle_url=URL, created_at=CREATED
    )
    assert container(inspected)["command"][-3:] == ["--inspect", "0.0.0.0:9230", "--no-open"]
    assert c["ports"] == [
        {"containerPort": 3000, "protocol": "TCP"},
        {"containerPort": 5353, "protocol": "UDP"},
    ]


def test_session_pod_fetches_the_bundle_in_its_init_container() -> None:
    pod = build_session_pod(SETTINGS, SPEC, bundle_url=URL, created_at=CREATED)
    [init] = pod["spec"]["initContainers"]
    assert init["name"] == "body-fetch"
    assert init["image"] == SETTINGS.init_image
    assert init["command"] == ["sh", "-c"]
    assert URL in init["args"][0]
    assert "-C /app" in init["args"][0]
    assert init["volumeMounts"] == [{"name": "app", "mountPath": "/app"}]


def test_session_pod_writes_only_to_its_empty_dirs() -> None:
    pod = build_session_pod(SETTINGS, SPEC, bundle_url=URL, created_at=CREATED)
    c = container(pod)
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {
        "/app": "app",
        "/telo-cache": "telo-cache",
        "/work": "work",
        "/home/telo": "home",
        "/tmp": "tmp",
    }
    assert pod["spec"]["volumes"] == [{"name": n, "emptyDir": {}} for n in mounts.values()]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["TELO_CACHE_DIR"] == "/telo-cache"
    assert env["HOME"] == "/home/telo"  # the client's HOME=/root cannot break the rootfs rule
    assert env["npm_config_cache"] == "/home/telo/.npm"
    assert env["FORCE_COLOR"] == "1"
    assert env["API_TOKEN"] == "tok-secret"
    assert len(env) == len(c["env"])  # no duplicate names


def test_session_pod_is_locked_down() -> None:
    pod = build_session_pod(SETTINGS, SPEC, bundle_url=URL, created_at=CREATED)
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 21601
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in spec["containers"] + spec["initContainers"]:
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        }
    assert container(pod)["resources"] == {
        "limits": {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
    }
    assert "imagePullSecrets" not in spec and "runtimeClassName" not in spec


def test_pull_secret_and_runtime_class_when_set() -> None:
    settings = replace(SETTINGS, runtime_class="gvisor", image_pull_secret="regcred")
    for pod in (
        build_session_pod(settings, SPEC, bundle_url=URL, created_at=CREATED),
        build_app_pod(settings, APP_SPEC, created_at=CREATED),
    ):
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert pod["spec"]["runtimeClassName"] == "gvisor"


def test_labels_select_and_annotations_rebuild_but_never_carry_env() -> None:
    pod = build_session_pod(
        SETTINGS, reshaped(SPEC, inspect=True), bundle_url=URL, created_at=CREATED
    )
    meta = pod["metadata"]
    assert meta["name"] == pod_name("abcdefgh2345") == "runnerd-abcdefgh2345"
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "runnerd",
        "runnerd.telo.run/session-id": "abcdefgh2345",
    }
    assert managed_by_selector(SETTINGS) == "app.kubernetes.io/managed-by=runnerd"
    assert is_ours(pod, SETTINGS, "abcdefgh2345")
    assert not is_ours(pod, SETTINGS, "otherid23456")
    assert not is_ours(pod, replace(SETTINGS, managed_by="other"), "abcdefgh2345")
    assert parse_annotations(pod) == {
        "created_at": CREATED,
        "kind": "bundle",
        "inspect": True,
        "app": None,
        "ports": [{"port": 3000, "protocol": "tcp"}, {"port": 5353, "protocol": "udp"}],
    }
    app = build_app_pod(SETTINGS, APP_SPEC, created_at=CREATED)
    assert parse_annotations(app)["kind"] == "app"
    assert parse_annotations(app)["app"] == "tool"
    for p in (pod, app):
        assert "tok-" not in str(p["metadata"])


def test_parse_annotations_survives_a_hand_edited_pod() -> None:
    assert (
        parse_annotations({"metadata": {"annotations": {"runnerd.telo.run/ports": "{not json"}}})[
            "ports"
        ]
        == []
    )
    assert parse_annotations({})["kind"] is None


def test_app_pod_runs_the_catalog_image_own_entrypoint() -> None:
    pod = build_app_pod(SETTINGS, APP_SPEC, created_at=CREATED)
    validate(pod)
    c = container(pod)
    assert "command" not in c and "args" not in c
    assert not is_gated(pod)  # never sent a ^D
    assert "initContainers" not in pod["spec"]
    assert c["image"] == "acme/tool:1"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["env"] == [{"name": "SERVICE_TOKEN", "value": "tok-operator"}]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert build_pod(SETTINGS, APP_SPEC, bundle_url=None, created_at=CREATED) == pod


def test_build_pod_refuses_a_bundle_session_without_a_url() -> None:
    with pytest.raises(ValueError, match="bundle_url"):
        build_pod(SETTINGS, SPEC, bundle_url=None, created_at=CREATED)
    with pytest.raises(ValueError, match="bundle"):
        build_session_pod(SETTINGS, APP_SPEC, bundle_url=URL, created_at=CREATED)
