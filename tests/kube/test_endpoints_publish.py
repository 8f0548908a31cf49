"""A session's routes published against the test apiserver: idempotent for a
pod that already has its objects (a re-adopted session), bringing stale ones
up to date, and leaving a same-named object that is not the session's alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from runnerd.backend import Limits, SessionIdentity
from runnerd.contract import PortMapping, RunnerEndpoint
from runnerd.kube.client import KubeClient, Retry
from runnerd.kube.routehealth import Layer
from runnerd.kube.routes import RouteTarget, open_session_routes
from runnerd.kube.settings import KubeSettings
from tests.kube.helpers import open_client
from tests.kubesim.conftest import seed_pod
from tests.kubesim.server import KubeSim

NS = "runnerd"
SID = "abcdefgh2345"
SETTINGS = KubeSettings(
    self_url="http://10.0.0.5:8063", routing_base_domain="a.example.test", ingress_class="nginx"
)
IDENTITY = SessionIdentity(
    SID,
    Limits("500m", "512Mi", "1Gi", 3600.0),
    ports=(PortMapping(8080, "tcp"), PortMapping(5353, "udp")),
)
LABELS = {"app.kubernetes.io/managed-by": "runnerd", "runnerd.telo.run/session-id": SID}


class Report:
    def __init__(self) -> None:
        self.notices: list[str] = []

    def route(self, host: str, port: int, state: str, reason: str | None = None) -> None:
        pass

    def notice(self, text: str) -> None:
        self.notices.append(text)


async def publish_endpoints(
    client: KubeClient,
    settings: KubeSettings,
    identity: SessionIdentity,
    pod: dict[str, Any],
    report: Report,
) -> tuple[RunnerEndpoint, ...]:
    target = RouteTarget(client, settings, Layer.INGRESS, None)
    async with open_session_routes(target, identity, pod, report) as routes:
        return (await routes.publish(identity.ports)).endpoints


def stored(sim: KubeSim, resource: str) -> dict[str, Any]:
    obj = sim.store.get(resource, NS, f"runnerd-{SID}")
    assert obj is not None
    return obj


async def test_a_second_call_keeps_current_objects_and_updates_stale_ones(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    pod = await seed_pod(apiserver, f"runnerd-{SID}", labels=LABELS)
    sink = Report()
    async with open_client(apiserver, tmp_path) as client:
        first = await publish_endpoints(client, SETTINGS, IDENTITY, pod, sink)
        assert first[0]["host"] == f"8080-{SID}.a.example.test"
        versions = [
            stored(apiserver, r)["metadata"]["resourceVersion"] for r in ("services", "ingresses")
        ]
        # Called again for the same pod (a restarted daemon adopting it): no write.
        assert await publish_endpoints(client, SETTINGS, IDENTITY, pod, sink) == first
        assert versions == [
            stored(apiserver, r)["metadata"]["resourceVersion"] for r in ("services", "ingresses")
        ]
        # Restarted with another domain and class: the Ingress is brought up to date.
        moved = replace(SETTINGS, routing_base_domain="b.example.test", ingress_class="traefik")
        again = await publish_endpoints(client, moved, IDENTITY, pod, sink)
    assert again[0] == {
        "host": f"8080-{SID}.b.example.test",
        "port": 8080,
        "protocol": "tcp",
        "url": f"https://8080-{SID}.b.example.test",
    }
    ingress = stored(apiserver, "ingresses")
    assert ingress["spec"]["ingressClassName"] == "traefik"
    assert [r["host"] for r in ingress["spec"]["rules"]] == [f"8080-{SID}.b.example.test"]
    assert ingress["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert sink.notices == []


async def test_a_same_named_service_that_is_not_ours_is_left_alone(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    pod = await seed_pod(apiserver, f"runnerd-{SID}", labels=LABELS)
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"runnerd-{SID}", "labels": {"team": "web"}},
        "spec": {"selector": {"team": "web"}, "ports": [{"port": 80}]},
    }
    sink = Report()
    async with open_client(apiserver, tmp_path) as client:
        await client.request(
            "POST",
            f"/api/v1/namespaces/{NS}/services",
            operation="seed",
            retry=Retry.WRITE,
            body=foreign,
        )
        got = await publish_endpoints(client, SETTINGS, IDENTITY, pod, sink)
    assert got == (
        {"host": "", "port": 8080, "protocol": "tcp"},
        {"host": "", "port": 5353, "protocol": "udp"},
    )
    assert sink.notices == [
        "the session's ports are not published: could not create the session's"
        " Service: the Kubernetes API rejected the request (AlreadyExists, HTTP 409)"
    ]
    assert stored(apiserver, "services")["metadata"]["labels"] == {"team": "web"}
    assert apiserver.store.get("ingresses", NS, f"runnerd-{SID}") is None
