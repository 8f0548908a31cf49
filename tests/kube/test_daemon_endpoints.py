"""Session endpoints through a real daemon on the test cluster: the Service and
the Ingress a session's ports get, what `running` announces, their collection
with the pod, and a refused create that leaves the session running."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.e2e.contract_client import read_pty, wait_status, wait_terminal
from tests.harness import open_ws
from tests.kube.daemon import kube_daemon, start_telo, wait_no_pods
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0
NS = "runnerd"
DOMAIN = "sessions.example.test"
PORTS = [
    {"port": 8080, "protocol": "tcp"},
    {"port": 9000, "protocol": "tcp"},
    {"port": 5353, "protocol": "udp"},
]
INGRESS_KEYS = {
    "ingress_base_domain": DOMAIN,
    "ingress_class": "nginx",
    "ingress_tls_secret": "wildcard-sessions",
}


async def read_objects(sim: KubeSim, tmp_path: Path, name: str) -> dict[str, Any]:
    """The pod, Service and Ingress `name` as the official client reads them."""
    kubeconfig = sim.write_kubeconfig(tmp_path / "reader-kubeconfig")

    def read() -> dict[str, Any]:
        api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        try:
            core, net = k8s.CoreV1Api(api), k8s.NetworkingV1Api(api)
            objects = {
                "pod": core.read_namespaced_pod(name, NS),
                "service": core.read_namespaced_service(name, NS),
                "ingress": net.read_namespaced_ingress(name, NS),
            }
            return {k: api.sanitize_for_serialization(v) for k, v in objects.items()}
        finally:
            api.close()

    with trio.fail_after(TIMEOUT_S):
        return await trio.to_thread.run_sync(read)


def names(sim: KubeSim, resource: str) -> set[str]:
    return {o["metadata"]["name"] for o in sim.store.list(resource, NS)}


async def wait_store(sim: KubeSim, done: Callable[[], bool]) -> None:
    with trio.fail_after(TIMEOUT_S):
        async with sim.store.subscribe() as changes:
            while not done():
                await changes.receive()


def expected_endpoints(session_id: str) -> list[dict[str, Any]]:
    hosts = [f"8080-{session_id}.{DOMAIN}", f"9000-{session_id}.{DOMAIN}"]
    return [
        {"host": hosts[0], "port": 8080, "protocol": "tcp", "url": f"https://{hosts[0]}"},
        {"host": hosts[1], "port": 9000, "protocol": "tcp", "url": f"https://{hosts[1]}"},
        {"host": "", "port": 5353, "protocol": "udp"},
    ]


def check_objects(objects: dict[str, Any], session_id: str) -> None:
    pod, service, ingress = objects["pod"], objects["service"], objects["ingress"]
    owner = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    for obj in (service, ingress):
        assert obj["metadata"]["ownerReferences"] == owner
        assert obj["metadata"]["labels"]["runnerd.telo.run/session-id"] == session_id
    # The selector picks exactly this pod (by its labels), every port on it.
    selector = service["spec"]["selector"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert selector["runnerd.telo.run/session-id"] == session_id
    assert [(p["port"], p["protocol"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        (8080, "TCP", 8080),
        (9000, "TCP", 9000),
        (5353, "UDP", 5353),
    ]
    hosts = [f"8080-{session_id}.{DOMAIN}", f"9000-{session_id}.{DOMAIN}"]
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"hosts": hosts, "secretName": "wildcard-sessions"}]
    routes = [(r["host"], r["http"]["paths"][0]["backend"]["service"]) for r in spec["rules"]]
    assert routes == [
        (hosts[0], {"name": service["metadata"]["name"], "port": {"number": 8080}}),
        (hosts[1], {"name": service["metadata"]["name"], "port": {"number": 9000}}),
    ]


async def test_ports_get_a_service_and_an_ingress_that_go_with_the_pod(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path, **INGRESS_KEYS) as daemon, daemon.client() as client:
        deleted = await start_telo(client, "print up\nwait\n", ports=PORTS)
        exits = await start_telo(client, "print ready\necho got:\n", ports=PORTS)
        for session_id in (deleted, exits):
            running = await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
            assert running["endpoints"] == expected_endpoints(session_id)
            got = (await client.get(f"/v1/sessions/{session_id}")).json()
            assert got["status"]["endpoints"] == expected_endpoints(session_id)
            check_objects(
                await read_objects(kubesim, tmp_path, f"runnerd-{session_id}"), session_id
            )
        # Deleted: both objects go with the pod.
        assert (await client.delete(f"/v1/sessions/{deleted}")).status_code == 204
        await wait_store(
            kubesim,
            lambda: (
                f"runnerd-{deleted}" not in names(kubesim, "services") | names(kubesim, "ingresses")
            ),
        )
        assert {f"runnerd-{exits}"} == names(kubesim, "services") == names(kubesim, "ingresses")
        # Ended on its own: the same.
        async with open_ws(daemon.socket_path, f"/v1/sessions/{exits}/io") as ws:
            await read_pty(ws, until=b"ready", timeout_s=TIMEOUT_S)
            await ws.send_message(b"quit\n")
        assert await wait_terminal(client, exits, timeout_s=TIMEOUT_S) == {
            "kind": "exited",
            "code": 0,
        }
        await wait_store(
            kubesim, lambda: not names(kubesim, "services") and not names(kubesim, "ingresses")
        )
        await wait_no_pods(kubesim)


async def test_a_refused_ingress_is_a_line_in_the_terminal_and_the_session_runs(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    kubesim.faults.deny("create", "ingresses")
    async with kube_daemon(kubesim, tmp_path, **INGRESS_KEYS) as daemon, daemon.client() as client:
        session_id = await start_telo(client, "print up\necho got:\n", ports=PORTS)
        running = await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert running["endpoints"] == [
            {"host": "", "port": p["port"], "protocol": p["protocol"]} for p in PORTS
        ]
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as ws:
            transcript = await read_pty(ws, until=b"up", timeout_s=TIMEOUT_S)
            # Still a live session: it answers its input.
            await ws.send_message(b"ping\n")
            await read_pty(ws, transcript, until=b"got:ping", timeout_s=TIMEOUT_S)
        output = transcript.output.decode()
        assert (
            "[runnerd: the session's ports are not published: could not create the"
            " session's Ingress: the runner is not permitted to do this (Forbidden,"
            " HTTP 403). The cluster operator must check the runner's RBAC.]"
        ) in output
        assert "system:serviceaccount" not in output and "is forbidden" not in output
        assert not names(kubesim, "ingresses")
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
        await wait_store(kubesim, lambda: not names(kubesim, "services"))
        await wait_no_pods(kubesim)


async def test_an_adopted_session_announces_its_endpoints_again(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path, **INGRESS_KEYS) as first, first.client() as client:
        session_id = await start_telo(client, "print up\nwait\n", ports=PORTS)
        await wait_status(client, session_id, "running", timeout_s=TIMEOUT_S)
        assert await first.stop(signal.SIGUSR2) == 75
    # While no runnerd runs, someone deletes the Ingress.
    kubesim.store.remove_nowait("ingresses", NS, f"runnerd-{session_id}")
    async with kube_daemon(kubesim, tmp_path, **INGRESS_KEYS) as second, second.client() as client:
        await wait_store(kubesim, lambda: f"runnerd-{session_id}" in names(kubesim, "ingresses"))
        with trio.fail_after(TIMEOUT_S):  # announced once the whole publish has landed
            while True:
                got = (await client.get(f"/v1/sessions/{session_id}")).json()
                if "endpoints" in got["status"]:
                    break
                await trio.sleep(0.05)
        assert got["status"]["kind"] == "running"
        assert got["status"]["endpoints"] == expected_endpoints(session_id)
        check_objects(await read_objects(kubesim, tmp_path, f"runnerd-{session_id}"), session_id)
    await wait_no_pods(kubesim)
