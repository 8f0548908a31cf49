"""runnerd.kube.client against the test cluster over TLS: keep-alive, the retry
policy under injected 429/500/503 bursts, a silent apiserver, an apiserver down
for 3 s, 401 re-authentication, classified RBAC/quota refusals, idempotent
creates, and a session pod built by podspec that really runs."""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from runnerd.backend import BundleSpec, Exited, ImageSpec, Limits, RunSpec
from runnerd.kube import errors
from runnerd.kube.attach import run_attach
from runnerd.kube.bundle import BundleTokens, build_bundle_archive
from runnerd.kube.client import open_kube_client
from runnerd.kube.credentials import Credentials
from runnerd.kube.kubeconfig import load_connection
from runnerd.kube.podspec import (
    START_LINE,
    build_session_pod,
    is_ours,
    managed_by_selector,
    pod_name,
)
from runnerd.kube.podstatus import terminal_outcome
from runnerd.kube.policy import kube_verb
from runnerd.kube.settings import KubeSettings
from tests.kube.helpers import FAST, open_client, serve_bundles
from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim

SETTINGS = KubeSettings()
OP = "could not create the session pod"
LABELS = {"app.kubernetes.io/managed-by": "runnerd", "runnerd.telo.run/session-id": "s1"}


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels if labels is not None else LABELS},
        "spec": {"containers": [{"name": "session", "image": "busybox:1.36"}]},
    }


def ours(p: Any) -> bool:
    return is_ours(p, SETTINGS, "s1")


async def test_requests_reuse_one_keepalive_connection(apiserver: KubeSim, tmp_path: Path) -> None:
    async with open_client(apiserver, tmp_path) as client:
        before = apiserver.stats.tls_handshakes
        for i in range(10):
            await client.create_pod(pod(f"p{i}"), operation=OP, is_ours=ours)
            assert (await client.get_pod(f"p{i}", operation="read")) is not None
        items, rv = await client.list_pods(
            label_selector=managed_by_selector(SETTINGS), operation="list"
        )
        assert len(items) == 10 and rv
        for i in range(10):
            assert await client.delete_pod(f"p{i}", operation="delete", grace_period_s=0)
        assert not await client.delete_pod("p0", operation="delete")  # gone: not an error
        assert await client.get_pod("p0", operation="read") is None
        assert apiserver.stats.tls_handshakes - before == 1


async def test_read_honours_retry_after_of_a_429(apiserver: KubeSim, tmp_path: Path) -> None:
    policy = replace(FAST, retry_after_cap_s=10.0)
    async with open_client(apiserver, tmp_path, policy) as client:
        apiserver.faults.fail_next(1, 429, retry_after_s=1)
        started = trio.current_time()
        await client.list_pods(label_selector="a=b", operation="list")
        assert trio.current_time() - started >= 1.0
        assert apiserver.stats.responses[429] == 1


@pytest.mark.parametrize("code", [429, 500, 503])
async def test_reads_ride_out_a_burst(apiserver: KubeSim, tmp_path: Path, code: int) -> None:
    async with open_client(apiserver, tmp_path) as client:
        apiserver.faults.fail_next(5, code, retry_after_s=None)
        items, _ = await client.list_pods(label_selector="a=b", operation="list")
        assert items == []
        assert apiserver.stats.responses[code] == 5
        assert apiserver.stats.responses[200] >= 1


