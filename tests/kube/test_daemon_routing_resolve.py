"""How a real daemon resolves its routing layer at start on the test cluster
(issue 21): each mode's outcome, read from the objects a session gets, and
every refusal: exit 2, the cause and the key to set, nothing left bound."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.contract_client import wait_status
from tests.harness import DaemonExited, start_daemon
from tests.kube.daemon import kube_daemon, kube_overrides, start_telo, wait_no_pods
from tests.kube.test_daemon_endpoints import names, wait_store
from tests.kubesim import gateway
from tests.kubesim.server import KubeSim

TIMEOUT_S = 20.0
NS = "runnerd"
DOMAIN = {"routing_base_domain": "sessions.example.test"}
Setup = Callable[[KubeSim], Awaitable[None]]


def ingress_class(name: str, *, default: bool = False) -> Setup:
    async def setup(sim: KubeSim) -> None:
        meta: dict[str, Any] = {"name": name}
        if default:
            meta["annotations"] = {gateway.DEFAULT_CLASS_ANNOTATION: "true"}
        obj = {"metadata": meta, "spec": {"controller": "example.test/ingress"}}
        await sim.store.create("ingressclasses", "", gateway.default_ingressclass(obj))

    return setup


def without_gateway_api(sim: KubeSim) -> Awaitable[None]:
    sim.served[gateway.GROUP] = ()
    return _done()


def only_v1beta1(sim: KubeSim) -> Awaitable[None]:
    sim.served[gateway.GROUP] = ("v1beta1",)
    return _done()


def classes_forbidden(sim: KubeSim) -> Awaitable[None]:
    sim.faults.deny("list", "ingressclasses")
    return _done()


async def _done() -> None:
    pass


@pytest.mark.parametrize(
    ("setups", "keys", "message"),
    [
        (
            [without_gateway_api],
            {"routing": "gateway", "gateway_name": "public"},
            "kubernetes.routing: needs the Gateway API, but the cluster serves no"
            " gateway.networking.k8s.io v1 or v1beta1: install its CRDs, or set routing ="
            ' "ingress"',
        ),
        (
            [without_gateway_api],
            {"gateway_name": "public"},
            "kubernetes.gateway_name: needs the Gateway API, but the cluster serves no"
            " gateway.networking.k8s.io v1 or v1beta1: install its CRDs, or set routing ="
            ' "ingress"',
        ),
        (
            [ingress_class("nginx", default=True)],
            {"gateway_name": "public"},
            'kubernetes.routing: is "auto" and both layers are usable (Gateway public and'
            ' IngressClass nginx): set routing = "gateway" or "ingress"',
        ),
        (
            [],
            {},
            'kubernetes.gateway_name: must be set: routing is "auto", the cluster serves the'
            " Gateway API and has no IngressClass, and no Gateway is named (or set routing ="
            ' "ingress")',
        ),
        (
            [without_gateway_api],
            {},
            'kubernetes.routing: is "auto" but the cluster has no IngressClass and serves no'
            " Gateway API: install an ingress controller or the Gateway API, or set routing ="
            ' "none"',
        ),
        (
            [ingress_class("nginx"), ingress_class("traefik")],
            {},
            'kubernetes.ingress_class: must be set: routing is "auto" and the cluster has'
            " several IngressClasses (nginx, traefik), none of them the default",
        ),
        (
            [classes_forbidden],
            {},
            'kubernetes.routing: is "auto" but the runner may not list IngressClasses: grant'
            " its service account list on ingressclasses (networking.k8s.io), or set routing"
            ' = "ingress" or "gateway"',
        ),
    ],
)
async def test_a_refusal_exits_2_naming_the_key_to_set(
    kubesim: KubeSim, tmp_path: Path, setups: list[Setup], keys: dict[str, Any], message: str
) -> None:
    for setup in setups:
        await setup(kubesim)
    with pytest.raises(DaemonExited) as exited:
        async with kube_daemon(kubesim, tmp_path, **DOMAIN, **keys):
            pass
    assert exited.value.code == 2, exited.value.stderr
    assert f"runnerd cannot start: {message}" in exited.value.stderr, exited.value.stderr
    assert "Traceback" not in exited.value.stderr
    assert not (tmp_path / "runnerd.sock").exists()


@pytest.mark.parametrize(
    ("setups", "keys", "routed"),
    [
        ([], {"gateway_name": "public"}, ("httproutes", "gateway.networking.k8s.io/v1")),
        (
            [only_v1beta1],
            {"routing": "gateway", "gateway_name": "public"},
            ("httproutes", "gateway.networking.k8s.io/v1beta1"),
        ),
        # runnerd names no class; the DefaultIngressClass admission fills the default's.
        ([ingress_class("nginx", default=True)], {}, ("ingresses", "nginx")),
        # The one class there is, not the default: named on the Ingress.
        ([ingress_class("traefik")], {}, ("ingresses", "traefik")),
        ([], {"ingress_class": "nginx"}, ("ingresses", "nginx")),
        ([], {"routing": "none"}, None),
    ],
)
async def test_each_mode_routes_through_the_layer_it_resolved(
    kubesim: KubeSim,
    tmp_path: Path,
    setups: list[Setup],
    keys: dict[str, Any],
    routed: tuple[str, str | None] | None,
) -> None:
    for setup in setups:
        await setup(kubesim)
    async with kube_daemon(kubesim, tmp_path, **DOMAIN, **keys) as daemon:
        async with daemon.client() as client:
            ports = [{"port": 8080, "protocol": "tcp"}]
            sid = await start_telo(client, "print up\nwait\n", ports=ports)
            running = await wait_status(client, sid, "running", timeout_s=TIMEOUT_S)
            host = running["endpoints"][0]["host"]
            if routed is None:
                assert host == "" and not names(kubesim, "services")
            else:
                resource, detail = routed
                assert host == f"8080-{sid}.sessions.example.test"
                name = f"runnerd-{sid}-8080" if resource == "httproutes" else f"runnerd-{sid}"
                await wait_store(kubesim, lambda: name in names(kubesim, resource))
                obj = kubesim.store.get(resource, NS, name)
                assert obj is not None
                other = "ingresses" if resource == "httproutes" else "httproutes"
                assert not names(kubesim, other)
                if resource == "httproutes":
                    assert obj["apiVersion"] == detail
                else:  # the configured class, the one class there is, or the default
                    assert obj["spec"].get("ingressClassName") == detail
            assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
    await wait_no_pods(kubesim)


@pytest.mark.parametrize(
    ("setups", "logged"),
    [
        ([ingress_class("traefik")], "routing: Ingresses (IngressClass traefik)"),
        (
            [ingress_class("nginx", default=True), ingress_class("traefik")],
            "routing: Ingresses (the default IngressClass, nginx)",
        ),
    ],
)
async def test_the_start_log_names_the_class_used(
    kubesim: KubeSim, tmp_path: Path, setups: list[Setup], logged: str
) -> None:
    for setup in setups:
        await setup(kubesim)
    async with kube_daemon(kubesim, tmp_path, **DOMAIN) as daemon:
        assert logged in daemon.stderr_text()


async def test_a_silent_apiserver_ends_the_start_naming_the_kubeconfig(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # routing = "auto" must ask the cluster before listening; one that never
    # answers is no refusal of the rules: after the bounded window the start
    # ends naming what to check (the README's words).
    kubesim.faults.go_silent()
    try:
        overrides = kube_overrides(kubesim, tmp_path, **DOMAIN)
        with trio.fail_after(120), pytest.raises(DaemonExited) as exited:
            async with start_daemon(tmp_path, overrides, ready_timeout_s=90):
                pass
    finally:
        kubesim.faults.resume()
    stderr = exited.value.stderr
    assert exited.value.code == 2, stderr
    assert "asking the apiserver which layer to use (up to 30 s" in stderr
    assert (
        "runnerd cannot start: kubernetes.kubeconfig: the apiserver it names could not be asked"
        " which routing layer to use ("
    ) in stderr, stderr
    assert not (tmp_path / "runnerd.sock").exists()
