"""Route health under trio's `MockClock`, on a scripted apiserver (the
client's `httpx.MockTransport` seam): every host `pending` first, read every
2 s until it settles, `unprogrammed` with the hint at the ready timeout, and
a republish cancelling the follow it replaces."""

from __future__ import annotations

from dataclasses import replace

import httpx
import trio
import trio.testing

from runnerd.backend import Limits, SessionIdentity
from runnerd.contract import PortMapping
from runnerd.kube.routehealth import Layer
from runnerd.kube.routes import ROUTE_POLL_S, RouteTarget, open_session_routes
from runnerd.kube.settings import KubeSettings
from tests.kube.test_client_transport import Apiserver, open_mock_client

SID = "abcdefgh2345"
POD = {"metadata": {"name": f"runnerd-{SID}", "uid": "u-1"}}
SETTINGS = KubeSettings(self_url="http://10.0.0.5:8063", routing_base_domain="s.example.test")
IDENTITY = SessionIdentity(SID, Limits("500m", "512Mi", "1Gi", 3600.0))
INGRESS = f"/apis/networking.k8s.io/v1/namespaces/ns/ingresses/runnerd-{SID}"
HOST = f"8080-{SID}.s.example.test"


class Report:
    def __init__(self) -> None:
        self.events: list[tuple[float, int, str, str | None]] = []

    def route(self, host: str, port: int, state: str, reason: str | None = None) -> None:
        self.events.append((trio.current_time(), port, state, reason))

    def notice(self, text: str) -> None:
        raise AssertionError(text)


def ingress(programmed: bool) -> httpx.Response:
    balancer = {"ingress": [{"ip": "203.0.113.7"}]} if programmed else {}
    return httpx.Response(200, json={"status": {"loadBalancer": balancer}})


def apiserver(reads: list[bool]) -> Apiserver:
    """Creates answered 201; the Ingress reads answered from `reads`, then pending."""

    server = Apiserver()
    server.default = lambda: (
        ingress(reads.pop(0) if reads else False)
        if server.seen[-1].method == "GET"
        else httpx.Response(201, json={})
    )
    return server


def gets(server: Apiserver) -> int:
    return sum(1 for r in server.seen if r.method == "GET" and r.url.path == INGRESS)


async def test_a_host_is_pending_until_its_ingress_has_an_address(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, report = apiserver([False, False, True]), Report()
    async with open_mock_client(server) as client:
        target = RouteTarget(client, SETTINGS, Layer.INGRESS, None)
        async with open_session_routes(target, IDENTITY, POD, report, fresh=True) as routes:
            start = trio.current_time()
            await routes.publish((PortMapping(8080, "tcp"),))
            await trio.sleep(60)
    assert [(round(t - start), p, s) for t, p, s, _ in report.events] == [
        (0, 8080, "pending"),
        (round(3 * ROUTE_POLL_S), 8080, "programmed"),
    ]
    assert gets(server) == 3  # settled: no read after that


async def test_the_ready_timeout_reports_unprogrammed_with_the_hint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, report = apiserver([]), Report()
    settings = replace(SETTINGS, route_ready_timeout_s=7.0, ingress_class="nginx")
    async with open_mock_client(server) as client:
        target = RouteTarget(client, settings, Layer.INGRESS, None)
        async with open_session_routes(target, IDENTITY, POD, report, fresh=True) as routes:
            start = trio.current_time()
            await routes.publish((PortMapping(8080, "tcp"),))
            await trio.sleep(60)
    (_, _, _, _), (at, port, state, reason) = report.events
    assert (round(at - start), port, state) == (7, 8080, "unprogrammed")
    assert reason == (
        "not programmed after 7 s: the Ingress has no load balancer address; check that the"
        " ingress controller of IngressClass nginx is running"
    )
    assert gets(server) == 3  # at 2, 4 and 6 s


async def test_a_republish_starts_the_follow_over(autojump_clock: trio.testing.MockClock) -> None:
    server, report = apiserver([]), Report()
    settings = replace(SETTINGS, route_ready_timeout_s=5.0)
    async with open_mock_client(server) as client:
        target = RouteTarget(client, settings, Layer.INGRESS, None)
        async with open_session_routes(target, IDENTITY, POD, report, fresh=True) as routes:
            start = trio.current_time()
            await routes.publish((PortMapping(8080, "tcp"),))
            await trio.sleep(4)
            await routes.publish((PortMapping(8080, "tcp"), PortMapping(9000, "tcp")))
            await trio.sleep(60)
    timeline = [(round(t - start), p, s) for t, p, s, _ in report.events]
    # The first follow never reaches its timeout (at 5 s): the second's runs from 4 s.
    assert timeline == [
        (0, 8080, "pending"),
        (4, 8080, "pending"),
        (4, 9000, "pending"),
        (9, 8080, "unprogrammed"),
        (9, 9000, "unprogrammed"),
    ]


async def test_a_fresh_pod_without_ports_costs_no_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, report = apiserver([]), Report()
    async with open_mock_client(server) as client:
        target = RouteTarget(client, SETTINGS, Layer.INGRESS, None)
        async with open_session_routes(target, IDENTITY, POD, report, fresh=True) as routes:
            published = await routes.publish(())
            assert server.calls() == [] and published.endpoints == ()
            # Once something was published, an empty set removes it.
            await routes.publish((PortMapping(8080, "tcp"),))
            await routes.publish(())
    assert [c.split()[0] for c in server.calls()] == ["POST", "POST", "DELETE", "DELETE"]
