"""runnerd.kube.workspaceapp and KubeClient's ConfigMap verbs, on an
`httpx.MockTransport` apiserver that keeps ConfigMaps as the real one does
(create → 201 or 409 AlreadyExists, list by label selector, delete → 404
when gone), under trio's MockClock. The manifest it ships is a Telo
application serving the workspace API."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import trio
import trio.testing
import yaml

from runnerd.kube import errors
from runnerd.kube.client import open_kube_client
from runnerd.kube.kubeconfig import Connection
from runnerd.kube.settings import KubeSettings
from runnerd.kube.workspaceapp import (
    APP_NAME,
    configmap_for,
    ensure_configmap,
    manifest_text,
    mounted_configmaps,
    sweep_stale_configmaps,
)
from tests.kube.test_client_transport import POLICY, status

CONN = Connection(server="https://apiserver.test", namespace="ns", source="test", token="t0")
SETTINGS = KubeSettings(self_url="http://runnerd.test:8063")
CONFIGMAPS = "/api/v1/namespaces/ns/configmaps"


@dataclass
class ConfigMapServer:
    """ConfigMaps in one namespace, as the apiserver answers for them."""

    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    refuse: dict[str, int] = field(default_factory=dict)  # method → status
    seen: list[str] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(f"{request.method} {request.url.path}")
        if request.method in self.refuse:
            code = self.refuse[request.method]
            return status(code, {403: "Forbidden", 500: "InternalError"}.get(code, "x"))
        path = request.url.path
        if request.method == "POST" and path == CONFIGMAPS:
            body = json.loads(request.content)
            name = body["metadata"]["name"]
            if name in self.stored:
                return status(409, "AlreadyExists")
            self.stored[name] = body
            return httpx.Response(201, json=body)
        if request.method == "GET" and path.startswith(CONFIGMAPS + "/"):
            found = self.stored.get(path.rsplit("/", 1)[1])
            return httpx.Response(200, json=found) if found else status(404, "NotFound")
        if request.method == "GET" and path == CONFIGMAPS:
            wanted = dict(
                part.split("=", 1) for part in request.url.params["labelSelector"].split(",")
            )
            items = [
                cm
                for cm in self.stored.values()
                if all(cm["metadata"]["labels"].get(k) == v for k, v in wanted.items())
            ]
            return httpx.Response(200, json={"items": items, "metadata": {"resourceVersion": "9"}})
        if request.method == "DELETE" and path.startswith(CONFIGMAPS + "/"):
            name = path.rsplit("/", 1)[1]
            if self.stored.pop(name, None) is None:
                return status(404, "NotFound")
            return httpx.Response(200, json={"kind": "Status", "status": "Success"})
        return status(404, "NotFound")


def client_for(server: ConfigMapServer) -> Any:
    return open_kube_client(CONN, policy=POLICY, transport=httpx.MockTransport(server))


def stale(name: str, managed_by: str = "runnerd") -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": managed_by, "runnerd.telo.run/role": "workspace-app"}
    return {"metadata": {"name": name, "labels": labels}, "data": {}}


def pod_mounting(name: str) -> dict[str, Any]:
    return {"spec": {"volumes": [{"name": "w", "configMap": {"name": name}}, {"name": "e"}]}}


def test_configmap_is_content_addressed_and_valid() -> None:
    cm = configmap_for(SETTINGS)
    kubernetes_validate.validate(cm, "1.37", strict=True)
    name = cm["metadata"]["name"]
    assert name.startswith("runnerd-workspace-app-") and len(name) == 22 + 12
    assert configmap_for(SETTINGS)["metadata"]["name"] == name
    assert configmap_for(SETTINGS, manifest="other")["metadata"]["name"] != name
    assert cm["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "runnerd",
        "runnerd.telo.run/role": "workspace-app",
    }
    assert cm["data"] == {"telo.yaml": manifest_text()}


def test_the_manifest_is_a_telo_application_serving_the_workspace_api() -> None:
    docs = list(yaml.load_all(manifest_text(), Loader=_TeloLoader))
    app = docs[0]
    assert app["kind"] == "Telo.Application" and app["metadata"]["name"] == APP_NAME
    assert app["ports"]["http"] == {"env": "WORKSPACE_PORT", "protocol": "tcp", "default": 8099}
    assert app["secrets"]["token"]["env"] == "RUNNERD_WORKSPACE_TOKEN"
    kinds = {doc["kind"] for doc in docs}
    used = {kind.split(".")[0] for kind in _kinds(docs)}
    assert used - {"Telo"} <= set(app["imports"])  # every kind's module is imported
    assert {"Http.Server", "Http.Api", "Fs.TreeSnapshot", "Fs.TreeSync", "Fs.File"} <= kinds
    routes = [
        (route["request"]["method"], route["request"]["path"])
        for doc in docs
        if doc["kind"] == "Http.Api"
        for route in doc["routes"]
    ]
    assert routes == [
        ("GET", "/healthz"),
        ("GET", "/"),
        ("GET", "/file"),
        ("POST", "/"),
        ("GET", "/snapshot"),
    ]


def _kinds(value: Any) -> set[str]:
    """Every `kind:` value anywhere in a parsed manifest."""
    if isinstance(value, dict):
        found = {value["kind"]} if isinstance(value.get("kind"), str) else set()
        return found.union(*(_kinds(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_kinds(v) for v in value))
    return set()


class _TeloLoader(yaml.SafeLoader):
    """YAML with Telo's `!ref` / `!cel` tags read as plain values."""


