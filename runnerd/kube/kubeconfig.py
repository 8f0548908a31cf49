"""Where the apiserver is and how to authenticate: kubeconfig and in-cluster files.

Owns `Connection` (server, namespace, TLS material, credentials, all resolved)
and its sources, in this order:
`settings.kubeconfig` (that file only), else `$KUBECONFIG` (a `:` list merged
so the first file to set a name or `current-context` wins), else the
in-cluster files (`KUBERNETES_SERVICE_HOST` set), else `~/.kube/config`.
Also `build_ssl_context`: an SSL context httpx and trio-websocket can share.

`merge_kubeconfigs` and `connection_from_kubeconfig` are pure (documents in,
`Connection` out, a `read` function for file references). `load_connection`
reads files: small and few, at start-up; call it off the event loop.

Supported: CA / client cert / key as a path (relative to the kubeconfig's
directory) or data (base64, or raw PEM); `token`, `tokenFile` (re-read by the
client); `exec` plugins (client.authentication.k8s.io v1 and v1beta1);
`insecure-skip-tls-verify`; `tls-server-name`. Refused with a clear error:
`username`/`password`, `auth-provider`, impersonation, `proxy-url`.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runnerd.kube.settings import KubeSettings

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
_UNSUPPORTED_USER_KEYS = (
    "username",
    "password",
    "auth-provider",
    "as",
    "as-groups",
    "as-uid",
    "as-user-extra",
)

Read = Callable[[Path], bytes]


class KubeconfigError(ValueError):
    """The connection cannot be described. The message names the file and key."""


@dataclass(frozen=True)
class ExecPlugin:
    """A `users[].user.exec` credential plugin, its paths resolved."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    api_version: str = EXEC_API_VERSIONS[0]
    interactive_mode: str = "Never"
    provide_cluster_info: bool = False


@dataclass(frozen=True)
class Connection:
    """Everything needed to talk to one apiserver as one identity."""

    server: str  # https://host:port, no trailing slash
    namespace: str
    source: str  # "in-cluster" or the kubeconfig path(s), for logs
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    client_cert_pem: bytes | None = field(default=None, repr=False)
    client_key_pem: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    exec_plugin: ExecPlugin | None = None


@dataclass(frozen=True)
class Entry:
    """One named cluster/user/context, with the directory its paths are relative to."""

    body: Mapping[str, Any]
    base: Path


@dataclass(frozen=True)
class Merged:
    clusters: Mapping[str, Entry]
    users: Mapping[str, Entry]
    contexts: Mapping[str, Entry]
    current_context: str | None
    source: str


