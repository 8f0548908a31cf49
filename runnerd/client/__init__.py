"""The `runnerd` command line's client side: verbs that talk to a running daemon.

One module per concern:
- `transport`: where the daemon is (`--socket`, `RUNNERD_SOCKET`, `--url`)
  and plain HTTP to it (stdlib `http.client`: no import cost);
- `ws`: the WebSocket PTY channel over the same endpoint (trio);
- `bundle`: a directory or file as a `/v1` bundle, `.gitignore` applied (pure);
- `terminal`: raw mode, window size, the detach key (restored on every path);
- `pty_channel`: the attach loop (output out, stdin and resizes in);
- `interrupt`: entering trio so that Ctrl-C is one `KeyboardInterrupt`;
- `progress`: the start-up status line on stderr;
- `verbs`, `run`: the verbs; `args`: their argparse definitions;
- `watch` (the verb), `watchsession` (its live part: events, per-app `/io`,
  stdin, signals), `watchview` (what it prints, pure), `sync` (a
  directory's edits as change sets) and `syncloop` (watchfiles → the
  workspace): `runnerd watch`;
- `completion`: bash and zsh completion scripts;
- `attach`: `attach`/`run`'s end: the session's status as an exit code.

Start-up cost matters (a user types these): nothing here imports quart or
hypercorn, nothing imports another runnerd package, and only the verbs
that stream (run, watch, attach, logs) import trio (and only watch imports
watchfiles).
"""
