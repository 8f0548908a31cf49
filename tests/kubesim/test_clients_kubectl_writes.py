"""kubectl 1.37 writing objects: protobuf creates, `kubectl apply` (strategic merge patch)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import trio

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


async def test_unknown_body_formats_are_415(kube: httpx.AsyncClient) -> None:
    pods = f"/api/v1/namespaces/{NS}/pods"
    r = await kube.post(pods, content=b"\x90\x01", headers={"Content-Type": "application/cbor"})
    assert r.status_code == 415
    assert r.text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the body '
        "of the request was in an unknown format - accepted media types include: "
        'application/json, application/yaml","reason":"UnsupportedMediaType","code":415}\n'
    )
    yaml_pod = b"metadata: {name: y}\nspec:\n  containers: [{name: app, image: busybox}]\n"
    r = await kube.post(pods, content=yaml_pod, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