def merge_kubeconfigs(documents: Sequence[tuple[Path, Any]]) -> Merged:
    """Merge parsed kubeconfig files, first file winning per name and for
    `current-context` (kubectl's rule for `$KUBECONFIG`).

    Raises:
        KubeconfigError: a document that is not a kubeconfig mapping.
    """
    maps: dict[str, dict[str, Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    for path, doc in documents:
        if doc is None:
            continue  # an empty file contributes nothing, as with kubectl
        if not isinstance(doc, Mapping):
            raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping)")
        for key, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in doc.get(key) or []:
                if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                    raise KubeconfigError(f"{path}: {key}: every entry needs a name")
                body = item.get(inner) or {}
                if not isinstance(body, Mapping):
                    raise KubeconfigError(f"{path}: {key}.{item['name']}: not a mapping")
                maps[key].setdefault(item["name"], Entry(body, path.parent))
        if current is None and doc.get("current-context"):
            current = str(doc["current-context"])
    source = ":".join(str(p) for p, _ in documents)
    return Merged(maps["clusters"], maps["users"], maps["contexts"], current, source)


def _data_or_file(body: Mapping[str, Any], key: str, base: Path, read: Read) -> bytes | None:
    """`<key>-data` (base64 or raw PEM) wins over `<key>` (a path)."""
    data = body.get(f"{key}-data")
    if data:
        text = str(data).strip()
        if text.startswith("-----"):
            return text.encode()
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise KubeconfigError(f"{key}-data: not base64") from exc
    path = body.get(key)
    if path:
        try:
            return read(base / str(path))
        except OSError as exc:
            raise KubeconfigError(f"{key}: cannot read {base / str(path)}: {exc.strerror}") from exc
    return None


def _exec_plugin(spec: Mapping[str, Any], base: Path, where: str) -> ExecPlugin:
    command = spec.get("command")
    if not isinstance(command, str) or not command:
        raise KubeconfigError(f"{where}.exec.command: required")
    api_version = spec.get("apiVersion", "")
    if api_version not in EXEC_API_VERSIONS:
        raise KubeconfigError(
            f"{where}.exec.apiVersion: {api_version!r} is not supported "
            f"(use {' or '.join(EXEC_API_VERSIONS)})"
        )
    # A command with a slash is relative to the kubeconfig (kubectl's rule); a
    # bare name is looked up on PATH.
    if "/" in command and not command.startswith("/"):
        command = str(base / command)
    env = tuple((str(e["name"]), str(e["value"])) for e in spec.get("env") or [])
    default_mode = "IfAvailable" if api_version.endswith("v1beta1") else ""
    return ExecPlugin(
        command=command,
        args=tuple(str(a) for a in spec.get("args") or []),
        env=env,
        api_version=api_version,
        interactive_mode=str(spec.get("interactiveMode") or default_mode or "Never"),
        provide_cluster_info=bool(spec.get("provideClusterInfo", False)),
    )


def _credentials(user: Entry, where: str, read: Read) -> dict[str, Any]:
    body = user.body
    for key in _UNSUPPORTED_USER_KEYS:
        if body.get(key):
            raise KubeconfigError(
                f"{where}.{key}: not supported by runnerd; use a token, a "
                "client certificate or an exec plugin"
            )
    token_file = body.get("tokenFile")
    return {
        "client_cert_pem": _data_or_file(body, "client-certificate", user.base, read),
        "client_key_pem": _data_or_file(body, "client-key", user.base, read),
        # `token` takes precedence over `tokenFile` (clientcmd's rule).
        "token": str(body["token"]) if body.get("token") else None,
        "token_file": None if body.get("token") or not token_file else user.base / token_file,
        "exec_plugin": _exec_plugin(body["exec"], user.base, where) if body.get("exec") else None,
    }


def connection_from_kubeconfig(
    merged: Merged, *, context: str | None, namespace: str | None, read: Read
) -> Connection:
    """The `Connection` of one context of a merged kubeconfig.

    Raises:
        KubeconfigError: no such context, cluster or user; a missing server;
            an unreadable file reference; an unsupported auth method.
    """
    name = context or merged.current_context
    if not name:
        raise KubeconfigError(f"{merged.source}: no context given and no current-context set")
    ctx = merged.contexts.get(name)
    if ctx is None:
        raise KubeconfigError(f"{merged.source}: context {name!r} not found")
    cluster = merged.clusters.get(str(ctx.body.get("cluster", "")))
    if cluster is None:
        raise KubeconfigError(
            f"{merged.source}: context {name!r}: cluster {ctx.body.get('cluster')!r} not found"
        )
    server = str(cluster.body.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise KubeconfigError(
            f"{merged.source}: cluster {ctx.body.get('cluster')!r}: server must be an http(s) URL"
        )
    if cluster.body.get("proxy-url"):
        raise KubeconfigError(f"{merged.source}: proxy-url is not supported by runnerd")
    user_name = str(ctx.body.get("user", ""))
    if user_name and user_name not in merged.users:
        raise KubeconfigError(f"{merged.source}: context {name!r}: user {user_name!r} not found")
    user = merged.users[user_name] if user_name else Entry({}, cluster.base)
    return Connection(
        server=server,
        namespace=namespace or str(ctx.body.get("namespace") or "default"),
        source=merged.source,
        ca_pem=_data_or_file(cluster.body, "certificate-authority", cluster.base, read),
        insecure_skip_tls_verify=bool(cluster.body.get("insecure-skip-tls-verify", False)),
        tls_server_name=cluster.body.get("tls-server-name") or None,
        **_credentials(user, f"users.{user_name}", read),
    )


def in_cluster_connection(
    environ: Mapping[str, str],
    namespace: str | None,
    read: Read,
    directory: Path = SERVICE_ACCOUNT_DIR,
) -> Connection:
    """The pod's own service account (client-go's `InClusterConfig`).

    Raises:
        KubeconfigError: the CA or namespace file cannot be read.
    """
    host, port = environ["KUBERNETES_SERVICE_HOST"], environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"  # IPv6
    try:
        ns = namespace or read(directory / "namespace").decode().strip() or "default"
        ca = read(directory / "ca.crt")
    except OSError as exc:
        raise KubeconfigError(f"in-cluster: cannot read {exc.filename}: {exc.strerror}") from exc
    return Connection(
        server=f"https://{host}:{port}",
        namespace=ns,
        source="in-cluster",
        ca_pem=ca,
        token_file=directory / "token",
    )


def _read_file(path: Path) -> bytes:
    return path.read_bytes()


def load_connection(
    settings: KubeSettings,
    environ: Mapping[str, str],
    home: Path,
    read: Read = _read_file,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> Connection:
    """Resolve the connection the way the settings ask (module docstring). Blocking IO.

    Raises:
        KubeconfigError: nothing found, or what was found is not usable.
    """
    paths: list[Path]
    if settings.kubeconfig:
        paths = [Path(settings.kubeconfig)]
    elif environ.get("KUBECONFIG"):
        paths = [Path(p) for p in environ["KUBECONFIG"].split(os.pathsep) if p]
    elif environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster_connection(environ, settings.namespace, read, service_account_dir)
    else:
        paths = [home / ".kube" / "config"]
    documents = []
    for path in paths:
        try:
            documents.append((path, yaml.safe_load(read(path))))
        except FileNotFoundError:
            if settings.kubeconfig or len(paths) == 1:
                raise KubeconfigError(f"{path}: no such file") from None
            continue  # $KUBECONFIG may name files that do not exist (kubectl skips them)
        except (OSError, yaml.YAMLError) as exc:
            raise KubeconfigError(f"{path}: cannot read: {exc}") from exc
    if not documents:
        raise KubeconfigError(f"$KUBECONFIG: none of {environ.get('KUBECONFIG')!r} exists")
    return connection_from_kubeconfig(
        merge_kubeconfigs(documents),
        context=settings.context,
        namespace=settings.namespace,
        read=read,
    )


def build_ssl_context(
    conn: Connection, client_cert: tuple[bytes, bytes] | None = None
) -> ssl.SSLContext:
    """A client SSL context for `conn` (HTTP/1.1 by ALPN).

    `client_cert` (PEM cert, PEM key) overrides the connection's own (an exec
    plugin's). The key touches disk only for the instant `load_cert_chain`
    needs a file: a 0700 temporary directory, removed before returning.
    """
    ctx = ssl.create_default_context(cadata=conn.ca_pem.decode() if conn.ca_pem else None)
    if conn.insecure_skip_tls_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    cert, key = client_cert or (conn.client_cert_pem, conn.client_key_pem)
    if cert and key:
        with tempfile.TemporaryDirectory(prefix="runnerd-kube-") as tmp:
            cert_path, key_path = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
            for path, data in ((cert_path, cert), (key_path, key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
            ctx.load_cert_chain(cert_path, key_path)
    elif cert or key:
        raise KubeconfigError("a client certificate needs both the certificate and the key")
    return ctx
