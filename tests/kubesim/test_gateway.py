"""The Gateway API and IngressClasses on the test cluster, through kubectl 1.37
and the official client: discovery (v1 preferred, v1beta1 served, the group
taken away), create/get/apply, status written through the status subresource
(`kubectl patch --subresource=status`) and left alone by spec writes, the
default-class annotation, and HTTPRoutes collected with their owner pod."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import trio
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.kubesim.conftest import build_pod
from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_kubectl import kubectl

NS = "runnerd"
GROUP = "gateway.networking.k8s.io"


def route_manifest(name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner["metadata"]["name"],
             "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": meta,
        "spec": {
            "parentRefs": [{"name": "public", "namespace": "infra", "sectionName": "https"}],
            "hostnames": ["8080-abc.example.test"],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [{"name": "web", "port": 8080}],
                }
            ],
        },
    }


async def apply(sim: KubeSim, tmp_path: Path, obj: dict[str, Any]) -> bytes:
    path = tmp_path / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    done = await kubectl(sim, tmp_path, "apply", "-f", str(path))
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_httproutes_through_kubectl_with_status_patches(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    assert await apply(apiserver, tmp_path, route_manifest("r1")) == (
        b"httproute.gateway.networking.k8s.io/r1 created\n"
    )
    accepted = {
        "status": {
            "parents": [
                {
                    "parentRef": {"name": "public", "namespace": "infra"},
                    "controllerName": "example.test/gateway",
                    "conditions": [
                        {"type": "Accepted", "status": "True", "reason": "Accepted",
                         "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}
                    ],
                }
            ]
        }
    }  # fmt: skip
    patched = await kubectl(
        apiserver, tmp_path, "patch", "httproute", "r1", "--subresource=status",
        "--type=merge", "-p", json.dumps(accepted),
    )  # fmt: skip
    assert patched.returncode == 0, patched.stderr
    stored = apiserver.store.get("httproutes", NS, "r1")
    assert stored is not None and stored["status"] == accepted["status"]
    # A spec write (apply of a changed manifest) keeps the status; a status
    # write keeps the spec.
    changed = route_manifest("r1")
    changed["spec"]["hostnames"] = ["9000-abc.example.test"]
    assert await apply(apiserver, tmp_path, changed) == (
        b"httproute.gateway.networking.k8s.io/r1 configured\n"
    )
    got = await kubectl(apiserver, tmp_path, "get", "httproutes", "r1", "-o", "json")
    route = json.loads(got.stdout)
    assert route["spec"]["hostnames"] == ["9000-abc.example.test"]
    assert route["status"] == accepted["status"]
    assert route["spec"]["parentRefs"] == [
        {"group": GROUP, "kind": "Gateway", "name": "public", "namespace": "infra",
         "sectionName": "https"}
    ]  # fmt: skip
    listed = await kubectl(apiserver, tmp_path, "get", "httproutes", "-o", "name")
    assert listed.stdout == b"httproute.gateway.networking.k8s.io/r1\n"


async def test_gateway_api_discovery_follows_what_is_served(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    resources = await kubectl(apiserver, tmp_path, "api-resources", "--api-group", GROUP)
    assert b"httproutes" in resources.stdout and b"gateways" in resources.stdout
    async with httpx.AsyncClient(
        base_url=apiserver.url,
        verify=apiserver.client_ssl_context(),
        headers={"Authorization": f"Bearer {apiserver.token}"},
    ) as http:
        group = (await http.get(f"/apis/{GROUP}")).json()
        assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]
        assert group["preferredVersion"]["version"] == "v1"
        beta = (await http.get(f"/apis/{GROUP}/v1beta1")).json()
        assert {"httproutes", "httproutes/status", "gateways"} <= {
            r["name"] for r in beta["resources"]
        }
        # A route created at v1 reads back at v1beta1 as a v1beta1 object.
        body = route_manifest("r2")
        created = await http.post(f"/apis/{GROUP}/v1/namespaces/{NS}/httproutes", json=body)
        assert created.status_code == 201, created.text
        got = (await http.get(f"/apis/{GROUP}/v1beta1/namespaces/{NS}/httproutes/r2")).json()
        assert got["apiVersion"] == f"{GROUP}/v1beta1"
        # Taken away (a cluster without the CRDs): 404 everywhere.
        apiserver.served[GROUP] = ()
        assert (await http.get(f"/apis/{GROUP}")).status_code == 404
        assert GROUP not in {g["name"] for g in (await http.get("/apis")).json()["groups"]}
        assert (await http.get(f"/apis/{GROUP}/v1/namespaces/{NS}/httproutes")).status_code == 404


async def test_ingressclasses_and_routes_through_the_official_client(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    default = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {
            "name": "nginx",
            "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"},
        },
        "spec": {"controller": "k8s.io/ingress-nginx"},
    }
    await apply(kubesim, tmp_path, default)
    pod = await kubesim.store.create("pods", NS, build_pod("owner"))
    await apply(kubesim, tmp_path, route_manifest("owned", pod))
    kubeconfig = kubesim.write_kubeconfig(tmp_path / "reader")

    def read() -> tuple[Any, Any]:
        api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        try:
            classes = k8s.NetworkingV1Api(api).list_ingress_class()
            route = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
                GROUP, "v1", NS, "httproutes", "owned"
            )
            return api.sanitize_for_serialization(classes), route
        finally:
            api.close()

    with trio.fail_after(30):
        classes, route = await trio.to_thread.run_sync(read)
    assert [c["metadata"]["name"] for c in classes["items"]] == ["nginx"]
    annotations = classes["items"][0]["metadata"]["annotations"]
    assert annotations["ingressclass.kubernetes.io/is-default-class"] == "true"
    assert route["spec"]["hostnames"] == ["8080-abc.example.test"]
    # Deleting the owner collects the route.
    await kubesim.store.delete("pods", NS, "owner", grace_period_s=0)
    with trio.fail_after(30):
        async with kubesim.store.subscribe() as changes:
            while kubesim.store.get("httproutes", NS, "owned") is not None:
                await changes.receive()
