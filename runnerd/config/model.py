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
from typing import Literal

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


@dataclass(frozen=True)
class RuntimeConfig:
    """A local-backend "image": a command line with `{entry}` substituted."""

    name: str
    command: tuple[str, ...]
    # Extra argv when the session asks for `inspect`; `{inspect_port}` substituted.
    inspect_args: tuple[str, ...] = ()
    # Directories put first on the workload's PATH (before the minimal
    # /usr/local/bin:/usr/bin:/bin) and searched first for `command[0]`: where
    # the interpreter a script's `#!/usr/bin/env node` names is found.
    # Default none: a session sees only the minimal PATH.
    path: tuple[str, ...] = ()


@dataclass(frozen=True)
class LocalConfig:
    workdir: Path = Path("/var/lib/runnerd/sessions")
    stop_grace_s: float = 2.0
    # How long after its creation a session's workload may wait for its first
    # terminal size (a client's resize), so that it starts with that size,
    # not 80x24 changing under it. A size given up front (the POST's
    # x-runnerd-terminal-size, or a resize before the wait) ends it at once.
    # 0.2 s: a client that opens the terminal right after its POST sends its
    # size well within it, and a session no client attaches to starts ~0.2 s
    # later. 0: never wait.
    terminal_size_wait_s: float = 0.2
    runtimes: Mapping[str, RuntimeConfig] = field(default_factory=dict)
    # "auto": a PID namespace per session where the kernel allows it, else
    # the process group (announced); "process-group": always the latter.
    containment: Literal["auto", "process-group"] = "auto"
    # "isolated": a network namespace per session, declared ports published
    # on the host's loopback, outbound through slirp4netns when installed;
    # "none": the namespace's loopback only; "host": the host's network
    # (a session reaches runnerd's TCP listener: announced as unisolated).
    network: Literal["isolated", "none", "host"] = "isolated"
    # A root daemon runs each live session as a uid (and gid) of its own from
    # base … base+count-1, numbers no account or file on the host may use.
    # 0x70000000: above the container ranges systemd hands out (524288 …
    # 1879048191) and the /etc/subuid blocks useradd starts at 100000, below
    # 2^31 (tools that keep uids signed). 65536: systemd's container block,
    # far more than max_sessions. Ignored by a non-root daemon.
    session_uid_base: int = 0x70000000
    session_uid_count: int = 65536
    # The interpreter that runs each session's init (`runnerd.local.nsinit`,
    # stdlib only), as the session's uid. None: runnerd's own, else
    # /usr/bin/python3 when a session uid cannot run runnerd's (a venv under
    # a 0700 home). Set, it is the only one tried.
    init_python: str | None = None


@dataclass(frozen=True)
class KubeSettings:
    """`[kubernetes]`: what the Kubernetes backend is configured with
    (`runnerd.kube.settings` re-exports it; the section is parsed by
    `runnerd.config.kubernetes`)."""

    # Path to a kubeconfig. None: `$KUBECONFIG` (merged), else in-cluster files,
    # else `~/.kube/config` — the order kubectl users expect, with in-cluster
    # ahead of the home file because a daemon in a pod has no useful home.
    kubeconfig: str | None = None
    # Context name. None: the kubeconfig's `current-context`.
    context: str | None = None
    # Session namespace. None: the context's namespace (or the in-cluster
    # namespace file), else "default", as kubectl resolves it.
    namespace: str | None = None
    # The URL pods use to reach runnerd's bundle endpoint (`bundle_listen`).
    # No default can be right: it depends on the cluster's network.
    self_url: str = ""
    # The listener serving `/internal/bundles/`. Separate from the API listeners
    # so the API never has to be reachable from pods; all interfaces by default
    # because pods reach it over the pod network.
    bundle_listen: str = "tcp:0.0.0.0:8063"
    # The body-fetch init container's image: it needs only `sh`, `wget`, `tar`.
    # A pinned busybox: small, on every registry mirror, and its wget is enough.
    init_image: str = "busybox:1.36"
    # A sandbox RuntimeClass (gVisor, Kata) when the cluster offers one; unset
    # means the cluster default, since a wrong name makes every pod unschedulable.
    runtime_class: str | None = None
    # Pull secret for the kernel image, in the session namespace. Unset: public images.
    image_pull_secret: str | None = None
    # The `app.kubernetes.io/managed-by` label value on every pod runnerd
    # creates: the shared watch selects on it, and the reaper deletes by it.
    # One value per runnerd instance sharing a namespace.
    managed_by: str = "runnerd"
    # A pod not Running by then fails its start and is deleted. Two minutes:
    # a cold pull of the kernel image on a slow node takes tens of seconds;
    # a session the user waits longer for than this is better reported failed.
    start_deadline_s: float = 120.0
    # How long an image pull may back off (ErrImagePull / ImagePullBackOff)
    # before the start fails. A registry hiccup heals within the kubelet's
    # first retries (10 s, 20 s); a wrong image name never does.
    pull_backoff_grace_s: float = 30.0
    # The DNS name session endpoints are published under: a session's tcp
    # port P is `https://P-<session id>.<ingress_base_domain>` through one
    # Ingress. Unset: nothing is published (the ports are reachable only
    # inside the cluster), since only the operator knows a name whose
    # wildcard record points at the cluster's ingress controller.
    ingress_base_domain: str | None = None
    # The Ingress's `ingressClassName`. Unset: the cluster's default class.
    ingress_class: str | None = None
    # A TLS Secret (a wildcard certificate for `*.<ingress_base_domain>`) in the
    # session namespace, named in the Ingress for every host. Unset: no TLS
    # block (the controller's default certificate, if it has one, applies).
    ingress_tls_secret: str | None = None
    # What a starting runnerd does with the session pods a previous process
    # left: "adopt" them (live ones become sessions again, finished ones are
    # reported and deleted), or "reap" them (delete every one). Adopt: a
    # restart or an upgrade should not cost users their running sessions.
    on_restart: Literal["adopt", "reap"] = "adopt"


@dataclass(frozen=True)
class RunnerConfig:
    backend: Literal["local", "kubernetes"] = "local"
    display_name: str = "Telo Runner"
    description: str = "Runs Telo applications on this host."
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


@dataclass(frozen=True)
class Config:
    server: ServerConfig
    runner: RunnerConfig
    session_limits: TierLimits
    app_limits: TierLimits
    local: LocalConfig
    kubernetes: KubeSettings = field(default_factory=KubeSettings)
    terms: TermsConfig | None = None
    apps: Mapping[str, AppEntry] = field(default_factory=dict)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    # The file this was loaded from (SIGHUP re-reads it), None when built in code.
    source: Path | None = None


# Production default: the systemd unit's RuntimeDirectory, reachable only
# through the socket's group. TCP is opt-in: it has no peer credentials.
DEFAULT_LISTEN = ("unix:/run/runnerd/runnerd.sock",)
DEFAULT_SESSION_LIMITS = TierLimits("50m", "100Mi", "512Mi", 3600.0)
DEFAULT_APP_LIMITS = TierLimits("500m", "512Mi", "1Gi", 21600.0)
ENTRY = "{entry}"
# SIGTERM must end the daemon within 10 s (the contract): each workload gets
# this much grace after SIGTERM before SIGKILL, and the shutdown budget must
# still cover it plus the kill and the cleanup.
MAX_STOP_GRACE_S = 5.0


def toml_key(name: str) -> str:
    """A TOML key as written: bare when it can be, quoted otherwise."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)
