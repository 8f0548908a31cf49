"""runnerd.kube.kubeconfig + credentials: kubeconfigs the test cluster writes and
hand-made ones, each proven by a real request to the test cluster over TLS."""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
import yaml

from runnerd.kube.credentials import Credentials, CredentialsUnavailable
from runnerd.kube.kubeconfig import (
    Connection,
    KubeconfigError,
    build_ssl_context,
    load_connection,
)
from runnerd.kube.settings import KubeSettings
from tests.kubesim.server import KubeSim

S = KubeSettings()


async def get_version(
    conn: Connection, creds: Credentials | None = None, sni: str | None = None
) -> int:
    """A real request with what the connection describes; the HTTP status."""
    creds = creds or Credentials(conn, environ={})
    headers = {}
    if (auth := await creds.authorization()) is not None:
        headers["Authorization"] = auth
    ctx = build_ssl_context(conn, await creds.client_cert())
    extensions = {"sni_hostname": sni} if sni else None
    async with httpx.AsyncClient(verify=ctx, timeout=5) as client:
        response = await client.get(
            f"{conn.server}/api/v1/namespaces/{conn.namespace}/pods",
            headers=headers,
            extensions=extensions,
        )
    return response.status_code


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def kubeconfig(
    server: str,
    *,
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    ctx_name: str = "c",
    ns: str | None = "runnerd",
    current: str | None = "c",
    cluster_name: str = "k",
    user_name: str = "u",
) -> dict[str, Any]:
    context: dict[str, Any] = {"cluster": cluster_name, "user": user_name}
    if ns:
        context["namespace"] = ns
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": user_name, "user": user or {}}],
        "contexts": [{"name": ctx_name, "context": context}],
    }
    if current:
        doc["current-context"] = current
    return doc


async def test_load_the_kubeconfig_the_cluster_writes(kubesim: KubeSim, tmp_path: Path) -> None:
    path = kubesim.write_kubeconfig(tmp_path / "kc")
    conn = load_connection(replace(S, kubeconfig=str(path)), {}, tmp_path)
    assert (conn.server, conn.namespace) == (kubesim.url, "runnerd")
    assert kubesim.token not in repr(conn)
    assert await get_version(conn) == 200


async def test_client_certificate_data_authenticates(kubesim: KubeSim, tmp_path: Path) -> None:
    path = kubesim.write_kubeconfig(tmp_path / "kc", client_cert=True)
    conn = load_connection(S, {"KUBECONFIG": str(path)}, tmp_path)
    assert conn.token is None and conn.client_key_pem is not None
    assert await get_version(conn) == 200
    # The key touched disk only while the context loaded it.
    assert not list(await trio.Path(tempfile.gettempdir()).glob("runnerd-kube-*"))


