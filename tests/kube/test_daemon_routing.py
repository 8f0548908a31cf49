"""Session routing through a real daemon on the test cluster (issue 21):
HTTPRoutes read back with kubectl and the official client, `route` verdicts
following `kubectl patch --subresource=status`, an Ingress programmed once
its load balancer status appears, the ready timeout's hint, and the routes
gone with the pod."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.e2e.contract_client import wait_status
from tests.harness import SseFrame
from tests.kube.daemon import kube_daemon, resume_sse, start_telo, wait_no_pods
from tests.kube.test_daemon_endpoints import names, wait_store
from tests.kubesim import gateway
from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_kubectl import kubectl

TIMEOUT_S = 20.0
NS = "runnerd"
DOMAIN = "sessions.example.test"
GROUP = "gateway.networking.k8s.io"
PORTS = [
    {"port": 8080, "protocol": "tcp"},
    {"port": 9000, "protocol": "tcp"},
    {"port": 5353, "protocol": "udp"},
]
GATEWAY_KEYS = {
    "routing": "gateway",
    "routing_base_domain": DOMAIN,
    "gateway_name": "public",
    "gateway_namespace": "infra",
    "gateway_section": "https",
}


def routes_of(frames: list[SseFrame]) -> list[dict[str, Any]]:
    return [f.data for f in frames if f.event == "route"]


async def route_events(
    client: httpx.AsyncClient, session_id: str, count: int
) -> list[dict[str, Any]]:
    """The session's first `count` route events (the stream replayed from 0)."""
    frames = await resume_sse(
        client, session_id, 0, lambda fs: len(routes_of(fs)) >= count, timeout_s=TIMEOUT_S
    )
    return routes_of(frames)


async def patch_status(sim: KubeSim, tmp_path: Path, kind: str, name: str, status: Any) -> None:
    """What a controller does: write the object's status subresource (kubectl)."""
    done = await kubectl(
        sim, tmp_path, "patch", kind, name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def parent_status(accepted: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "parents": [
            {
                "parentRef": {"name": "public", "namespace": "infra", "sectionName": "https"},
                "controllerName": "example.test/gateway-controller",
                "conditions": [
                    {"type": "Accepted", "status": accepted, "reason": reason,
                     "message": message, "lastTransitionTime": "2026-12-01T00:00:00Z"},
                    {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs",
                     "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"},
                ],
            }
        ]
    }  # fmt: skip


async def read_routes(sim: KubeSim, tmp_path: Path, session_id: str) -> list[dict[str, Any]]:
    """The session's HTTPRoutes as the official client lists them (CustomObjectsApi)."""
    kubeconfig = sim.write_kubeconfig(tmp_path / "reader-kubeconfig")
    selector = f"runnerd.telo.run/session-id={session_id}"

    def read() -> list[dict[str, Any]]:
        api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        try:
            listing = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
                GROUP, "v1", NS, "httproutes", label_selector=selector
            )
            return list(listing["items"])
        finally:
            api.close()

    with trio.fail_after(TIMEOUT_S):
        return await trio.to_thread.run_sync(read)


def expected_route(session_id: str, port: int, pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "parentRefs": [
            {"group": GROUP, "kind": "Gateway", "name": "public", "namespace": "infra",
             "sectionName": "https"}
        ],
        "hostnames": [f"{port}-{session_id}.{DOMAIN}"],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [
                    {"group": "", "kind": "Service", "name": f"runnerd-{session_id}",
                     "port": port, "weight": 1}
                ],
            }
        ],
    }  # fmt: skip


