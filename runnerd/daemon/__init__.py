"""The daemon: the root nursery and what lives for its whole lifetime.

Owns `main` (`run_daemon`: start-up wiring: the backend opened for the
daemon's lifetime, the session manager, the listeners), `serving` (the HTTP
servers, signals, the bounded shutdown), `adoption` (the state directory and
recovery after a restart), `reload` (SIGHUP), `listeners`
(binding `server.listen`, socket activation), `systemd` (sd_notify,
watchdog, LISTEN_FDS) and `logs` (the one-line log format).

May import every layer below it. It picks the configured backend through
`runnerd.backends`, the one table that names them.
"""
