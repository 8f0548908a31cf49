"""The daemon: the root nursery and what lives for its whole lifetime.

Owns `main` (`run_daemon`: start-up wiring: the listeners, then the backend
opened for the daemon's lifetime with its `BackendContext`), `runtime`
(`Runtime`, the daemon's runtime object: config in effect, backend, session
manager, metrics, stream subscribers; the HTTP edge sees it only through
its own `runnerd.http.state.AppState` protocol), `serving` (the HTTP
servers, signals, the bounded shutdown), `adoption` (the state directory and
recovery after a restart), `reload` (SIGHUP: the config and the session
manager's limits and catalog), `listeners` (binding `server.listen`, socket
activation), `systemd` (sd_notify, watchdog, LISTEN_FDS) and `logs` (the
one-line log format).

May import every layer below it. It picks the configured backend through
`runnerd.backends`, the one table that names them.
"""
