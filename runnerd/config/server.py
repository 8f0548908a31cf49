"""The `[server]` section: listeners, browser access and connection bounds. Pure.

Owns `parse_server` (called by `runnerd.config.parse.parse_core`) and
`server_warnings`, the findings that are legal but risky (printed by
`check-config`, logged by `serve`). The security rules behind them:

- A TCP listener has no peer credentials, so binding one to anything but a
  loopback address exposes the API (and so code execution on this host) to
  the network. That needs `allow_remote = true`, else the config is refused.
- `cors_origins = "*"` with a TCP listener lets every web page the user
  visits call the API through a preflighted request: legal (a developer may
  want it for a moment), but warned about.
- A `socket_mode` that lets other users write a UNIX listener's socket
  (`o+w`: connecting needs write permission) lets every local account run
  code as runnerd's user: legal (a single-user dev box), but warned about.
  Group write is the intended access path (the `runnerd` group), not a risk.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import TYPE_CHECKING, Literal

from runnerd.config.listen import format_listen, parse_listen
from runnerd.config.model import DEFAULT_LISTEN, ConfigError, ServerConfig
from runnerd.config.table import Table

if TYPE_CHECKING:
    from pathlib import Path


SERVER_KEYS = (
    "listen", "socket_mode", "cors_origins", "max_body_bytes", "log_level", "allowed_hosts",
    "allow_remote", "idle_timeout_seconds", "request_timeout_seconds", "max_connections",
)  # fmt: skip
_LOG_LEVELS = ("debug", "info", "warning", "error")
# A DNS name as it appears in a Host header (no port, no brackets).
_HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?")


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback IP literal (127.0.0.0/8, ::1)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_tcp_address(a: str, b: str) -> bool:
    """Would two `tcp:` entries bind the same address (`localhost:P` and
    `127.0.0.1:P`)? Resolved as the bind does (first `getaddrinfo` answer);
    port 0 (any free port) never clashes, and a name that does not resolve
    is left to the bind's own error."""
    first, second = parse_listen(a), parse_listen(b)
    if first.kind != "tcp" or second.kind != "tcp" or not first.port:
        return False
    if first.port != second.port:
        return False
    resolved = _bind_address(first.host or "", first.port)
    return resolved is not None and resolved == _bind_address(second.host or "", second.port)


def _bind_address(host: str, port: int) -> object:
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return None
    return answers[0][4]


def parse_server(t: Table, base_dir: Path) -> ServerConfig:
    """Read `[server]`. Raises ConfigError naming the key."""
    listen = _parse_listen(t, base_dir)
    mode = t.string("socket_mode", "0660")
    if not re.fullmatch(r"0?[0-7]{3}", mode):
        raise ConfigError(
            "server.socket_mode", f'must be an octal string like "0660", got {mode!r}'
        )
    allow_remote = t.data.get("allow_remote", False)
    if not isinstance(allow_remote, bool):
        raise ConfigError("server.allow_remote", f"must be true or false, got {allow_remote!r}")
    if not allow_remote:
        _check_loopback_only(listen)
    return ServerConfig(
        listen=listen,
        socket_mode=int(mode, 8),
        cors_origins=_parse_cors(t),
        max_body_bytes=t.positive_int("max_body_bytes", 16 * 1024 * 1024),
        log_level=t.choice("log_level", "info", _LOG_LEVELS),
        allowed_hosts=_parse_hosts(t),
        allow_remote=allow_remote,
        idle_timeout_s=t.seconds("idle_timeout_seconds", 5.0),
        request_timeout_s=t.seconds("request_timeout_seconds", 10.0),
        max_connections=t.positive_int("max_connections", 1000),
    )


def _parse_listen(t: Table, base_dir: Path) -> tuple[str, ...]:
    entries = t.string_list("listen", empty_ok=False)
    listen: list[str] = []
    for i, entry in enumerate(entries or DEFAULT_LISTEN):
        try:
            canonical = format_listen(parse_listen(entry, base_dir))
        except ValueError as exc:
            raise ConfigError(f"server.listen[{i}]", str(exc)) from None
        if canonical in listen:
            raise ConfigError(f"server.listen[{i}]", f"{entry!r} is listed twice")
        listen.append(canonical)
    return tuple(listen)


def _check_loopback_only(listen: tuple[str, ...]) -> None:
    for i, entry in enumerate(listen):
        address = parse_listen(entry)
        if address.kind == "tcp":
            check_loopback(f"server.listen[{i}]", entry, address.host or "", "the API")


def check_loopback(key: str, entry: str, host: str, what: str) -> None:
    """ConfigError at `key` unless `host` is loopback (`server.allow_remote`
    unset): a remote bind exposes `what` to every machine that reaches it."""
    if is_loopback_host(host):
        return
    raise ConfigError(
        key,
        f"{entry!r} is reachable from other machines, and anyone who reaches {what} "
        + ("can run code on this host" if what == "the API" else "can read them")
        + "; bind to 127.0.0.1 or [::1] (put an authenticating proxy in front for remote "
        "use), or set server.allow_remote = true",
    )


def _parse_cors(t: Table) -> Literal["*"] | tuple[str, ...]:
    if t.data.get("cors_origins") == "*":
        return "*"
    origins = t.string_list("cors_origins") or ()
    for i, origin in enumerate(origins):
        # A browser's Origin never ends in "/", so such an entry never matches.
        if "://" not in origin or origin.endswith("/"):
            hint = ' (for any origin write cors_origins = "*")' if origin == "*" else ""
            raise ConfigError(
                f"server.cors_origins[{i}]",
                f"must be an origin like https://editor.example.com, got {origin!r}{hint}",
            )
    return origins


def _parse_hosts(t: Table) -> tuple[str, ...]:
    hosts = t.string_list("allowed_hosts") or ()
    for i, host in enumerate(hosts):
        if not _HOST_NAME.fullmatch(host.lower()):
            raise ConfigError(
                f"server.allowed_hosts[{i}]",
                f"must be a host name like runner.example.com (no scheme, no port), got {host!r}",
            )
    return tuple(host.lower().rstrip(".") for host in hosts)


def server_warnings(server: ServerConfig) -> list[str]:
    """Legal but risky settings, one line each (`key: why`)."""
    warnings = []
    has_tcp = any(entry.startswith("tcp:") for entry in server.listen)
    if server.cors_origins == "*" and has_tcp:
        warnings.append(
            'server.cors_origins: "*" with a TCP listener lets every web page you visit '
            "call the API (and so run code on this host); list the editor origins you use"
        )
    has_unix = any(entry.startswith("unix:") for entry in server.listen)
    if server.socket_mode & 0o002 and has_unix:
        warnings.append(
            f'server.socket_mode: "{server.socket_mode:04o}" lets every local user connect '
            "to the API socket (and so run code on this host as runnerd's user); use "
            '"0660" and add the users who may start sessions to the socket\'s group'
        )
    return warnings
