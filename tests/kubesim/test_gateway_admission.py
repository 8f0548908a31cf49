"""What the test apiserver does on create and update of Ingresses, Gateways,
HTTPRoutes and pods as a real one does (issue 21 review): the status sent on
create dropped (a status subresource), `metadata.generation` 1 on create and
bumped by spec changes only, the Gateway's v1 CRD status default, and the
DefaultIngressClass admission plugin naming the default class on a
class-less Ingress create. Over HTTP, as any client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tests.kubesim import gateway
from tests.kubesim.conftest import build_pod
from tests.kubesim.server import KubeSim
from tests.kubesim.test_gateway import GROUP, NS, route_manifest

ROUTES = f"/apis/{GROUP}/v1/namespaces/{NS}/httproutes"
GATEWAYS = f"/apis/{GROUP}/v1/namespaces/{NS}/gateways"
INGRESSES = f"/apis/networking.k8s.io/v1/namespaces/{NS}/ingresses"
MERGE = {"Content-Type": "application/merge-patch+json"}


@asynccontextmanager
async def http_to(sim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=sim.url,
        verify=sim.client_ssl_context(),
        headers={"Authorization": f"Bearer {sim.token}"},
    ) as http:
        yield http


def ingress(name: str, cls: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "rules": [
            {
                "host": "a.example.test",
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": "web", "port": {"number": 80}}},
                        }
                    ]
                },
            }
        ]
    }
    if cls is not None:
        spec["ingressClassName"] = cls
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


async def add_class(sim: KubeSim, name: str, *, default: bool, created: str) -> None:
    meta: dict[str, Any] = {"name": name}
    if default:
        meta["annotations"] = {gateway.DEFAULT_CLASS_ANNOTATION: "true"}
    obj = {"metadata": meta, "spec": {"controller": "example.test/ingress"}}
    await sim.store.create("ingressclasses", "", gateway.default_ingressclass(obj))
    await sim.store.update(
        "ingressclasses", "", name, lambda c: c["metadata"].update(creationTimestamp=created)
    )


async def test_create_drops_the_status_sent_and_sets_generation_one(apiserver: KubeSim) -> None:
    claimed = {"parents": [{"parentRef": {"name": "public"}, "controllerName": "x/y",
                            "conditions": [{"type": "Accepted", "status": "True"}]}]}  # fmt: skip
    lb = {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}
    gw = {"apiVersion": f"{GROUP}/v1", "kind": "Gateway", "metadata": {"name": "public"},
          "spec": {"gatewayClassName": "example", "listeners": [{"name": "https", "port": 443}]},
          "status": {"conditions": [{"type": "Programmed", "status": "True"}]}}  # fmt: skip
    async with http_to(apiserver) as http:
        route = (await http.post(ROUTES, json={**route_manifest("r"), "status": claimed})).json()
        ing = (await http.post(INGRESSES, json={**ingress("i", "nginx"), "status": lb})).json()
        made = (await http.post(GATEWAYS, json=gw)).json()
        pod = (await http.post(f"/api/v1/namespaces/{NS}/pods", json=build_pod("p"))).json()
    assert route["status"] == {"parents": []}
    assert ing["status"] == {"loadBalancer": {}}
    assert [(c["type"], c["status"], c["reason"]) for c in made["status"]["conditions"]] == [
        ("Accepted", "Unknown", "Pending"),
        ("Programmed", "Unknown", "Pending"),
    ]
    for obj in (route, ing, made, pod):
        assert obj["metadata"]["generation"] == 1, obj["kind"]


async def test_generation_follows_spec_changes_only(apiserver: KubeSim) -> None:
    async with http_to(apiserver) as http:
        assert (await http.post(ROUTES, json=route_manifest("r"))).status_code == 201
        labelled = await http.patch(
            f"{ROUTES}/r", headers=MERGE, json={"metadata": {"labels": {"a": "b"}}}
        )
        assert labelled.json()["metadata"]["generation"] == 1
        status = await http.patch(
            f"{ROUTES}/r/status", headers=MERGE, json={"status": {"parents": []}}
        )
        assert status.json()["metadata"]["generation"] == 1
        moved = await http.patch(
            f"{ROUTES}/r", headers=MERGE, json={"spec": {"hostnames": ["b.example.test"]}}
        )
        assert moved.json()["metadata"]["generation"] == 2
        # A PUT claiming another generation does not set it.
        current = moved.json()
        current["metadata"]["generation"] = 9
        put = await http.put(f"{ROUTES}/r", json=current)
        assert put.json()["metadata"]["generation"] == 2
        # Status sent with a main-resource write is ignored.
        kept = await http.patch(
            f"{ROUTES}/r", headers=MERGE, json={"status": {"parents": [{"parentRef": {}}]}}
        )
        assert kept.json()["status"] == {"parents": []}


async def test_a_class_less_ingress_gets_the_default_class_on_create(apiserver: KubeSim) -> None:
    async with http_to(apiserver) as http:
        none = (await http.post(INGRESSES, json=ingress("before"))).json()
        assert "ingressClassName" not in none["spec"]  # no default class: left unset
        await add_class(apiserver, "plain", default=False, created="2026-01-01T00:00:00Z")
        await add_class(apiserver, "nginx", default=True, created="2026-01-01T00:00:00Z")
        got = (await http.post(INGRESSES, json=ingress("after"))).json()
        assert got["spec"]["ingressClassName"] == "nginx"
        named = (await http.post(INGRESSES, json=ingress("named", "plain"))).json()
        assert named["spec"]["ingressClassName"] == "plain"
        # Create only: an update leaving it out keeps it out.
        body = {**none, "spec": {k: v for k, v in none["spec"].items()}}
        updated = (await http.put(f"{INGRESSES}/before", json=body)).json()
        assert "ingressClassName" not in updated["spec"]
        # Two defaults: the newest is chosen (current releases).
        await add_class(apiserver, "traefik", default=True, created="2026-06-01T00:00:00Z")
        newest = (await http.post(INGRESSES, json=ingress("newest"))).json()
        assert newest["spec"]["ingressClassName"] == "traefik"
