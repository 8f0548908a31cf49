"""A routing resolution the cluster did not decide (issue 21 review): a
silent apiserver, refused credentials, an apiserver failing every read, each
reported against what to check (`kubernetes.kubeconfig`), never as a refusal
of `kubernetes.routing`, with advice that is true. Against the test
apiserver, through the real client."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import trio

import runnerd.kube.routing as routing
from runnerd.config import ConfigError
from runnerd.kube.client import open_kube_client
from runnerd.kube.kubeconfig import load_connection
from runnerd.kube.settings import KubeSettings
from tests.kube.helpers import FAST, open_client
from tests.kubesim.server import KubeSim

AUTO = KubeSettings(self_url="http://10.0.0.5:8063", routing_base_domain="s.example.test")
ADVICE = (
    'routing = "ingress" (or "auto" with ingress_class set) and "none" start without'
    ' asking it; "gateway" asks it too (Gateway API discovery)'
)


async def test_a_silent_apiserver_names_the_kubeconfig_after_the_window(
    apiserver: KubeSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routing, "RESOLVE_DEADLINE_S", 1.0)
    apiserver.faults.go_silent()
    async with open_client(apiserver, tmp_path) as client:
        with trio.fail_after(30), pytest.raises(ConfigError) as refused:
            await routing.resolve_routing(client, AUTO)
    apiserver.faults.resume()
    assert refused.value.key == "kubernetes.kubeconfig"
    assert str(refused.value) == (
        "kubernetes.kubeconfig: the apiserver it names could not be asked which routing layer"
        f" to use (no answer in 1 s; asked once at start): check that it is reachable; {ADVICE}"
    )


async def test_an_apiserver_failing_every_read_names_the_kubeconfig(
    apiserver: KubeSim, tmp_path: Path
) -> None:
    apiserver.faults.fail_next(1000, 503, retry_after_s=None)
    async with open_client(apiserver, tmp_path) as client:
        with trio.fail_after(60), pytest.raises(ConfigError) as refused:
            await routing.resolve_routing(client, AUTO)
    assert refused.value.key == "kubernetes.kubeconfig"
    assert "could not discover the Gateway API" in str(refused.value)
    assert str(refused.value).endswith(ADVICE)


async def test_refused_credentials_name_the_kubeconfig(apiserver: KubeSim, tmp_path: Path) -> None:
    path = apiserver.write_kubeconfig(tmp_path / "kubeconfig", token="not-the-token")
    conn = load_connection(replace(KubeSettings(), kubeconfig=str(path)), {}, tmp_path)
    async with open_kube_client(conn, policy=FAST) as client:
        with trio.fail_after(30), pytest.raises(ConfigError) as refused:
            await routing.resolve_routing(client, AUTO)
    assert refused.value.key == "kubernetes.kubeconfig"
    assert "its credentials were refused while resolving the routing layer" in str(refused.value)
    assert "HTTP 401" in str(refused.value)