_TeloLoader.add_multi_constructor("!", lambda loader, _tag, node: loader.construct_scalar(node))


async def test_ensure_creates_once_and_takes_a_409_of_the_same_configmap_as_success(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = ConfigMapServer()
    cm = configmap_for(SETTINGS)
    async with client_for(server) as client:
        with trio.fail_after(60):
            await ensure_configmap(client, cm)
            await ensure_configmap(client, cm)
    assert list(server.stored) == [cm["metadata"]["name"]]
    name = cm["metadata"]["name"]
    assert server.seen == [f"POST {CONFIGMAPS}", f"POST {CONFIGMAPS}", f"GET {CONFIGMAPS}/{name}"]


async def test_ensure_raises_a_classified_refusal(autojump_clock: trio.testing.MockClock) -> None:
    server = ConfigMapServer(refuse={"POST": 403})
    async with client_for(server) as client:
        with trio.fail_after(60), pytest.raises(errors.Forbidden) as caught:
            await ensure_configmap(client, configmap_for(SETTINGS))
    assert "could not create the workspace app" in str(caught.value)
    assert not server.stored


async def test_sweep_deletes_only_unmounted_managed_workspace_apps(
    autojump_clock: trio.testing.MockClock,
) -> None:
    keep = configmap_for(SETTINGS)["metadata"]["name"]
    server = ConfigMapServer()
    for cm in (
        stale(keep),
        stale("runnerd-workspace-app-old1"),
        stale("runnerd-workspace-app-old2"),
    ):
        server.stored[cm["metadata"]["name"]] = cm
    server.stored["runnerd-workspace-app-other"] = stale("runnerd-workspace-app-other", "someone")
    pods = [pod_mounting("runnerd-workspace-app-old2")]
    async with client_for(server) as client:
        with trio.fail_after(60):
            deleted = await sweep_stale_configmaps(client, keep, pods, settings=SETTINGS)
    assert deleted == ["runnerd-workspace-app-old1"]
    assert sorted(server.stored) == sorted(
        [keep, "runnerd-workspace-app-old2", "runnerd-workspace-app-other"]
    )


async def test_sweep_never_raises_for_a_refusal(autojump_clock: trio.testing.MockClock) -> None:
    server = ConfigMapServer(refuse={"GET": 403})
    async with client_for(server) as client:
        with trio.fail_after(60):
            assert await sweep_stale_configmaps(client, "x", [], settings=SETTINGS) == []


async def test_delete_configmap_reports_a_gone_one(autojump_clock: trio.testing.MockClock) -> None:
    server = ConfigMapServer()
    server.stored["a"] = stale("a")
    async with client_for(server) as client:
        with trio.fail_after(60):
            assert await client.delete_configmap("a", operation="delete") is True
            assert await client.delete_configmap("a", operation="delete") is False


def test_mounted_configmaps_reads_every_pods_volumes() -> None:
    pods = [pod_mounting("a"), pod_mounting("b"), {"spec": {}}, {}]
    assert mounted_configmaps(pods) == {"a", "b"}


def test_the_readmes_rbac_grants_what_the_configmap_calls_need() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("### RBAC the runner needs", 1)[1].split("```yaml", 1)[1]
    role = next(
        doc for doc in yaml.safe_load_all(block.split("```", 1)[0]) if doc["kind"] == "Role"
    )
    verbs = {
        verb
        for rule in role["rules"]
        if "configmaps" in rule["resources"] and rule["apiGroups"] == [""]
        for verb in rule["verbs"]
    }
    assert {"create", "get", "list", "delete"} <= verbs


def test_every_workspace_route_checks_the_token_before_any_handler_step() -> None:
    """Issue 20: a route's `returns:` run after its handler, so a 401 there
    would answer after the files were written. The check must be the first
    step of each handler, and it must throw (rendered 401 by `catches:`)."""
    docs = list(yaml.load_all(manifest_text(), Loader=_TeloLoader))
    by_name = {doc["metadata"]["name"]: doc for doc in docs}
    api = by_name["workspaceApi"]
    assert len(api["routes"]) == 4
    for route in api["routes"]:
        where = f"{route['request']['method']} {route['request']['path']}"
        assert all("when" not in r for r in route["returns"]), where
        handler = by_name[route["handler"]]
        assert handler["kind"] == "Run.Sequence", where
        first, *rest = handler["steps"]
        assert first["if"] == "inputs.authorization != 'Bearer ' + secrets.token", where
        assert [step["throw"]["code"] for step in first["then"]] == ["UNAUTHORIZED"], where
        assert rest and all("invoke" in step for step in rest), where
        assert "request.headers.authorization" in route["inputs"]["authorization"], where
        first_catch = route["catches"][0]
        assert (first_catch["when"], first_catch["status"]) == (
            "${{ error.code == 'UNAUTHORIZED' }}",
            401,
        ), where
