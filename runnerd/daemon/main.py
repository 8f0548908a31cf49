"""The daemon's root: the one nursery that owns everything runnerd runs.

Owns the process lifecycle: build the backend and the session manager, bind
the listeners (`runnerd.listeners`), serve the app on hypercorn's trio worker,
tell systemd we are ready, and handle signals:

- SIGTERM / SIGINT: set `state.closing` (SSE and WebSocket streams end at once
  so hypercorn can finish), stop accepting, stop every live session (every
  workload gone), remove our unix socket and lock files, return (exit 0). The
  whole shutdown is bounded by `SHUTDOWN_BUDGET_S`; after that the session
  nursery is cancelled, which still stops every workload (stop means cancel).
- SIGUSR2 (a backend with `detach_supported`): the same, except that every
  workload is left running and each session's replay saved in
  `runner.state_dir` for the successor, which adopts them; returns
  `Ended.DETACHED` (the CLI exits `EXIT_DETACHED`, which the unit restarts
  on). Refused, logged, by a backend that cannot.

Recovery (`Backend.recover()`: what a previous daemon left) runs in the
background once the listeners serve: `/v1/health` answers at once however
slow the backend is, and a request for an unknown session id waits for it
(bounded, `SessionManager.find`) rather than answering a spurious 404.
- SIGHUP (`runnerd.daemon.reload`): re-read the config file and swap in its catalog, terms, image
  allowlist, limits, CORS origins, log level and registry sizing (capacity,
  exit TTL, replay size). What is bound at start (listeners, socket mode,
  body limit, backend, workdir, runtimes) stays; a change there is logged
  as needing a restart. A bad file keeps the old config and logs why at ERROR.

Startup failures that are the operator's to fix (a config error, a socket
another runnerd holds) raise `ConfigError` / `ListenError` before anything
listens; the CLI turns them into exit 2.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import resource
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import trio
from hypercorn.config import Config as HypercornConfig

from runnerd import __version__
from runnerd.backend import Backend, EndIntent
from runnerd.backends import Provider, provider_for
from runnerd.config import AppEntry, Config, ServerConfig
from runnerd.config.server import server_warnings
from runnerd.daemon.adoption import open_state_dir, recover_sessions
from runnerd.daemon.listeners import Listener, bind_listeners, close_listeners, refuse_remote
from runnerd.daemon.reload import reload_config
from runnerd.daemon.systemd import (
    LISTEN_ENV_KEYS,
    parse_listen_fds,
    parse_watchdog_interval,
    run_watchdog,
    sd_notify,
)
from runnerd.http.app import create_app
from runnerd.http.guard import HostSyntaxGuard
from runnerd.http.server import (
    connection_cap,
    dup_socket,
    fds_needed,
    open_files_limit,
    serve_app,
)
from runnerd.http.state import AppState
from runnerd.metrics import NULL_METRICS, Metrics, PrometheusMetrics, metrics_asgi_app
from runnerd.session.errors import DetachUnsupported
from runnerd.session.manager import SessionManager
from runnerd.session.statefile import StateDir

log = logging.getLogger("runnerd.daemon")

# SIGTERM to exit: the contract says 10 s; keep headroom for interpreter exit.
SHUTDOWN_BUDGET_S = 8.0
# How long hypercorn lets in-flight requests finish once it stops accepting.
# Streams end on `state.closing` and plain requests are short, but hypercorn
# 0.18 (trio worker) also holds every idle keep-alive connection for the full
# graceful timeout (measured: one idle httpx client = +2 s at 2.0), so keep
# it short: it is paid on every shutdown a client is connected at.
GRACEFUL_TIMEOUT_S = 0.5


def build_hypercorn_config(server: ServerConfig) -> HypercornConfig:
    """hypercorn's settings; the sockets are handed to `serve_app` directly."""
    cfg = HypercornConfig()
    cfg.accesslog = None
    # Idle keep-alive connections close after this, and a request head must
    # arrive within it (see runnerd.http.server). Streams are exempt: the
    # timer stops while a request is in flight.
    cfg.keep_alive_timeout = server.idle_timeout_s
    cfg.errorlog = logging.getLogger("hypercorn.error")
    cfg.graceful_timeout = GRACEFUL_TIMEOUT_S
    cfg.include_server_header = False
    return cfg


HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2)


class Ended(enum.Enum):
    """How `run_daemon` ended: every session stopped, or (SIGUSR2) every
    workload left running for a successor daemon to adopt."""

    STOPPED = "stopped"
    DETACHED = "detached"


