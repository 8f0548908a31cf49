"""The typed shape of the operator configuration, and its error type.

Owns the `Config` dataclasses (frozen: a reload builds a new one and swaps it
whole), `ConfigError`, and the defaults and limits parsing applies. Pure data:
parsing is `runnerd.config.parse`, files are `runnerd.config`, printing is
`runnerd.config.render`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from runnerd.contract import PullPolicy


class ConfigError(ValueError):
    """A config file that cannot be run on. `key` is the dotted key path;
    `line`, when known, where it is in the file the error is about."""

    def __init__(self, key: str, problem: str, line: int | None = None) -> None:
        text = f"{key}: {problem}" if key else problem
        super().__init__(text if line is None else f"line {line}: {text}")
        self.key = key
        self.problem = problem
        self.line = line


@dataclass(frozen=True)
class ServerConfig:
    # "unix:/path", "tcp:HOST:PORT", "fd:N", or "systemd" (LISTEN_FDS).
    listen: tuple[str, ...]
    socket_mode: int = 0o660
    # "*" or an explicit allowlist of origins. Default: no browser origin at
    # all (curl and other non-browser clients send none and are unaffected).
    cors_origins: Literal["*"] | tuple[str, ...] = ()
    max_body_bytes: int = 16 * 1024 * 1024
    log_level: str = "info"
    # Host names (beyond loopback addresses and `localhost`) a TCP request's
    # Host header may name: the DNS-rebinding guard. Lowercase, no port.
    allowed_hosts: tuple[str, ...] = ()
    # A TCP bind to a non-loopback address must be asked for explicitly.
    allow_remote: bool = False
    # An idle keep-alive connection (no request in flight) is closed after this.
    idle_timeout_s: float = 5.0
    # A request's headers, and then its body, must arrive within this.
    request_timeout_s: float = 10.0
    # Connections served at once per listener (streams included); the rest
    # wait in the listen backlog.
    max_connections: int = 1000


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
    # Operator values; may be secrets. Never logged, never sent to a client
    # (repr=False: a logged config or entry must not carry them either).
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    # As a watch session's co-resident agent: the tcp port it listens on
    # (required to be used as one) and the env name its session token goes in.
    port: int | None = None
    token_env: str | None = None


# The default `runner.description`; a backend may say its own instead
# (`runnerd.session.capabilities.build_capabilities`).
DEFAULT_DESCRIPTION = "Runs Telo applications on this host."


@dataclass(frozen=True)
class RunnerConfig:
    # A name in `runnerd.backends.BUILT`, the first one when the file names
    # none (the names are the caller's: this layer names no backend).
    backend: str
    display_name: str = "Telo Runner"
    description: str = DEFAULT_DESCRIPTION
    default_image: str = "telorun/node:latest-slim"
    # None: not configured (backend default applies, see
    # `runnerd.config.images.allowed_images`).
    allowed_images: tuple[str, ...] | None = None
    registry_url: str | None = None
    max_sessions: int = 32
    # Live SSE + WebSocket subscribers one session may have at once.
    max_subscribers_per_session: int = 64
    exit_ttl_s: float = 4 * 3600.0
    replay_buffer_bytes: int = 5_000_000
    # Where runnerd keeps what a successor daemon needs to continue a session
    # it adopts (replay high-water marks, a detached session's replay
    # buffers; never env). Used only by a backend whose sessions can outlive
    # the daemon. The unit's StateDirectory, next to local.workdir.
    state_dir: Path = Path("/var/lib/runnerd/state")


@dataclass(frozen=True)
class MetricsConfig:
    # `server.listen` grammar ("unix:/path", "tcp:HOST:PORT", "fd:N"); empty: off.
    listen: tuple[str, ...] = ()


@dataclass(frozen=True)
class WatchConfig:
    """`[watch]` (parsed by `runnerd.config.watch`). Durations are whole
    seconds, as the operator writes them."""

    # Off unless asked for: a watch session is a long-lived workspace the
    # client keeps writing into, a larger commitment than a run.
    enabled: bool = False
    # Watch sessions `starting` or `running` at once (they also count against
    # `runner.max_sessions`). 8: each holds its apps' processes for hours.
    max_sessions: int = 8
    # No SSE or `/io` subscriber this long → suspend. 5 minutes: an editor
    # tab that reconnects after a laptop sleep keeps its session warm.
    idle_seconds: int = 300
    # Workspace checkpoint period while running: a crash loses at most this.
    checkpoint_seconds: int = 30
    # A suspended session (only its checkpoint) is evicted after a day: long
    # enough to resume tomorrow morning's work.
    suspended_ttl_seconds: int = 86400
    # Admitted workspace writes + reloads per session per sliding 60 s: an
    # editor saving on every keystroke is debounced well below it; a runaway
    # client is not allowed to restart apps forever.
    reload_limit: int = 30
    # A watch session's workload lifetime (in place of `limits.app`'s TTL),
    # counted from creation and afresh from each resume. 6 hours: a working day's stretch.
    max_ttl_seconds: int = 21600


# The configured backend's settings: its provider's type (a frozen dataclass
# of its own, `Config[ItsSettings]` in its package); `object` to the core,
# which never reads them, so a bare `Config` is `Config[object]`. The default
# is PEP 696's, which only the type checker needs (3.11's `typing.TypeVar`
# has no `default=`).
if TYPE_CHECKING:
    from typing_extensions import TypeVar as DefaultTypeVar

    Settings = DefaultTypeVar("Settings", covariant=True, default=object)
else:
    Settings = TypeVar("Settings", covariant=True)


@dataclass(frozen=True)
class Config(Generic[Settings]):
    server: ServerConfig
    runner: RunnerConfig
    session_limits: TierLimits
    app_limits: TierLimits
    # The configured backend's settings (`runner.backend`'s table, parsed by
    # its provider); `BackendTables` until then (`runnerd.config.parse_core`).
    settings: Settings
    terms: TermsConfig | None = None
    apps: Mapping[str, AppEntry] = field(default_factory=dict)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    # The other backends' tables the file has: kept unread (a backend's table
    # is parsed only by its own provider, imported only when configured);
    # `check-config` says so where it would print them.
    unread: tuple[str, ...] = ()
    # The file this was loaded from (SIGHUP re-reads it), None when built in code.
    source: Path | None = None


# Production default: the systemd unit's RuntimeDirectory, reachable only
# through the socket's group. TCP is opt-in: it has no peer credentials.
DEFAULT_LISTEN = ("unix:/run/runnerd/runnerd.sock",)
DEFAULT_SESSION_LIMITS = TierLimits("50m", "100Mi", "512Mi", 3600.0)
DEFAULT_APP_LIMITS = TierLimits("500m", "512Mi", "1Gi", 21600.0)


def toml_key(name: str) -> str:
    """A TOML key as written: bare when it can be, quoted otherwise."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)
