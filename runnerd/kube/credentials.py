"""The bearer token each request carries: static, a re-read file, or an exec plugin.

Owns `Credentials`, the client's one source of `Authorization` headers.

- A static `token` is sent as is.
- A token file (in-cluster, or `tokenFile`) is re-read at most every
  `TOKEN_FILE_PERIOD_S` and after `invalidate()` (the client calls it on a
  401), as client-go's cached file token source does: whitespace trimmed; an
  empty or unreadable file keeps the previous token when there is one.
- An exec plugin runs with `KUBERNETES_EXEC_INFO` set; its `ExecCredential`
  is cached until `expirationTimestamp` (or `invalidate()`); a plugin that
  answers with a client certificate is read once at start (`client_cert`).

Error handling: `CredentialsUnavailable` (the detail, for the log); the client
turns it into `errors.NoCredentials` for the caller.

Cancellation: `authorization()` may run a plugin (bounded by
`EXEC_TIMEOUT_S`); cancelling it kills the plugin.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import trio

from runnerd.kube.kubeconfig import Connection, ExecPlugin

log = logging.getLogger(__name__)

TOKEN_FILE_PERIOD_S = 60.0
EXEC_TIMEOUT_S = 30.0
# A plugin credential is renewed this long before it expires, so a request
# never leaves with a token that dies in flight.
EXPIRY_LEEWAY_S = 10.0


class CredentialsUnavailable(Exception):
    """The token file or exec plugin failed; the message says how (log only)."""


def exec_info(plugin: ExecPlugin, conn: Connection) -> str:
    """The `KUBERNETES_EXEC_INFO` JSON for a plugin run (non-interactive)."""
    spec: dict[str, Any] = {"interactive": False}
    if plugin.provide_cluster_info:
        cluster: dict[str, Any] = {"server": conn.server}
        if conn.tls_server_name:
            cluster["tls-server-name"] = conn.tls_server_name
        if conn.insecure_skip_tls_verify:
            cluster["insecure-skip-tls-verify"] = True
        if conn.ca_pem:
            cluster["certificate-authority-data"] = base64.b64encode(conn.ca_pem).decode()
        spec["cluster"] = cluster
    return json.dumps({"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec})


def parse_exec_credential(stdout: bytes, wall_now: datetime) -> tuple[dict[str, Any], float | None]:
    """(status, seconds until expiry or None) from a plugin's stdout. Pure.

    Raises:
        CredentialsUnavailable: not an ExecCredential with a token or a cert/key.
    """
    try:
        doc = json.loads(stdout)
        status = doc["status"]
        assert doc.get("kind") == "ExecCredential" and isinstance(status, dict)
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        raise CredentialsUnavailable("exec plugin: output is not an ExecCredential") from exc
    has_cert = status.get("clientCertificateData") and status.get("clientKeyData")
    if not status.get("token") and not has_cert:
        raise CredentialsUnavailable("exec plugin: ExecCredential has no token and no cert/key")
    expiry = status.get("expirationTimestamp")
    if not expiry:
        return status, None
    try:
        at = datetime.fromisoformat(str(expiry).replace("Z", "+00:00"))
    except ValueError as exc:
        raise CredentialsUnavailable(f"exec plugin: bad expirationTimestamp {expiry!r}") from exc
    return status, (at - wall_now).total_seconds()


class Credentials:
    """Authorization for one `Connection`. Safe to share between tasks."""

    def __init__(self, conn: Connection, environ: Mapping[str, str] | None = None) -> None:
        self._conn = conn
        self._environ = dict(os.environ if environ is None else environ)
        self._token: str | None = conn.token
        self._fresh_until = -float("inf")  # trio time until which `_token` needs no refresh
        self._exec_status: dict[str, Any] | None = None
        self._lock = trio.Lock()

    def invalidate(self) -> None:
        """A 401 came back: the next `authorization()` re-reads / re-runs."""
        self._fresh_until = -float("inf")

    async def authorization(self) -> str | None:
        """The `Authorization` header value, or None (client-cert or no auth).

        Raises:
            CredentialsUnavailable: no token could be had.
        """
        if self._conn.token is not None:
            return f"Bearer {self._conn.token}"
        if self._conn.token_file is None and self._conn.exec_plugin is None:
            return None
        async with self._lock:  # one refresh at a time; the rest reuse it
            if trio.current_time() >= self._fresh_until:
                await self._refresh()
        if self._token:
            return f"Bearer {self._token}"
        return None  # a cert-only plugin

    async def client_cert(self) -> tuple[bytes, bytes] | None:
        """A plugin's client certificate and key (PEM), if its credential is one."""
        if self._conn.exec_plugin is None:
            return None
        async with self._lock:
            if self._exec_status is None:
                await self._refresh()
        status = self._exec_status or {}
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            return (
                str(status["clientCertificateData"]).encode(),
                str(status["clientKeyData"]).encode(),
            )
        return None

    async def _refresh(self) -> None:
        if self._conn.token_file is not None:
            await self._read_token_file()
        elif self._conn.exec_plugin is not None:
            await self._run_plugin(self._conn.exec_plugin)

    async def _read_token_file(self) -> None:
        path = self._conn.token_file
        assert path is not None
        try:
            token = (await trio.Path(path).read_text()).strip()
            if not token:
                raise CredentialsUnavailable(f"token file {path} is empty")
        except (OSError, CredentialsUnavailable) as exc:
            if self._token is None:
                raise CredentialsUnavailable(f"token file {path}: {exc}") from exc
            log.warning("unable to rotate the Kubernetes token; keeping the old one error=%s", exc)
            token = self._token
        self._token = token
        self._fresh_until = trio.current_time() + TOKEN_FILE_PERIOD_S

    async def _run_plugin(self, plugin: ExecPlugin) -> None:
        env = {
            **self._environ,
            **dict(plugin.env),
            "KUBERNETES_EXEC_INFO": exec_info(plugin, self._conn),
        }
        try:
            with trio.fail_after(EXEC_TIMEOUT_S):
                done = await trio.run_process(
                    [plugin.command, *plugin.args],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
        except (OSError, trio.TooSlowError) as exc:
            raise CredentialsUnavailable(f"exec plugin {plugin.command}: {exc!r}") from exc
        if done.returncode != 0:
            stderr = done.stderr.decode("utf-8", "replace").strip()[-500:]
            raise CredentialsUnavailable(
                f"exec plugin {plugin.command} exited {done.returncode}: {stderr}"
            )
        status, expires_in = parse_exec_credential(done.stdout, datetime.now(UTC))
        self._exec_status = status
        self._token = str(status["token"]) if status.get("token") else None
        lifetime = float("inf") if expires_in is None else expires_in - EXPIRY_LEEWAY_S
        self._fresh_until = trio.current_time() + lifetime