async def run_daemon(config: Config) -> Ended:
    """Serve until SIGTERM/SIGINT (or a detach, SIGUSR2), then shut down
    cleanly and return how.

    Raises:
        ConfigError: the backend cannot be built (nothing was bound).
        ListenError: a listener could not be set up (nothing stays bound).
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
        state: AppState | None = None

        def apps() -> Mapping[str, AppEntry]:
            return (state.config if state is not None else config).apps

        # Before the backend: a backend that counts (apiserver requests) takes it.
        metrics = build_metrics(config)
        provider = provider_for(config)
        # Open for the daemon's lifetime: entered before the session manager
        # runs, left after every session has ended (`_serve` returns then).
        async with provider.open_backend(config, apps) as backend:
            files = open_state_dir(config, backend)
            listeners = _bind_listeners(config)
            metrics_listeners: list[Listener] = []
            try:
                metrics_listeners = _bind_metrics_listeners(config)
                _hide_from_sessions(backend, config, [*listeners, *metrics_listeners])
                state = build_state(config, backend, provider, metrics, files)
                ended = await _serve(state, listeners, signals, metrics_listeners)
            finally:
                close_listeners(metrics_listeners)
                close_listeners(listeners)
    log.info("runnerd stopped", extra={"sessions": ended.value})
    return ended


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


def hidden_from_sessions(config: Config, listeners: list[Listener]) -> list[Path]:
    """What no session may see: the config file's directory (its apps.d/
    with catalog env secrets is there too) and the directory of every unix
    socket runnerd serves (the API, metrics)."""
    files = [] if config.source is None else [config.source.absolute()]
    for listener in listeners:
        address = listener.address
        if address.startswith("unix:/"):  # not an abstract socket
            files.append(Path(address.removeprefix("unix:")))
    # A file directly in / is covered itself: covering / would hide everything.
    return [file if file.parent == Path("/") else file.parent for file in files]


def _hide_from_sessions(backend: Backend, config: Config, listeners: list[Listener]) -> None:
    # A backend whose sessions share this host's file system takes the list
    # (the local one); the others have nothing to hide.
    hide: Callable[[list[Path]], None] | None = getattr(backend, "hide_from_sessions", None)
    if hide is not None:
        hide(hidden_from_sessions(config, listeners))


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


def build_state(
    config: Config,
    backend: Backend,
    provider: Provider,
    metrics: Metrics = NULL_METRICS,
    files: StateDir | None = None,
) -> AppState:
    sessions = SessionManager(
        backend,
        max_sessions=config.runner.max_sessions,
        exit_ttl_s=config.runner.exit_ttl_s,
        replay_buffer_bytes=config.runner.replay_buffer_bytes,
        stop_timeout_s=provider.stop_timeout_s(config),
        metrics=metrics,
        state=files,
    )
    metrics.watch_sessions(lambda: [s.status["kind"] for s in sessions.sessions()])
    return AppState(
        config=config,
        backend=backend,
        sessions=sessions,
        version=__version__,
        closing=trio.Event(),
        metrics=metrics,
        offered_images=provider.offered_images,
    )


async def _serve(
    state: AppState,
    listeners: list[Listener],
    signals: AsyncIterator[int],
    metrics_listeners: list[Listener] | None = None,
) -> Ended:
    stop_http = trio.Event()
    http_done = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(state.sessions.run)
        # Before the first request: an unknown id waits for the recovery.
        state.sessions.begin_recovery()
        await nursery.start(_run_http, state, listeners, stop_http, http_done)
        nursery.start_soon(recover_sessions, state)
        if isinstance(state.metrics, PrometheusMetrics) and metrics_listeners:
            await nursery.start(_serve_metrics, state.metrics, state, metrics_listeners, stop_http)
        await _announce_ready(state, listeners, nursery, metrics_listeners or [])
        signum = await _handle_signals_until_stop(state, signals)
        intent = EndIntent.DETACH if signum == signal.SIGUSR2 else EndIntent.STOP
        log.info(
            "shutting down", extra={"signal": signal.Signals(signum).name, "sessions": intent.value}
        )
        await sd_notify("STOPPING=1", "STATUS=stopping sessions")
        state.closing.set()
        stop_http.set()
        await _shut_down(state, listeners, http_done, intent)
        nursery.cancel_scope.cancel()
    return Ended.DETACHED if intent is EndIntent.DETACH else Ended.STOPPED


async def _run_http(
    state: AppState,
    listeners: list[Listener],
    stop: trio.Event,
    done: trio.Event,
    *,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    """Serve the API on `listeners` until `stop`; set `done` when it has ended."""
    try:
        server = state.config.server
        cap = _connection_cap(state.config, len(listeners))
        await serve_app(
            HostSyntaxGuard(create_app(state)),
            build_hypercorn_config(server),
            # A dup per listener: the accept loop closes its sockets when it
            # ends, while `close_listeners` closes (and unlinks) ours.
            [dup_socket(listener.sock) for listener in listeners],
            max_connections=cap,
            shutdown_trigger=stop.wait,
            on_cap=state.metrics.connection_cap,
            task_status=task_status,
        )
    finally:
        done.set()


def _connection_cap(config: Config, listeners: int) -> int:
    """`server.max_connections` fitted to the open files limit, logged when
    lowered: a WARNING naming the fix when the limit leaves no room for the
    sessions too (the cap then stays at `MIN_CONNECTIONS`, so sessions near
    `max_sessions` may fail to open files)."""
    nofile, max_sessions = open_files_limit(), config.runner.max_sessions
    wanted = config.server.max_connections
    cap = connection_cap(wanted, listeners, nofile, max_sessions)
    if cap == wanted:
        return cap
    needed = fds_needed(wanted, listeners, max_sessions)
    extra = {"max_connections": cap, "nofile": nofile, "needed": needed}
    if nofile >= fds_needed(cap, listeners, max_sessions):
        log.info("connection cap lowered to fit the open files limit", extra=extra)
    else:
        log.warning(
            "open files limit too low for runner.max_sessions=%d and %d connections per "
            "listener: raise it (LimitNOFILE= in the unit, ulimit -n) to %d, or lower "
            "runner.max_sessions",
            max_sessions, cap, needed, extra=extra,
        )  # fmt: skip
    return cap


# A scraper holds one connection or a few: a small cap bounds what a
# misbehaving one can take, and idle/request timeouts apply as on the API.
METRICS_MAX_CONNECTIONS = 16


async def _serve_metrics(
    metrics: PrometheusMetrics,
    state: AppState,
    listeners: list[Listener],
    stop: trio.Event,
    *,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    """`GET /metrics` on its own listeners until `stop`, through the same
    bounded connection handling and the same Host/Origin guard as the API
    (a DNS-rebinding page must not read them either)."""
    await serve_app(
        HostSyntaxGuard(metrics_asgi_app(metrics), lambda: state.config),
        build_hypercorn_config(state.config.server),
        [dup_socket(listener.sock) for listener in listeners],
        max_connections=METRICS_MAX_CONNECTIONS,
        shutdown_trigger=stop.wait,
        on_cap=metrics.connection_cap,
        task_status=task_status,
    )


async def _announce_ready(
    state: AppState,
    listeners: list[Listener],
    nursery: trio.Nursery,
    metrics_listeners: list[Listener],
) -> None:
    addresses = " ".join(listener.address for listener in listeners)
    extra = {"listen": addresses, "backend": state.backend.name, "pid": os.getpid()}
    if metrics_listeners:
        extra["metrics"] = " ".join(listener.address for listener in metrics_listeners)
    log.info("runnerd %s serving", __version__, extra=extra)
    await sd_notify("READY=1", f"STATUS=serving on {addresses}", f"MAINPID={os.getpid()}")
    interval_s = parse_watchdog_interval(os.environ, os.getpid())
    if interval_s is not None:
        nursery.start_soon(run_watchdog, interval_s)


async def _shut_down(
    state: AppState, listeners: list[Listener], http_done: trio.Event, intent: EndIntent
) -> None:
    """Stop listening and end every session with `intent`, within `SHUTDOWN_BUDGET_S`."""

    async def stop_listening() -> None:
        await http_done.wait()
        # Closed and unlinked now, not after the sessions: a client gets
        # "connection refused" at once instead of hanging in the backlog.
        close_listeners(listeners)

    with trio.move_on_after(SHUTDOWN_BUDGET_S) as budget:
        async with trio.open_nursery() as shutdown:
            shutdown.start_soon(stop_listening)
            await state.sessions.stop_all(intent)
    if budget.cancelled_caught:
        log.error(
            "shutdown budget exceeded; cancelling what is left",
            extra={"budget_s": SHUTDOWN_BUDGET_S},
        )


async def _handle_signals_until_stop(state: AppState, signals: AsyncIterator[int]) -> int:
    """Reload on SIGHUP; return the first SIGTERM/SIGINT received, or a
    SIGUSR2 (exit, leaving the workloads for a successor daemon) when the
    backend can detach. A backend that cannot (the local one) refuses it with
    an ERROR naming why, and the daemon keeps serving: its workloads would
    otherwise be left with no owner."""
    async for signum in signals:
        if signum == signal.SIGHUP:
            await reload_config(state)
        elif signum != signal.SIGUSR2 or state.backend.detach_supported:
            return signum
        else:
            refusal = DetachUnsupported(state.backend.name)
            log.error("SIGUSR2 refused, still serving: %s", refusal.message)
    raise AssertionError("the signal receiver never ends")