async def test_gateway_routes_follow_their_status_and_go_with_the_pod(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path, **GATEWAY_KEYS) as daemon, daemon.client() as client:
        sid = await start_telo(client, "print up\nwait\n", ports=PORTS)
        running = await wait_status(client, sid, "running", timeout_s=TIMEOUT_S)
        hosts = {8080: f"8080-{sid}.{DOMAIN}", 9000: f"9000-{sid}.{DOMAIN}"}
        assert [e["host"] for e in running["endpoints"]] == [hosts[8080], hosts[9000], ""]
        # Each host pending first; udp has no route.
        assert await route_events(client, sid, 2) == [
            {"type": "route", "host": hosts[8080], "port": 8080, "state": "pending"},
            {"type": "route", "host": hosts[9000], "port": 9000, "state": "pending"},
        ]
        # Read back: one HTTPRoute per tcp port, owned by the pod.
        pod = kubesim.store.get("pods", NS, f"runnerd-{sid}")
        assert pod is not None
        routes = sorted(
            await read_routes(kubesim, tmp_path, sid), key=lambda r: r["metadata"]["name"]
        )
        assert [r["metadata"]["name"] for r in routes] == [
            f"runnerd-{sid}-8080",
            f"runnerd-{sid}-9000",
        ]
        for route, port in zip(routes, (8080, 9000), strict=True):
            assert route["spec"] == expected_route(sid, port, pod)
            (owner,) = route["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])
        listed = await kubectl(kubesim, tmp_path, "get", "httproutes", "-o", "name")
        assert listed.stdout.decode().split() == [
            f"httproute.gateway.networking.k8s.io/runnerd-{sid}-8080",
            f"httproute.gateway.networking.k8s.io/runnerd-{sid}-9000",
        ]
        # The controller accepts one and refuses the other.
        await patch_status(
            kubesim, tmp_path, "httproute", f"runnerd-{sid}-8080",
            parent_status("True", "Accepted", "Route is accepted"),
        )  # fmt: skip
        await patch_status(
            kubesim, tmp_path, "httproute", f"runnerd-{sid}-9000",
            parent_status("False", "NotAllowedByListeners", "no listener allows this route"),
        )  # fmt: skip
        verdicts = (await route_events(client, sid, 4))[2:]
        assert sorted(verdicts, key=lambda e: e["port"]) == [
            {"type": "route", "host": hosts[8080], "port": 8080, "state": "programmed"},
            {"type": "route", "host": hosts[9000], "port": 9000, "state": "unprogrammed",
             "reason": "NotAllowedByListeners: no listener allows this route"},
        ]  # fmt: skip
        # Still a live session: routing never fails it.
        got = (await client.get(f"/v1/sessions/{sid}")).json()
        assert got["status"]["kind"] == "running"
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
        await wait_store(kubesim, lambda: not names(kubesim, "httproutes"))
        assert not names(kubesim, "services")
    await wait_no_pods(kubesim)


async def test_an_ingress_is_programmed_by_its_load_balancer_status(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    keys = {"routing": "ingress", "routing_base_domain": DOMAIN}
    async with kube_daemon(kubesim, tmp_path, **keys) as daemon, daemon.client() as client:
        sid = await start_telo(client, "print up\nwait\n", ports=PORTS)
        await wait_status(client, sid, "running", timeout_s=TIMEOUT_S)
        assert [e["state"] for e in await route_events(client, sid, 2)] == ["pending"] * 2
        balancer = {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
        await patch_status(kubesim, tmp_path, "ingress", f"runnerd-{sid}", balancer)
        verdicts = (await route_events(client, sid, 4))[2:]
        assert sorted((e["port"], e["state"]) for e in verdicts) == [
            (8080, "programmed"),
            (9000, "programmed"),
        ]
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
        await wait_store(kubesim, lambda: not names(kubesim, "ingresses"))
    await wait_no_pods(kubesim)


GATEWAY = {
    "apiVersion": f"{GROUP}/v1",
    "kind": "Gateway",
    "metadata": {"name": "public", "namespace": "infra"},
    "spec": {"gatewayClassName": "example", "listeners": [{"name": "https", "port": 443}]},
}


GENERAL_HINT = (
    "no parent accepted the HTTPRoute; check that Gateway infra/public listener https"
    " exists, its controller is running, and it allows routes from the session namespace"
)


@pytest.mark.parametrize(
    ("exists", "readable", "hint"),
    [
        (True, True, GENERAL_HINT),
        (
            False,
            True,
            "Gateway infra/public does not exist (kubernetes.gateway_name, gateway_namespace)",
        ),
        # No `get` on gateways in its namespace: a 403 says nothing about it.
        (False, False, GENERAL_HINT),
    ],
)
async def test_a_route_never_programmed_is_reported_with_the_layers_hint(
    kubesim: KubeSim, tmp_path: Path, exists: bool, readable: bool, hint: str
) -> None:
    if not readable:
        kubesim.faults.deny("get", "gateways", namespace="infra")
    if exists:
        await kubesim.store.create("gateways", "infra", gateway.default_gateway(dict(GATEWAY)))
    keys = {**GATEWAY_KEYS, "route_ready_timeout_seconds": 1}
    async with kube_daemon(kubesim, tmp_path, **keys) as daemon, daemon.client() as client:
        sid = await start_telo(client, "print up\nwait\n", ports=PORTS[:1])
        events = await route_events(client, sid, 2)
        assert events[1] == {
            "type": "route",
            "host": f"8080-{sid}.{DOMAIN}",
            "port": 8080,
            "state": "unprogrammed",
            "reason": f"not programmed after 1 s: {hint}",
        }
        got = (await client.get(f"/v1/sessions/{sid}")).json()
        assert got["status"]["kind"] == "running"
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
    await wait_no_pods(kubesim)


INGRESS_KEYS = {"routing": "ingress", "routing_base_domain": DOMAIN, "ingress_class": "nginx"}


async def test_switching_the_layer_across_a_restart_leaves_one_layer_routing(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # Restarted with the other layer (the pod adopted): the old layer's
    # objects are deleted, so no stale route keeps serving the session.
    async with kube_daemon(kubesim, tmp_path, **INGRESS_KEYS) as first, first.client() as client:
        sid = await start_telo(client, "print up\nwait\n", ports=PORTS[:2])
        await wait_status(client, sid, "running", timeout_s=TIMEOUT_S)
        assert names(kubesim, "ingresses") == {f"runnerd-{sid}"}
        assert await first.stop(signal.SIGUSR2) == 75  # leaves the pod running
    routes = {f"runnerd-{sid}-8080", f"runnerd-{sid}-9000"}
    async with kube_daemon(kubesim, tmp_path, **GATEWAY_KEYS) as second:
        await wait_store(
            kubesim, lambda: not names(kubesim, "ingresses") and names(kubesim, "httproutes")
        )
        await wait_store(kubesim, lambda: names(kubesim, "httproutes") == routes)
        assert await second.stop(signal.SIGUSR2) == 75
    async with kube_daemon(kubesim, tmp_path, **INGRESS_KEYS) as third, third.client() as client:
        await wait_store(
            kubesim, lambda: names(kubesim, "ingresses") and not names(kubesim, "httproutes")
        )
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
    await wait_no_pods(kubesim)


async def test_the_class_the_cluster_filled_in_is_not_drift(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # A default IngressClass: the DefaultIngressClass admission names it on
    # the class-less Ingress runnerd creates; a restart must not PUT it away.
    cls = {"metadata": {"name": "nginx", "annotations": {gateway.DEFAULT_CLASS_ANNOTATION: "true"}},
           "spec": {"controller": "example.test/ingress"}}  # fmt: skip
    await kubesim.store.create("ingressclasses", "", gateway.default_ingressclass(cls))
    keys = {"routing": "ingress", "routing_base_domain": DOMAIN}
    async with kube_daemon(kubesim, tmp_path, **keys) as first, first.client() as client:
        sid = await start_telo(client, "print up\nwait\n", ports=PORTS[:1])
        await wait_status(client, sid, "running", timeout_s=TIMEOUT_S)
        stored = kubesim.store.get("ingresses", NS, f"runnerd-{sid}")
        assert stored is not None and stored["spec"]["ingressClassName"] == "nginx"
        assert await first.stop(signal.SIGUSR2) == 75
    async with kube_daemon(kubesim, tmp_path, **keys) as second, second.client() as client:
        with trio.fail_after(TIMEOUT_S):  # republished once `running` announces endpoints
            while True:
                got = (await client.get(f"/v1/sessions/{sid}")).json()
                if "endpoints" in got["status"]:
                    break
                await trio.sleep(0.05)
        writes = {k: n for k, n in kubesim.stats.requests.items() if k[0] in ("update", "patch")}
        assert not [k for k in writes if "ingresses" in k[1]], writes
        again = kubesim.store.get("ingresses", NS, f"runnerd-{sid}")
        assert again is not None and again["spec"]["ingressClassName"] == "nginx"
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
    await wait_no_pods(kubesim)
