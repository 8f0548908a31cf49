"""The daemon's root: the one nursery that owns everything runnerd runs.

Owns the process lifecycle's start-up wiring: take the signals first, raise
the open-files limit, build the metrics, bind the listeners (API and
metrics, `runnerd.daemon.listeners`), open the backend (for the daemon's
whole lifetime) with a `BackendContext` naming what sessions must not see
(the config and socket directories) and the metrics, the state directory,
then the runtime object (`runnerd.daemon.runtime`: the session manager and
what the routes share), then hand over to `runnerd.daemon.serving`
(serving, signals, the bounded shutdown) and close everything once it
returns:

- SIGTERM / SIGINT: every session stopped, our unix socket and lock files
  removed; returns `Ended.STOPPED` (exit 0).
- SIGUSR2 (a backend with `detach_supported`): every workload left running
  for a successor, which adopts them; returns `Ended.DETACHED` (the CLI
  exits `EXIT_DETACHED`, which the unit restarts on).
- SIGHUP (`runnerd.daemon.reload`): re-read the config file and swap in its catalog, terms, image
  allowlist, limits, CORS origins, log level and registry sizing (capacity,
  exit TTL, replay size). What is bound at start (listeners, socket mode,
  body limit, backend, workdir, runtimes) stays; a change there is logged
  as needing a restart. A bad file keeps the old config and logs why at ERROR.

Startup failures that are the operator's to fix (a config error, a socket
another runnerd holds, a backend that cannot be opened) raise `ConfigError`
/ `ListenError` before anything serves, and leave nothing bound; the CLI
turns them into exit 2.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import resource
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from runnerd.backend import BackendContext, EndIntent
from runnerd.backends import Configured, provider_for
from runnerd.config import Config
from runnerd.config.server import server_warnings
from runnerd.daemon.adoption import open_state_dir
from runnerd.daemon.listeners import Listener, bind_listeners, close_listeners, refuse_remote
from runnerd.daemon.runtime import build_runtime
from runnerd.daemon.serving import serve_until_signal
from runnerd.daemon.systemd import LISTEN_ENV_KEYS, parse_listen_fds
from runnerd.metrics import NULL_METRICS, Metrics, PrometheusMetrics

log = logging.getLogger("runnerd.daemon")

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2)


class Ended(enum.Enum):
    """How `run_daemon` ended: every session stopped, or (SIGUSR2) every
    workload left running for a successor daemon to adopt."""

    STOPPED = "stopped"
    DETACHED = "detached"


async def run_daemon(config: Config, ahead: object = None) -> Ended:
    """Serve until SIGTERM/SIGINT (or a detach, SIGUSR2), then shut down
    cleanly and return how. `ahead`: what the backend's provider started
    before the daemon's imports (`runnerd.backends.Provider.probe_ahead`).

    Raises:
        ListenError: a listener could not be set up (nothing stays bound).
        ConfigError: the backend cannot be opened (nothing stays bound).
    """
    # Ignored first, so that is what the receiver restores when it closes: a
    # second SIGTERM in the last moments of shutdown must not turn a clean
    # exit into death by signal. (Workloads start while the receiver is
    # installed, so they never inherit the ignore.)
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    # Signals first: a SIGTERM during start-up must take the clean path.
    with trio.open_signal_receiver(*HANDLED_SIGNALS) as signals:
        raise_open_files_limit()
        return_large_buffers_to_the_os()
        for warning in server_warnings(config.server):
            log.warning("config: %s", warning)
        # Before the backend: a backend that counts (apiserver requests) takes it.
        metrics = build_metrics(config)
        provider = provider_for(config)
        # The listeners before the backend: their directories are what no
        # session may see. Every way out closes them, a backend that cannot
        # be opened included, so a failed start leaves nothing bound.
        listeners = _bind_listeners(config)
        metrics_listeners: list[Listener] = []
        try:
            metrics_listeners = _bind_metrics_listeners(config)
            hidden = hidden_from_sessions(config, [*listeners, *metrics_listeners])
            context = BackendContext(hidden_paths=hidden, metrics=metrics, ahead=ahead)
            intent = await _serve_on_backend(
                config, provider, context, signals, listeners, metrics_listeners
            )
        finally:
            close_listeners(metrics_listeners)
            close_listeners(listeners)
    ended = Ended.DETACHED if intent is EndIntent.DETACH else Ended.STOPPED
    log.info("runnerd stopped", extra={"sessions": ended.value})
    return ended


async def _serve_on_backend(
    config: Config,
    provider: Configured,
    context: BackendContext,
    signals: AsyncIterator[int],
    listeners: list[Listener],
    metrics_listeners: list[Listener],
) -> EndIntent:
    # Open for the daemon's lifetime: entered before the session manager
    # runs, left after every session has ended (`serve_until_signal`
    # returns then).
    async with provider.open_backend(config, context) as backend:
        try:
            files = open_state_dir(config, backend)
            state = build_runtime(config, backend, provider, context.metrics, files)
            return await serve_until_signal(state, listeners, signals, metrics_listeners)
        finally:
            # Before the backend winds down (its last removals): no client
            # waits meanwhile on a socket nobody serves.
            close_listeners(metrics_listeners)
            close_listeners(listeners)


# glibc's mallopt parameter number for the mmap threshold (malloc.h).
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 128 * 1024


def return_large_buffers_to_the_os() -> None:
    """Serve every allocation above 128 KiB from its own mmap, always.

    glibc raises its mmap threshold each time a large mmapped block is freed
    (up to 32 MiB), so after the first big request body, later 16 MiB
    buffers come from the heap, whose freed top is rarely given back: RSS
    stayed at 130-160 MB after a burst of 16 MiB bodies (bench/README.md).
    Setting the threshold fixes it (and turns the adjustment off), so a
    request's buffers go back to the OS when it ends. A no-op off glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")  # glibc's soname; find_library would fork ldconfig
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        log.debug("mallopt unavailable; large buffers may stay resident")


