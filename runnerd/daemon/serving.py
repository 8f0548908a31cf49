"""Serving until a stop signal, then the bounded shutdown.

Owns what runs once the daemon is wired (`runnerd.daemon.main` builds the
backend, the session manager and the listeners, then calls
`serve_until_signal`): the session manager's nursery, the API and metrics
servers on hypercorn's trio worker, the background recovery, telling
systemd we are ready (and the watchdog), and the signals:

- SIGTERM / SIGINT: set `state.closing` (SSE and WebSocket streams end at once
  so hypercorn can finish), stop accepting, stop every live session (every
  workload gone), close and unlink the listeners, return `EndIntent.STOP`.
  The whole shutdown is bounded by `SHUTDOWN_BUDGET_S`; after that the
  session nursery is cancelled, which still stops every workload (stop
  means cancel).
- SIGUSR2 (a backend with `detach_supported`): the same, except that every
  workload is left running and each session's replay saved in
  `runner.state_dir` for the successor, which adopts them; returns
  `EndIntent.DETACH`. Refused, logged, by a backend that cannot.
- SIGHUP (`runnerd.daemon.reload`): re-read the config file and swap in what
  can change without a restart.

Recovery (`Backend.recover()`: what a previous daemon left) runs in the
background once the listeners serve: `/v1/health` answers at once however
slow the backend is, and a request for an unknown session id waits for it
(bounded, `SessionManager.find`) rather than answering a spurious 404.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import AsyncIterator

import trio
from hypercorn.config import Config as HypercornConfig

from runnerd import __version__
from runnerd.backend import EndIntent
from runnerd.config import Config, ServerConfig
from runnerd.daemon.adoption import recover_sessions
from runnerd.daemon.listeners import Listener, close_listeners
from runnerd.daemon.reload import reload_config
from runnerd.daemon.runtime import Runtime
from runnerd.daemon.systemd import parse_watchdog_interval, run_watchdog, sd_notify
from runnerd.http.app import create_app
from runnerd.http.guard import HostSyntaxGuard
from runnerd.http.server import (
    connection_cap,
    dup_socket,
    fds_needed,
    open_files_limit,
    serve_app,
)
from runnerd.metrics import PrometheusMetrics, metrics_asgi_app
from runnerd.session.errors import DetachUnsupported

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


async def serve_until_signal(
    state: Runtime,
    listeners: list[Listener],
    signals: AsyncIterator[int],
    metrics_listeners: list[Listener] | None = None,
) -> EndIntent:
    """Run the sessions, serve the API (and metrics), announce readiness,
    and handle signals until a stop; then shut down within
    `SHUTDOWN_BUDGET_S` and return how every session was ended."""
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
    return intent


async def _run_http(
    state: Runtime,
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
    state: Runtime,
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
    state: Runtime,
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
    state: Runtime, listeners: list[Listener], http_done: trio.Event, intent: EndIntent
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


async def _handle_signals_until_stop(state: Runtime, signals: AsyncIterator[int]) -> int:
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
