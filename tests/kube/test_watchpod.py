"""runnerd.kube.watchpod: the watch pod's shape (issue 20's list, field by
field), validated against the strict Kubernetes 1.37 schema
(kubernetes-validate) as run pods are, and what adoption reads back."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from runnerd.backend import BundleSpec, CreationSpec, ImageSpec, Limits, SessionIdentity
from runnerd.backend.watch import AgentLaunch, AppLaunch, WatchSpec
from runnerd.contract import PortMapping
from runnerd.kube.podspec import format_created_at
from runnerd.kube.settings import KubeSettings
from runnerd.kube.watchpod import (
    app_container_name,
    build_watch_pod,
    inspect_port,
    is_watch_pod,
    read_watch_annotations,
    read_workspace_token,
    watch_pod_name,
)

K8S_VERSION = "1.37"
SID = "abcdefgh2345"
CREATED = "2026-12-01T00:00:00.250Z"
TOKEN = "ws-token-0f1e2d3c"
CONFIGMAP = "runnerd-workspace-app-0123456789ab"
SETTINGS = KubeSettings(self_url="http://runnerd.runnerd.svc:8063")
LIMITS = Limits(cpu="1", memory="1Gi", ephemeral_storage="2Gi", ttl_s=86400.2)
WEB = AppLaunch("web", "telo.yaml", "tty", (PortMapping(port=8080, protocol="tcp"),), slot=0)
WORKER = AppLaunch("worker", "jobs/worker.yaml", "streams", (), slot=1)
AGENT = AgentLaunch(
    "helper",
    ImageSpec("acme/agent:2", "missing"),
    port=7000,
    env={"AGENT_TOKEN": "tok-agent-secret", "MODEL": "x"},
)
SPEC = WatchSpec(
    identity=SessionIdentity(SID, LIMITS, inspect=True, created_at=1.0),
    creation=CreationSpec(
        image=ImageSpec("telorun/node:0.30.1-slim", "always"),
        env={"API_TOKEN": "tok-session-secret"},
        bundle=BundleSpec(entry="telo.yaml", files=(("telo.yaml", "kind: x"),)),
    ),
    apps=(WEB, WORKER),
    agent=AGENT,
)


def build(spec: WatchSpec = SPEC, settings: KubeSettings = SETTINGS) -> dict[str, Any]:
    return build_watch_pod(
        settings,
        spec,
        name=watch_pod_name(SID),
        configmap=CONFIGMAP,
        workspace_token=TOKEN,
        created_at=CREATED,
    )


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["spec"]["containers"]}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["value"] for v in container.get("env", [])}


def test_watch_pod_is_valid_in_strict_mode_with_every_option() -> None:
    full = replace(SETTINGS, runtime_class="gvisor", image_pull_secret="regcred")
    for spec in (SPEC, replace(SPEC, agent=None), replace(SPEC, apps=(WORKER,))):
        for settings in (SETTINGS, full):
            kubernetes_validate.validate(build(spec, settings), K8S_VERSION, strict=True)


def test_watch_pod_name_is_fresh_on_every_create() -> None:
    names = {watch_pod_name(SID) for _ in range(20)}
    assert len(names) == 20
    assert all(n.startswith(f"runnerd-{SID}-") and len(n) == len(SID) + 15 for n in names)
    assert watch_pod_name(SID, "00aa11") == f"runnerd-{SID}-00aa11"


def test_watch_pod_labels_and_annotations_carry_no_env() -> None:
    pod = build()
    meta = pod["metadata"]
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "runnerd",
        "runnerd.telo.run/session-id": SID,
        "runnerd.telo.run/mode": "watch",
    }
    assert meta["annotations"]["runnerd.telo.run/kind"] == "watch"
    assert meta["annotations"]["runnerd.telo.run/created-at"] == CREATED
    assert json.loads(meta["annotations"]["runnerd.telo.run/agent"]) == {
        "name": "helper",
        "port": 7000,
    }
    text = json.dumps(meta)
    for secret in ("tok-session-secret", "tok-agent-secret", TOKEN):
        assert secret not in text
    assert is_watch_pod(pod)


def test_watch_pod_spec_is_the_issues_pod_wide_list() -> None:
    full = replace(SETTINGS, runtime_class="gvisor", image_pull_secret="regcred")
    spec = build(settings=full)["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 86401  # watch.max_ttl_seconds, rounded up
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    for name in ("workspace", "telo-cache", "work", "home", "tmp"):
        assert volumes[name] == {"name": name, "emptyDir": {}}
    assert volumes["workspace-app"]["configMap"] == {"name": CONFIGMAP, "defaultMode": 0o444}
    plain = build()["spec"]
    assert "imagePullSecrets" not in plain and "runtimeClassName" not in plain


def test_containers_are_workspace_then_apps_in_order_then_agent() -> None:
    names = [c["name"] for c in build()["spec"]["containers"]]
    assert names == ["workspace", "app-web", "app-worker", "agent"]
    no_agent = [c["name"] for c in build(replace(SPEC, agent=None))["spec"]["containers"]]
    assert no_agent == ["workspace", "app-web", "app-worker"]


def test_workspace_container_serves_the_api_with_the_token_and_no_session_env() -> None:
    ws = containers(build())["workspace"]
    assert ws["image"] == "telorun/node:0.30.1-slim"
    assert ws["imagePullPolicy"] == "Always"
    assert ws["command"] == [
        "telo",
        "run",
        "--no-open",
        "/etc/runnerd/workspace-app/telo.yaml",
    ]
    assert ws["ports"] == [{"name": "workspace", "containerPort": 8099, "protocol": "TCP"}]
    env = env_of(ws)
    assert env["RUNNERD_WORKSPACE_TOKEN"] == TOKEN
    assert env["WORKSPACE_DIR"] == "/workspace" and env["WORKSPACE_PORT"] == "8099"
    assert "API_TOKEN" not in env
    assert {
        "name": "workspace-app",
        "mountPath": "/etc/runnerd/workspace-app",
        "readOnly": True,
    } in ws["volumeMounts"]
    assert "tty" not in ws and "stdin" not in ws


def test_app_containers_wait_for_the_entry_then_run_the_watching_kernel() -> None:
    pod = containers(build())
    web, worker = pod["app-web"], pod["app-worker"]
    assert web["command"][:2] == ["sh", "-c"]
    assert web["command"][4:] == [
        "telo.yaml",
        "telo",
        "run",
        "--watch",
        "--inspect",
        f"0.0.0.0:{inspect_port(0)}",
        "--no-open",
        "telo.yaml",
    ]
    assert worker["command"][-3:] == ["0.0.0.0:9231", "--no-open", "jobs/worker.yaml"]
    for app in (web, worker):
        assert app["workingDir"] == "/workspace"
        assert env_of(app)["API_TOKEN"] == "tok-session-secret"
        assert "RUNNERD_WORKSPACE_TOKEN" not in env_of(app)
        assert app["resources"]["limits"] == {
            "cpu": "1",
            "memory": "1Gi",
            "ephemeral-storage": "2Gi",
        }
        assert {"name": "workspace", "mountPath": "/workspace"} in app["volumeMounts"]
    assert (web["stdin"], web["tty"]) == (True, True)
    assert (worker["stdin"], worker["tty"]) == (True, False)
    assert web["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert worker["ports"] == []


def test_agent_runs_its_own_entrypoint_with_its_env_and_the_workspace_dir() -> None:
    agent = containers(build())["agent"]
    assert agent["image"] == "acme/agent:2" and agent["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in agent and "args" not in agent
    assert env_of(agent) == {
        "AGENT_TOKEN": "tok-agent-secret",
        "MODEL": "x",
        "WORKSPACE_DIR": "/workspace",
    }
    assert agent["ports"] == [{"containerPort": 7000, "protocol": "TCP"}]
    assert agent["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert "API_TOKEN" not in env_of(agent) and "RUNNERD_WORKSPACE_TOKEN" not in env_of(agent)


def test_every_other_container_is_locked_down_as_run_pods_are() -> None:
    for name, c in containers(build()).items():
        if name == "agent":
            continue
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        }, name
        assert "limits" in c["resources"], name


@pytest.mark.parametrize(
    "app_name",
    ["a" * 63, "x" * 60 + "-yz", "A_B", "web.v2"],
)
def test_an_app_name_that_is_no_container_name_is_mapped_and_recorded(app_name: str) -> None:
    mapped = app_container_name(app_name)
    assert mapped.startswith("app-") and len(mapped) <= 63
    assert mapped == app_container_name(app_name)  # deterministic
    app = AppLaunch(app_name, "main.yaml", slot=0)
    pod = build(replace(SPEC, apps=(app, WORKER)))
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    info = read_watch_annotations(pod)
    assert info is not None
    assert [(a.launch.name, a.container) for a in info.apps] == [
        (app_name, mapped),
        ("worker", "app-worker"),
    ]


def test_long_names_sharing_a_prefix_map_to_distinct_containers() -> None:
    one, two = "p" * 60 + "one", "p" * 60 + "two"
    assert app_container_name(one) != app_container_name(two)
    assert app_container_name("web") == "app-web"


def test_adoption_reads_back_what_the_pod_was_built_with() -> None:
    pod = build()
    info = read_watch_annotations(pod)
    assert info is not None
    assert info.session_id == SID and info.name == pod["metadata"]["name"]
    assert format_created_at(info.created_at) == CREATED
    assert [a.launch for a in info.apps] == [WEB, WORKER]
    assert info.agent == ("helper", 7000)
    assert info.mode == "watch"
    assert read_workspace_token(pod) == TOKEN
    no_agent = read_watch_annotations(build(replace(SPEC, agent=None)))
    assert no_agent is not None and no_agent.agent is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda m: m["labels"].pop("runnerd.telo.run/mode"),
        lambda m: m["labels"].pop("runnerd.telo.run/session-id"),
        lambda m: m["annotations"].update({"runnerd.telo.run/apps": "{not json"}),
        lambda m: m["annotations"].update({"runnerd.telo.run/apps": "[]"}),
        lambda m: m["annotations"].update({"runnerd.telo.run/apps": '[{"name": "x"}]'}),
        lambda m: m["annotations"].update({"runnerd.telo.run/created-at": "yesterday"}),
        lambda m: m["annotations"].update({"runnerd.telo.run/agent": '{"name": "a"}'}),
        lambda m: m["annotations"].update({"runnerd.telo.run/kind": "bundle"}),
    ],
)
def test_a_garbled_watch_pod_reads_as_none_never_raising(damage: Any) -> None:
    pod = build()
    damage(pod["metadata"])
    assert read_watch_annotations(pod) is None


def test_build_refuses_an_empty_app_set() -> None:
    with pytest.raises(ValueError, match="at least one app"):
        build(replace(SPEC, apps=()))
