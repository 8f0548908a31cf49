"""The local backend package: sessions as processes on this host under a PTY.

`LocalBackend` (in `backend`) is the public entry; `spawn` starts a session
process on a PTY (`pty`) or, for a watch session's `streams` app, on pipes
(`streams`), and `child` owns either one's wait and teardown; `launch` the
argv/env, `workdir` the session directory, `workspace` a watch session's
workspace in it (`dirfd`, `treeops`, `checkpoint` its parts), `network` and
`forward` each session's network namespace and its published ports. What
the core asks of a backend package (`runnerd.backends.Provider`: config check, offered
images, stop timeout, `open_backend`) is `provider`'s, re-exported here.

May import: `contract`, `errors`, `backend`, `config`, `workload`, `watch`. Never
`session`, `http`, `daemon`, `cli` or another backend.
"""

from runnerd.local.backend import LocalBackend
from runnerd.local.provider import (
    NAME,
    bound_changes,
    check_config,
    config_warnings,
    keep_bound,
    offered_images,
    open_backend,
    stop_timeout_s,
)

__all__ = [
    "NAME",
    "LocalBackend",
    "bound_changes",
    "check_config",
    "config_warnings",
    "keep_bound",
    "offered_images",
    "open_backend",
    "stop_timeout_s",
]