async def test_a_write_is_retried_only_when_the_server_said_retry_after(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    async with open_client(apiserver, tmp_path) as client:
        apiserver.faults.fail_next(1, 500, retry_after_s=None, verb="create")
        with pytest.raises(errors.ServerError) as caught:
            await client.create_pod(pod("w1"), operation=OP, is_ours=ours)
        assert str(caught.value) == (
            f"{OP}: the Kubernetes API rejected the request (InternalError, HTTP 500)"
        )
        assert apiserver.store.get("pods", "runnerd", "w1") is None
        assert apiserver.stats.count("create", "/api/v1/namespaces/{namespace}/pods") == 1
        apiserver.faults.fail_next(2, 503, retry_after_s=1, verb="create")
        apiserver.faults.fail_next(1, 429, verb="create")
        created = await client.create_pod(pod("w1"), operation=OP, is_ours=ours)
        assert created["metadata"]["name"] == "w1"
        assert apiserver.stats.count("create", "/api/v1/namespaces/{namespace}/pods") == 5


async def test_a_delete_is_idempotent_and_rides_out_a_burst(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    async with open_client(apiserver, tmp_path) as client:
        await client.create_pod(pod("d1"), operation=OP, is_ours=ours)
        apiserver.faults.fail_next(3, 500, retry_after_s=None, verb="delete")
        assert await client.delete_pod("d1", operation="delete", grace_period_s=0)
        assert apiserver.store.get("pods", "runnerd", "d1") is None
        assert apiserver.stats.count("delete", "/api/v1/namespaces/{namespace}/pods/{name}") == 4


async def test_create_that_landed_is_success_only_if_ours(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    async with open_client(apiserver, tmp_path) as client:
        first = await client.create_pod(pod("c1"), operation=OP, is_ours=ours)
        again = await client.create_pod(pod("c1"), operation=OP, is_ours=ours)
        assert again["metadata"]["uid"] == first["metadata"]["uid"]
        await client.create_pod(pod("c2", labels={"other": "x"}), operation=OP, is_ours=ours)
        with pytest.raises(errors.AlreadyExists) as caught:
            await client.create_pod(pod("c2"), operation=OP, is_ours=ours)
        assert str(caught.value).endswith("(AlreadyExists, HTTP 409)")


async def test_rbac_and_quota_refusals_are_classified_and_client_safe(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    async with open_client(apiserver, tmp_path) as client:
        apiserver.faults.deny("create", "pods")
        with pytest.raises(errors.Forbidden) as rbac:
            await client.create_pod(pod("r1"), operation=OP, is_ours=ours)
        assert str(rbac.value) == (
            f"{OP}: the runner is not permitted to do this (Forbidden, HTTP 403). "
            "The cluster operator must check the runner's RBAC."
        )
        assert apiserver.user in str(rbac.value.__cause__)  # the log keeps the detail
        apiserver.faults.allow("create", "pods")
        await apiserver.faults.set_quota("runnerd", "compute", {"pods": "0"})
        with pytest.raises(errors.Forbidden) as quota:
            await client.create_pod(pod("q1"), operation=OP, is_ours=ours)
        assert str(quota.value) == (
            f"{OP}: the session namespace's resource quota is exhausted (Forbidden, HTTP 403)"
        )
        for err in (rbac.value, quota.value):
            for secret in (apiserver.user, "serviceaccount", "compute", "exceeded", "q1", "r1"):
                assert secret not in str(err)


async def test_a_silent_apiserver_cannot_hang_a_call(apiserver: KubeSim, tmp_path: Path) -> None:
    policy = replace(FAST, connect_timeout_s=0.2, read_timeout_s=0.2, deadline_s=0.8)
    async with open_client(apiserver, tmp_path, policy) as client:
        apiserver.faults.go_silent()
        with trio.fail_after(10):
            with pytest.raises(errors.Unreachable) as caught:
                await client.list_pods(label_selector="a=b", operation="could not list pods")
            assert str(caught.value) == (
                "could not list pods: the Kubernetes API could not be reached"
            )
            apiserver.faults.go_silent(handshakes=True)
            # A frozen server: even new connections stall, and the deadline still holds.
            with pytest.raises(errors.Unreachable):
                await client.get_pod("x", operation="read")
        apiserver.faults.resume()
        assert await client.get_pod("x", operation="read") is None


async def test_apiserver_down_for_3s_bounded_reconnects_then_recovery(
    apiserver: KubeSim, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = replace(FAST, backoff_base_s=0.1, backoff_cap_s=1.0, deadline_s=20.0)
    caplog.set_level(logging.DEBUG, logger="runnerd.kube.exchange")
    async with open_client(apiserver, tmp_path, policy) as client, trio.open_nursery() as n:
        await client.list_pods(label_selector="a=b", operation="list")
        n.start_soon(apiserver.faults.restart, 3.0)
        # Until the restart has closed the listener (it then blocks refusing
        # connections): a fixed 0.1 s was a race on a loaded machine.
        await trio.testing.wait_all_tasks_blocked()
        started = trio.current_time()
        with trio.fail_after(15):
            items, _ = await client.list_pods(label_selector="a=b", operation="list")
        assert items == []
        assert trio.current_time() - started >= 2.5
        retries = [r for r in caplog.records if "retrying" in r.getMessage()]
        # Capped backoff: ~1 attempt per second once capped, never a busy loop.
        assert 2 <= len(retries) <= 12, len(retries)


async def test_a_401_rereads_the_token_and_retries_once(kubesim: KubeSim, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("stale-token")
    path = kubesim.write_kubeconfig(tmp_path / "kc")
    conn = replace(
        load_connection(replace(SETTINGS, kubeconfig=str(path)), {}, tmp_path),
        token=None,
        token_file=token_file,
    )
    credentials = Credentials(conn, environ={})
    async with open_kube_client(conn, policy=FAST, credentials=credentials) as client:
        assert await credentials.authorization() == "Bearer stale-token"  # cached for a minute
        token_file.write_text(kubesim.token)  # the kubelet rotated the projected token
        assert await client.get_pod("x", operation="read") is None
        assert kubesim.stats.responses[401] == 1
        token_file.write_text("revoked")
        credentials.invalidate()
        with pytest.raises(errors.Unauthorized) as caught:
            await client.get_pod("x", operation="read")
        assert kubesim.stats.responses[401] == 3  # one retry, then the error
        assert "revoked" not in str(caught.value)


async def test_session_pod_fetches_its_bundle_and_runs(kubesim: KubeSim, tmp_path: Path) -> None:
    assert kubesim.kubelet is not None
    tokens = BundleTokens()
    spec = RunSpec.create(
        session_id="e2e234567890",
        image=ImageSpec("telorun/node:latest-slim", "missing"),
        env={"GREETING": "hi"},
        limits=Limits(cpu="500m", memory="512Mi", ephemeral_storage="1Gi", ttl_s=60),
        bundle=BundleSpec("app/main.telo", (("app/main.telo", "env GREETING\nexit 3\n"),)),
    )
    archive = await trio.to_thread.run_sync(build_bundle_archive, spec.bundle)
    async with serve_bundles(tokens) as (base, fetches), open_client(kubesim, tmp_path) as client:
        token = tokens.stage(spec.session_id, archive, now=trio.current_time())
        url = f"{base}/internal/bundles/{spec.session_id}?token={token}"
        body = build_session_pod(SETTINGS, spec, bundle_url=url, created_at="2026-12-01T00:00:00Z")
        name = pod_name(spec.session_id)
        created = await client.create_pod(
            body, operation=OP, is_ours=lambda p: is_ours(p, SETTINGS, spec.session_id)
        )
        outcome = None
        output = bytearray()
        attached = False
        with trio.fail_after(20):
            params = {
                "fieldSelector": f"metadata.name={name}",
                "resourceVersion": created["metadata"]["resourceVersion"],
            }
            async with (
                client.open_watch(client.pods_path(), params, operation="watch") as events,
                trio.open_nursery() as nursery,
            ):
                async for event in events:
                    if event["object"]["status"].get("phase") == "Running" and not attached:
                        # The kernel waits for the start line, sent through an attach.
                        attach = partial(run_attach, client, name, on_output=output.extend)
                        terminal = await nursery.start(attach)
                        terminal.write(START_LINE)
                        attached = True
                    outcome = terminal_outcome(event["object"])
                    if outcome is not None:
                        break
        assert outcome == Exited(3)
        assert b"GREETING=hi" in output
        assert fetches == [f"{spec.session_id}:ok"]
        async with build_client(kubesim) as raw:
            log = await raw.get(f"{client.pods_path(name)}/log", params={"container": "session"})
        assert "GREETING=hi" in log.text  # the delivered entry ran, with the session's env
        await client.delete_pod(name, operation="delete")


@pytest.mark.parametrize(
    ("method", "path", "params", "verb"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", {"labelSelector": "a=b"}, "list"),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "1"}, "watch"),
        ("GET", "/api/v1/namespaces/ns/pods/p", None, "get"),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", {"container": "session"}, "get"),
        ("GET", "/apis/networking.k8s.io/v1/namespaces/ns/ingresses", None, "list"),
        ("GET", "/apis/networking.k8s.io/v1/ingressclasses/nginx", None, "get"),
        ("GET", "/api/v1/namespaces", None, "list"),
        ("GET", "/api/v1/namespaces/ns", None, "get"),
        ("POST", "/api/v1/namespaces/ns/pods", None, "create"),
        ("PUT", "/api/v1/namespaces/ns/services/s", None, "update"),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", None, "delete"),
    ],
)
def test_kube_verb_names_the_request_as_the_apiserver_does(
    method: str, path: str, params: dict[str, str] | None, verb: str
) -> None:
    assert kube_verb(method, path, params) == verb