def raise_open_files_limit() -> None:
    """Raise the soft open-files limit to the hard one: every session holds
    a PTY and a pidfd, and the default soft 1024 caps runnerd far below any
    sensible `max_sessions` (systemd sets the hard limit, `LimitNOFILE=`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit", extra={"soft": soft, "error": str(exc)})
        return
    log.info("raised the open files limit", extra={"from": soft, "to": hard})


def _bind_listeners(config: Config) -> list[Listener]:
    inherited = parse_listen_fds(os.environ, os.getpid())
    for key in LISTEN_ENV_KEYS:
        os.environ.pop(key, None)  # never handed on (sd_listen_fds convention)
    listeners = bind_listeners(
        config.server.listen, socket_mode=config.server.socket_mode, inherited_fds=inherited
    )
    refuse_remote(listeners, allow_remote=config.server.allow_remote)
    return listeners


def hidden_from_sessions(config: Config, listeners: list[Listener]) -> tuple[Path, ...]:
    """What no session may see (`BackendContext.hidden_paths`): the config
    file's directory (its apps.d/ with catalog env secrets is there too) and
    the directory of every unix socket runnerd serves (the API, metrics)."""
    files = [] if config.source is None else [config.source.absolute()]
    for listener in listeners:
        address = listener.address
        if address.startswith("unix:/"):  # not an abstract socket
            files.append(Path(address.removeprefix("unix:")))
    # A file directly in / is covered itself: covering / would hide everything.
    return tuple(file if file.parent == Path("/") else file.parent for file in files)


def build_metrics(config: Config) -> Metrics:
    """Prometheus metrics when `[metrics] listen` is set; else nothing is counted."""
    return PrometheusMetrics() if config.metrics.listen else NULL_METRICS


def _bind_metrics_listeners(config: Config) -> list[Listener]:
    # Never inherited sockets: every socket systemd passes serves the API.
    return bind_listeners(
        config.metrics.listen,
        socket_mode=config.server.socket_mode,
        inherited_fds=(),
        key="metrics.listen",
    )
