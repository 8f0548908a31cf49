"""The local backend package: sessions as processes on this host under a PTY.

`LocalBackend` (in `backend`) is the public entry; `pty` owns the PTY child,
`launch` the argv/env, `workdir` the session directory.

May import: `contract`, `errors`, `backend`, `config`, `workload`. Never
`session`, `http`, `daemon`, `cli` or another backend.
"""

from runnerd.local.backend import LocalBackend

__all__ = ["LocalBackend"]
