"""`routes.publish` again on the same pod (a watch session's port change,
issue 21), against the test apiserver: the Service and routes patched in
place, a dropped port's HTTPRoute deleted, an empty set removing every stale
route and the Service, route health restarting (`pending` again), and a
refused publish reporting the accepted ports `rejected`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from runnerd.backend import Limits, SessionIdentity
from runnerd.contract import PortMapping
from runnerd.kube.routehealth import GatewayRef, Layer
from runnerd.kube.routes import RouteTarget, open_session_routes
from runnerd.kube.settings import KubeSettings
from tests.kube.helpers import open_client
from tests.kubesim.conftest import seed_pod
from tests.kubesim.server import KubeSim

NS = "runnerd"
SID = "abcdefgh2345"
DOMAIN = "w.example.test"
SETTINGS = KubeSettings(self_url="http://10.0.0.5:8063", routing_base_domain=DOMAIN)
GATEWAY = GatewayRef("public", "infra", None, "v1")
IDENTITY = SessionIdentity(SID, Limits("500m", "512Mi", "1Gi", 3600.0))
ROUTE_PATTERN = "/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/httproutes/{name}"
LABELS = {"app.kubernetes.io/managed-by": "runnerd", "runnerd.telo.run/session-id": SID}


class Report:
    def __init__(self) -> None:
        self.routes: list[tuple[str, int, str, str | None]] = []
        self.notices: list[str] = []

    def route(self, host: str, port: int, state: str, reason: str | None = None) -> None:
        self.routes.append((host, port, state, reason))

    def notice(self, text: str) -> None:
        self.notices.append(text)


def tcp(*ports: int) -> tuple[PortMapping, ...]:
    return tuple(PortMapping(p, "tcp") for p in ports)


def route_names(sim: KubeSim) -> list[str]:
    return sorted(o["metadata"]["name"] for o in sim.store.list("httproutes", NS))


def service(sim: KubeSim) -> dict[str, Any] | None:
    return sim.store.get("services", NS, f"runnerd-{SID}")


async def test_a_port_change_republishes_in_place(apiserver: KubeSim, tmp_path: Path) -> None:
    pod = await seed_pod(apiserver, f"runnerd-{SID}", labels=LABELS)
    report = Report()
    async with open_client(apiserver, tmp_path) as client:
        target = RouteTarget(client, SETTINGS, Layer.GATEWAY, GATEWAY)
        async with open_session_routes(target, IDENTITY, pod, report) as routes:
            first = await routes.publish(tcp(8080, 9000))
            assert [e["host"] for e in first.endpoints] == [
                f"8080-{SID}.{DOMAIN}",
                f"9000-{SID}.{DOMAIN}",
            ]
            svc = service(apiserver)
            assert svc is not None
            cluster_ip = svc["spec"]["clusterIP"]
            assert route_names(apiserver) == [f"runnerd-{SID}-8080", f"runnerd-{SID}-9000"]
            kept = apiserver.store.get("httproutes", NS, f"runnerd-{SID}-8080")
            assert kept is not None
            # 9000 goes, 3000 comes: the Service replaced in place (same
            # clusterIP), 9000's route deleted, 8080's untouched.
            second = await routes.publish(tcp(8080, 3000))
            assert [e["port"] for e in second.endpoints] == [8080, 3000] and not second.rejected
            svc = service(apiserver)
            assert svc is not None and svc["spec"]["clusterIP"] == cluster_ip
            assert [p["port"] for p in svc["spec"]["ports"]] == [8080, 3000]
            assert route_names(apiserver) == [f"runnerd-{SID}-3000", f"runnerd-{SID}-8080"]
            again = apiserver.store.get("httproutes", NS, f"runnerd-{SID}-8080")
            assert again is not None
            assert again["metadata"]["resourceVersion"] == kept["metadata"]["resourceVersion"]
            # Health restarted: every host pending again, in the new set.
            assert [(port, state) for _, port, state, _ in report.routes] == [
                (8080, "pending"),
                (9000, "pending"),
                (8080, "pending"),
                (3000, "pending"),
            ]
            # The empty set: nothing stale stays.
            empty = await routes.publish(())
            assert empty.endpoints == () and empty.rejected == ()
            assert route_names(apiserver) == [] and service(apiserver) is None
    assert report.notices == []


async def test_a_refused_publish_rejects_the_ports_it_was_given(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    pod = await seed_pod(apiserver, f"runnerd-{SID}", labels=LABELS)
    apiserver.faults.deny("create", "httproutes")
    report = Report()
    async with open_client(apiserver, tmp_path) as client:
        target = RouteTarget(client, SETTINGS, Layer.GATEWAY, GATEWAY)
        async with open_session_routes(target, IDENTITY, pod, report) as routes:
            published = await routes.publish((*tcp(8080), PortMapping(5353, "udp")))
    reason = (
        "could not create the session's HTTPRoute: the runner is not permitted to do this"
        " (Forbidden, HTTP 403). The cluster operator must check the runner's RBAC."
    )
    assert published.rejected == ((8080, reason),)
    assert [e["host"] for e in published.endpoints] == ["", ""]
    assert report.notices == [f"the session's ports are not published: {reason}"]
    assert report.routes == []  # nothing routed: no health to follow


async def test_a_stale_httproute_is_patched_to_the_current_gateway(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    # A restarted runnerd configured with another listener adopts the pod.
    pod = await seed_pod(apiserver, f"runnerd-{SID}", labels=LABELS)
    moved = GatewayRef("public", "infra", "https", "v1")
    async with open_client(apiserver, tmp_path) as client:
        for gateway in (GATEWAY, moved):
            target = RouteTarget(client, SETTINGS, Layer.GATEWAY, gateway)
            async with open_session_routes(target, IDENTITY, pod, Report()) as routes:
                assert not (await routes.publish(tcp(8080))).rejected
    route = apiserver.store.get("httproutes", NS, f"runnerd-{SID}-8080")
    assert route is not None
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "public",
            "namespace": "infra",
            "sectionName": "https",
        }
    ]
    patches = {key: n for key, n in apiserver.stats.requests.items() if key[0] == "patch"}
    assert patches == {("patch", ROUTE_PATTERN): 1}, apiserver.stats.requests


async def test_an_adopted_pods_stale_routes_are_found_by_their_labels(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    # The previous process published 8080 and 9000; the adopting one knows
    # only the port set it is given, so it lists what the cluster holds.
    pod = await seed_pod(apiserver, f"runnerd-{SID}", labels=LABELS)
    async with open_client(apiserver, tmp_path) as client:
        target = RouteTarget(client, SETTINGS, Layer.GATEWAY, GATEWAY)
        async with open_session_routes(target, IDENTITY, pod, Report(), fresh=True) as routes:
            await routes.publish(tcp(8080, 9000))
        async with open_session_routes(target, IDENTITY, pod, Report()) as routes:
            await routes.publish(tcp(8080))
    assert route_names(apiserver) == [f"runnerd-{SID}-8080"]
    lists = {k: n for k, n in apiserver.stats.requests.items() if k[0] == "list"}
    assert sum(lists.values()) == 1  # the fresh pod's first publish lists nothing


class VerdictReport(Report):
    """A Report whose `verdict` is set by the first state that is not pending."""

    def __init__(self) -> None:
        super().__init__()
        self.verdict = trio.Event()

    def route(self, host: str, port: int, state: str, reason: str | None = None) -> None:
        super().route(host, port, state, reason)
        if state != "pending":
            self.verdict.set()


async def test_status_written_for_the_old_parent_does_not_program_a_moved_route(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    # The controller accepted the route on the old listener; a restarted
    # runnerd attaches it to another: that status says nothing about it.
    pod = await seed_pod(apiserver, f"runnerd-{SID}", labels=LABELS)
    moved = GatewayRef("public", "infra", "https", "v1")
    settings = replace(SETTINGS, route_ready_timeout_s=3.0)
    name = f"runnerd-{SID}-8080"
    report = VerdictReport()
    async with open_client(apiserver, tmp_path) as client:
        target = RouteTarget(client, settings, Layer.GATEWAY, GATEWAY)
        async with open_session_routes(target, IDENTITY, pod, Report()) as routes:
            await routes.publish(tcp(8080))
        accepted = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}
        ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public",
               "namespace": "infra"}  # fmt: skip
        status = {"parents": [{"parentRef": ref, "controllerName": "example.test/gw",
                               "conditions": [accepted]}]}  # fmt: skip
        await apiserver.store.update("httproutes", NS, name, lambda r: r.update(status=status))
        target = RouteTarget(client, settings, Layer.GATEWAY, moved)
        async with open_session_routes(target, IDENTITY, pod, report) as routes:
            await routes.publish(tcp(8080))
            with trio.fail_after(30):
                await report.verdict.wait()
    (_, _, state, reason) = report.routes[1]
    assert state == "unprogrammed", report.routes
    assert reason is not None and reason.startswith("not programmed after 3 s")


async def test_switching_the_layer_removes_the_other_layers_routes(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    # ingress -> gateway -> ingress across restarts (the pod adopted each time):
    # the old layer's objects go, so one layer routes the session.
    pod = await seed_pod(apiserver, f"runnerd-{SID}", labels=LABELS)
    async with open_client(apiserver, tmp_path) as client:
        by_ingress = RouteTarget(client, SETTINGS, Layer.INGRESS, None)
        by_gateway = RouteTarget(client, SETTINGS, Layer.GATEWAY, GATEWAY)
        async with open_session_routes(by_ingress, IDENTITY, pod, Report(), fresh=True) as r:
            assert not (await r.publish(tcp(8080, 9000))).rejected
        assert apiserver.store.get("ingresses", NS, f"runnerd-{SID}") is not None
        report = Report()
        async with open_session_routes(by_gateway, IDENTITY, pod, report) as r:
            assert not (await r.publish(tcp(8080, 9000))).rejected
        assert apiserver.store.get("ingresses", NS, f"runnerd-{SID}") is None
        assert route_names(apiserver) == [f"runnerd-{SID}-8080", f"runnerd-{SID}-9000"]
        async with open_session_routes(by_ingress, IDENTITY, pod, report) as r:
            assert not (await r.publish(tcp(8080))).rejected
        assert route_names(apiserver) == []
        assert apiserver.store.get("ingresses", NS, f"runnerd-{SID}") is not None
    assert report.notices == []
