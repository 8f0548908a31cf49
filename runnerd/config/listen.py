"""Listen addresses: the `server.listen` entry grammar. Pure.

Owns `parse_listen` (an entry to a `ListenAddress`) and `format_listen` (the
canonical entry back), shared by config validation, which stores canonical
entries with absolute unix paths, and the daemon, which binds them. No
sockets here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class ListenAddress:
    """One parsed `server.listen` entry. `path` is absolute for `unix`."""

    kind: Literal["unix", "tcp", "fd", "systemd"]
    path: Path | None = None
    host: str | None = None  # IPv6 without the brackets
    port: int | None = None
    fd: int | None = None


def parse_listen(entry: str, base_dir: Path | None = None) -> ListenAddress:
    """Parse `unix:/abs/path`, `tcp:HOST:PORT` (IPv6 as `[::1]`), `fd:N`, `systemd`.

    A relative unix path resolves against `base_dir` (the config file's
    directory). Port 0 means "any free port".

    Raises:
        ValueError: the message says what is wrong with `entry`.
    """
    kind, sep, rest = entry.partition(":")
    if entry == "systemd":
        return ListenAddress("systemd")
    if kind == "unix" and sep and rest:
        path = Path(rest)
        if not path.is_absolute():
            if base_dir is None:
                raise ValueError(f"unix socket path must be absolute, got {entry!r}")
            path = Path(os.path.normpath(base_dir / path))
        return ListenAddress("unix", path=path)
    if kind == "fd" and sep and rest.isdigit():
        return ListenAddress("fd", fd=int(rest))
    if kind == "tcp" and sep:
        host, _, port = rest.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host:
            raise ValueError(f"an IPv6 host goes in brackets (tcp:[::1]:8062), got {entry!r}")
        if host and port.isdigit() and int(port) <= 65535:
            return ListenAddress("tcp", host=host, port=int(port))
    raise ValueError(
        f"must be unix:/path, tcp:HOST:PORT (port 0-65535), fd:N or systemd, got {entry!r}"
    )


def format_listen(address: ListenAddress) -> str:
    """The canonical entry for `address` (what `Config.server.listen` holds)."""
    if address.kind == "unix":
        return f"unix:{address.path}"
    if address.kind == "tcp":
        host = f"[{address.host}]" if ":" in (address.host or "") else address.host
        return f"tcp:{host}:{address.port}"
    if address.kind == "fd":
        return f"fd:{address.fd}"
    return "systemd"