async def test_files_by_path_relative_to_the_kubeconfig(kubesim: KubeSim, tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs/ca.pem").write_bytes(kubesim.ca_pem)
    (tmp_path / "certs/client.pem").write_bytes(kubesim.client_cert.cert_chain_pems[0].bytes())
    (tmp_path / "certs/client.key").write_bytes(kubesim.client_cert.private_key_pem.bytes())
    path = write(
        tmp_path / "kc",
        kubeconfig(
            kubesim.url,
            cluster={"certificate-authority": "certs/ca.pem"},
            user={"client-certificate": "certs/client.pem", "client-key": "certs/client.key"},
        ),
    )
    conn = load_connection(replace(S, kubeconfig=str(path)), {}, Path("/nonexistent"))
    assert await get_version(conn) == 200


async def test_kubeconfig_env_merges_first_file_wins(kubesim: KubeSim, tmp_path: Path) -> None:
    ca = base64.b64encode(kubesim.ca_pem).decode()
    first = write(
        tmp_path / "a",
        kubeconfig(
            kubesim.url,
            cluster={"certificate-authority-data": ca},
            user={"token": kubesim.token},
            current="c",
        ),
    )
    second = write(
        tmp_path / "b",
        kubeconfig("https://127.0.0.1:1", user={"token": "wrong"}, current="other", ns="elsewhere"),
    )
    env = {"KUBECONFIG": f"{tmp_path / 'missing'}:{first}:{second}"}
    conn = load_connection(S, env, tmp_path)
    assert (conn.server, conn.namespace, conn.token) == (kubesim.url, "runnerd", kubesim.token)
    assert await get_version(conn) == 200
    # Reversed, the second file's names win (its context points at the same names).
    swapped = load_connection(
        replace(S, context="c"), {"KUBECONFIG": f"{second}:{first}"}, tmp_path
    )
    assert swapped.server == "https://127.0.0.1:1"


async def test_context_and_namespace_selection(kubesim: KubeSim, tmp_path: Path) -> None:
    doc = kubeconfig(kubesim.url, user={"token": kubesim.token}, ns=None)
    doc["contexts"].append(
        {"name": "d", "context": {"cluster": "k", "user": "u", "namespace": "kube-system"}}
    )
    path = write(tmp_path / "kc", doc)
    settings = replace(S, kubeconfig=str(path))
    assert load_connection(settings, {}, tmp_path).namespace == "default"
    assert load_connection(replace(settings, context="d"), {}, tmp_path).namespace == "kube-system"
    assert (
        load_connection(replace(settings, context="d", namespace="x"), {}, tmp_path).namespace
        == "x"
    )


async def test_token_file_is_reread_every_minute_and_after_a_401(
    kubesim: KubeSim, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    (tmp_path / "token").write_text("first\n")
    path = write(tmp_path / "kc", kubeconfig(kubesim.url, user={"tokenFile": "token"}))
    conn = load_connection(replace(S, kubeconfig=str(path)), {}, tmp_path)
    assert conn.token_file == tmp_path / "token"
    creds = Credentials(conn, environ={})
    assert await creds.authorization() == "Bearer first"
    (tmp_path / "token").write_text("second")
    assert await creds.authorization() == "Bearer first"  # cached within the minute
    await trio.sleep(61)
    assert await creds.authorization() == "Bearer second"
    (tmp_path / "token").write_text("third")
    creds.invalidate()
    assert await creds.authorization() == "Bearer third"
    (tmp_path / "token").write_text("")  # a rotation caught mid-write keeps the old token
    creds.invalidate()
    assert await creds.authorization() == "Bearer third"


async def test_token_wins_over_token_file(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", kubeconfig("https://h", user={"token": "t", "tokenFile": "nope"}))
    conn = load_connection(replace(S, kubeconfig=str(path)), {}, tmp_path)
    assert (conn.token, conn.token_file) == ("t", None)


def plugin(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "plugin.py"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


async def test_exec_plugin_token_is_cached_until_invalidated(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    plugin(
        tmp_path,
        f"""
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["spec"]["interactive"] is False and info["spec"]["cluster"]["server"]
open({str(runs)!r}, "a").write("x")
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
  "status": {{"token": os.environ["SIM_TOKEN"], "expirationTimestamp": "2999-01-01T00:00:00Z"}}}}))
""",
    )
    path = write(
        tmp_path / "kc",
        kubeconfig(
            kubesim.url,
            cluster={"certificate-authority-data": base64.b64encode(kubesim.ca_pem).decode()},
            user={
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "./plugin.py",
                    "env": [{"name": "SIM_TOKEN", "value": kubesim.token}],
                    "interactiveMode": "Never",
                    "provideClusterInfo": True,
                }
            },
        ),
    )
    conn = load_connection(replace(S, kubeconfig=str(path)), {}, tmp_path)
    creds = Credentials(conn, environ={"PATH": os.environ["PATH"]})
    assert await get_version(conn, creds) == 200
    assert await creds.authorization() == f"Bearer {kubesim.token}"
    assert runs.read_text() == "x"
    creds.invalidate()
    await creds.authorization()
    assert runs.read_text() == "xx"


async def test_exec_plugin_failure_is_reported_without_secrets(tmp_path: Path) -> None:
    script = plugin(tmp_path, "sys.stderr.write('no login'); sys.exit(3)")
    path = write(
        tmp_path / "kc",
        kubeconfig(
            "https://h",
            user={
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": str(script),
                }
            },
        ),
    )
    creds = Credentials(load_connection(replace(S, kubeconfig=str(path)), {}, tmp_path), {})
    with pytest.raises(CredentialsUnavailable, match="exited 3: no login"):
        await creds.authorization()


async def test_insecure_skip_tls_verify(kubesim: KubeSim, tmp_path: Path) -> None:
    path = write(
        tmp_path / "kc",
        kubeconfig(
            kubesim.url, cluster={"insecure-skip-tls-verify": True}, user={"token": kubesim.token}
        ),
    )
    conn = load_connection(replace(S, kubeconfig=str(path)), {}, tmp_path)
    assert await get_version(conn) == 200
    strict = replace(conn, insecure_skip_tls_verify=False)
    with pytest.raises(httpx.ConnectError):
        await get_version(strict)


async def test_tls_server_name_is_the_name_verified(kubesim: KubeSim, tmp_path: Path) -> None:
    ca = base64.b64encode(kubesim.ca_pem).decode()
    path = write(
        tmp_path / "kc",
        kubeconfig(
            kubesim.url,
            cluster={"certificate-authority-data": ca, "tls-server-name": "localhost"},
            user={"token": kubesim.token},
        ),
    )
    conn = load_connection(replace(S, kubeconfig=str(path)), {}, tmp_path)
    assert conn.tls_server_name == "localhost"
    assert await get_version(conn, sni="localhost") == 200
    with pytest.raises(httpx.ConnectError):
        await get_version(conn, sni="wrong.example")


async def test_in_cluster_files(kubesim: KubeSim, tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(kubesim.token + "\n")
    (sa / "ca.crt").write_bytes(kubesim.ca_pem)
    (sa / "namespace").write_text("runnerd")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(kubesim.port)}
    conn = load_connection(S, env, tmp_path, service_account_dir=sa)
    assert (conn.server, conn.namespace, conn.source) == (kubesim.url, "runnerd", "in-cluster")
    assert conn.token_file == sa / "token"
    assert await get_version(conn) == 200
    # $KUBECONFIG wins over in-cluster; the home file comes last.
    home_kc = tmp_path / ".kube" / "config"
    home_kc.parent.mkdir()
    kubesim.write_kubeconfig(home_kc)
    assert load_connection(S, {}, tmp_path).source == str(home_kc)
    assert load_connection(
        S, {**env, "KUBECONFIG": str(home_kc)}, tmp_path, service_account_dir=sa
    ).source == str(home_kc)
    ipv6 = load_connection(
        S, {**env, "KUBERNETES_SERVICE_HOST": "::1"}, tmp_path, service_account_dir=sa
    )
    assert ipv6.server == f"https://[::1]:{kubesim.port}"


@pytest.mark.parametrize(
    ("doc", "user", "message"),
    [
        (kubeconfig("https://h", current=None), {}, "no current-context"),
        (kubeconfig("https://h", current="zz"), {}, "context 'zz' not found"),
        (kubeconfig("ftp://h"), {}, "server must be an http"),
        (
            kubeconfig("https://h", cluster={"certificate-authority": "nope.pem"}),
            {},
            "certificate-authority: cannot read",
        ),
        (kubeconfig("https://h", cluster={"certificate-authority-data": "!!"}), {}, "not base64"),
        (kubeconfig("https://h"), {"auth-provider": {"name": "oidc"}}, "auth-provider: not supp"),
        (kubeconfig("https://h"), {"username": "a", "password": "b"}, "username: not supported"),
        (
            kubeconfig("https://h"),
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}},
            "is not supported",
        ),
    ],
)
def test_unusable_kubeconfigs_name_the_problem(
    tmp_path: Path, doc: dict[str, Any], user: dict[str, Any], message: str
) -> None:
    if user:
        doc["users"][0]["user"] = user
    path = write(tmp_path / "kc", doc)
    with pytest.raises(KubeconfigError, match=message):
        load_connection(replace(S, kubeconfig=str(path)), {}, tmp_path)


def test_missing_kubeconfig_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="no such file"):
        load_connection(replace(S, kubeconfig=str(tmp_path / "none")), {}, tmp_path)
    with pytest.raises(KubeconfigError, match="no such file"):
        load_connection(S, {}, tmp_path)
    with pytest.raises(KubeconfigError, match="none of"):
        load_connection(S, {"KUBECONFIG": f"{tmp_path}/a:{tmp_path}/b"}, tmp_path)


def test_exec_credential_parsing() -> None:
    from datetime import UTC, datetime

    from runnerd.kube.credentials import parse_exec_credential

    now = datetime(2026, 1, 1, tzinfo=UTC)
    status, expires = parse_exec_credential(
        json.dumps(
            {
                "kind": "ExecCredential",
                "status": {"token": "t", "expirationTimestamp": "2026-01-01T00:01:00Z"},
            }
        ).encode(),
        now,
    )
    assert (status["token"], expires) == ("t", 60.0)
    for bad in (b"nope", b'{"kind":"ExecCredential","status":{}}', b'{"status":{"token":"t"}}'):
        with pytest.raises(CredentialsUnavailable):
            parse_exec_credential(bad, now)
