"""Operator configuration: the typed, validated shape runnerd runs on.

Owns the `Config` dataclasses (frozen: a reload builds a new one and swaps it
whole) and `ConfigError`. Parsing lives in `parse_config` (pure: a dict in, a
Config out, file reads injected) and `load_config` (reads the TOML file, the
`apps.d/*.toml` drop-ins and the terms file).

Every error names the key path and the problem, e.g.
`runner.max_sessions: must be a positive integer, got 'x'`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runnerd.contract import PullPolicy


class ConfigError(ValueError):
    """A config file that cannot be run on. `key` is the dotted key path."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class ServerConfig:
    # "unix:/path", "tcp:HOST:PORT", "fd:N", or "systemd" (LISTEN_FDS).
    listen: tuple[str, ...]
    socket_mode: int = 0o660
    # "*" or an explicit allowlist of origins.
    cors_origins: Literal["*"] | tuple[str, ...] = "*"
    max_body_bytes: int = 16 * 1024 * 1024
    log_level: str = "info"


@dataclass(frozen=True)
class TermsConfig:
    version: str
    title: str
    body: str


@dataclass(frozen=True)
class TierLimits:
    """Ceilings for one tier, as Kubernetes quantities plus a TTL in seconds."""

    cpu: str
    memory: str
    ephemeral_storage: str
    ttl_s: float


@dataclass(frozen=True)
class AppEntry:
    name: str
    image: str
    pull_policy: PullPolicy = "missing"
    title: str | None = None
    description: str | None = None
    # Operator values; may be secrets. Never logged, never sent to a client.
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeConfig:
    """A local-backend "image": a command line with `{entry}` substituted."""

    name: str
    command: tuple[str, ...]
    # Extra argv when the session asks for `inspect`; `{inspect_port}` substituted.
    inspect_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class LocalConfig:
    workdir: Path = Path("/var/lib/runnerd/sessions")
    stop_grace_s: float = 2.0
    runtimes: Mapping[str, RuntimeConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class RunnerConfig:
    backend: Literal["local", "kubernetes"] = "local"
    display_name: str = "Telo Runner"
    description: str = "Runs Telo applications on this host."
    default_image: str = "telorun/node:latest-slim"
    # None: not configured (backend default applies, see `effective_images`).
    allowed_images: tuple[str, ...] | None = None
    registry_url: str | None = None
    max_sessions: int = 32
    exit_ttl_s: float = 4 * 3600.0
    replay_buffer_bytes: int = 5_000_000


@dataclass(frozen=True)
class Config:
    server: ServerConfig
    runner: RunnerConfig
    session_limits: TierLimits
    app_limits: TierLimits
    local: LocalConfig
    terms: TermsConfig | None = None
    apps: Mapping[str, AppEntry] = field(default_factory=dict)
    # The file this was loaded from (SIGHUP re-reads it), None when built in code.
    source: Path | None = None
