"""kubectl 1.37 writing objects: protobuf creates, `kubectl apply` (strategic merge patch)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.kubesim.conftest import build_pod
from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_kubectl import kubectl

NS = "runnerd"


async def test_create_commands_that_send_protobuf(apiserver: KubeSim, tmp_path: Path) -> None:
    # client-go's typed clients always send protobuf for built-in kinds and never fall
    # back to JSON after a 415 (only CBOR does): these succeed only if protobuf is read.
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(key: str, *args: str) -> None:
        results[key] = await kubectl(apiserver, tmp_path, "create", *args)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "quota", "quota", "q", "--hard=pods=2,limits.cpu=2")
        nursery.start_soon(run, "svc", "service", "clusterip", "web", "--tcp=80:8080")
        rule = "--rule=example.com/x*=web:http,tls=cert"
        nursery.start_soon(run, "ing", "ingress", "web", "--class=nginx", rule)
    for key, line in (
        ("quota", b"resourcequota/q created\n"),
        ("svc", b"service/web created\n"),
        ("ing", b"ingress.networking.k8s.io/web created\n"),
    ):
        assert results[key].stdout == line, results[key].stderr
    quota = apiserver.store.get("resourcequotas", NS, "q")
    assert quota is not None and quota["spec"] == {"hard": {"pods": "2", "limits.cpu": "2"}}
    svc = apiserver.store.get("services", NS, "web")
    assert svc is not None and svc["spec"]["selector"] == {"app": "web"}
    assert svc["spec"]["ports"] == [
        {"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}
    ]
    ing = apiserver.store.get("ingresses", NS, "web")
    assert ing is not None and ing["spec"] == {
        "ingressClassName": "nginx",
        "tls": [{"hosts": ["example.com"], "secretName": "cert"}],
        "rules": [
            {
                "host": "example.com",
                "http": {
                    "paths": [
                        {
                            "path": "/x",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": "web", "port": {"name": "http"}}},
                        }
                    ]
                },
            }
        ],
    }


def apiserver_empty(listing: httpx.Response) -> bool:
    return listing.json()["items"] == []


async def test_unknown_body_formats_are_415(kube: httpx.AsyncClient) -> None:
    pods = f"/api/v1/namespaces/{NS}/pods"
    r = await kube.post(pods, content=b"\x90\x01", headers={"Content-Type": "application/cbor"})
    assert r.status_code == 415
    assert r.text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the body '
        "of the request was in an unknown format - accepted media types include: "
        'application/json, application/yaml","reason":"UnsupportedMediaType","code":415}\n'
    )
    proto = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    r = await kube.post(pods, content=b"k8s\x00\x0a\x02\x0a", headers=proto)
    assert r.status_code == 415  # a kind protobuf.py does not decode: as if JSON-only
    services = f"/api/v1/namespaces/{NS}/services"
    r = await kube.post(services, content=b"k8s\x00\x0a\x09", headers=proto)
    assert (r.status_code, r.json()["message"]) == (400, "truncated protobuf field")
    assert apiserver_empty(await kube.get(services))
    yaml_pod = b"metadata: {name: y}\nspec:\n  containers: [{name: app, image: busybox}]\n"
    r = await kube.post(pods, content=yaml_pod, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text


def manifest(path: Path, obj: dict[str, Any]) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


async def test_apply_changes_a_pod_image_and_a_service_port(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    pod = build_pod("web")
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]},
    }
    first = [manifest(tmp_path / "pod1.json", pod), manifest(tmp_path / "svc1.json", svc)]
    pod["spec"]["containers"][0]["image"] = "busybox:1.37"
    svc["spec"]["ports"] = [{"name": "http", "port": 81, "targetPort": 8080}]
    second = [manifest(tmp_path / "pod2.json", pod), manifest(tmp_path / "svc2.json", svc)]
    for files, verb in ((first, "created"), (second, "configured")):
        done = await kubectl(apiserver, tmp_path, "apply", "-f", files[0], "-f", files[1])
        assert done.stdout == f"pod/web {verb}\nservice/web {verb}\n".encode(), done.stderr

    stored_pod = apiserver.store.get("pods", NS, "web")
    assert stored_pod is not None
    assert [c["image"] for c in stored_pod["spec"]["containers"]] == ["busybox:1.37"]
    stored_svc = apiserver.store.get("services", NS, "web")
    assert stored_svc is not None
    assert not any(k.startswith("$") for k in stored_svc["spec"])
    assert stored_svc["spec"]["ports"] == [
        {"name": "http", "protocol": "TCP", "port": 81, "targetPort": 8080}
    ]

    pod["spec"]["restartPolicy"] = "Never"  # not a field pod updates may change
    forbidden = manifest(tmp_path / "pod3.json", pod)
    done = await kubectl(apiserver, tmp_path, "apply", "-f", forbidden)
    assert done.returncode == 1
    assert b"pod updates may not change fields other than" in done.stderr
