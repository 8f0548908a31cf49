"""The local backend package: sessions as processes on this host under a PTY.

`LocalBackend` (in `backend`) is the public entry (what it checks and
announces before a session runs: `preflight`); `containment` holds a
session's processes together (`mounts`: its mount namespace); `spawn` starts a session
process on a PTY (`pty`) or, for a watch session's `streams` app, on pipes
(`streams`), under its init (`sessioninit`: the compiled `nsinit.c` or
`nsinit.py`), and `child` owns either one's wait and teardown; `launch` the
argv/env, `workdir` the session directory, `workspace` a watch session's
workspace in it (`dirfd`, `treeops`, `checkpoint` its parts), `network` and
`forward` each session's network namespace and its published ports;
`watching` a watch session's place (`LocalBackend.open_watch`: its
workspace, checkpoints and processes: `watchhost`) and `sandbox` the
namespaces its apps share (`joined`: how an app enters them). What
the core asks of a backend package (`runnerd.backends.Provider`) is
re-exported here: its settings from `settings` (`SETTINGS` = `LocalConfig`,
the `[local]` table parsed by `parse_settings`, printed by `render`, kept and
compared on a reload by `keep_bound` / `bound_changes`), the rest from
`provider` (config check, offered images, stop timeout, warnings,
`open_backend`). The package is imported only when `runner.backend` is
"local"; every part of it reads its settings typed, `config.settings` of a
`Config[LocalConfig]`.

May import: `contract`, `errors`, `backend`, `config`, `workload`, `watch`. Never
`session`, `http`, `daemon`, `cli` or another backend.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runnerd.local.backend import LocalBackend
    from runnerd.local.provider import (
        NAME,
        SETTINGS,
        WATCH_IO,
        check_config,
        config_warnings,
        offered_images,
        open_backend,
        probe_ahead,
        stop_timeout_s,
    )
    from runnerd.local.settings import KEYS, bound_changes, keep_bound, parse_settings, render

# Where each name lives, imported on its first use: a module of the package
# then imports without the backend (and trio) behind it, as the start-up
# probe child (`hostprobe`) imports `containment` and `network` under
# `python -I -S`. The daemon's first use, `runnerd.backends.provider_for`,
# imports them all.
_HOMES = {
    "LocalBackend": "runnerd.local.backend",
    **dict.fromkeys(
        (
            "NAME",
            "SETTINGS",
            "WATCH_IO",
            "check_config",
            "config_warnings",
            "offered_images",
            "open_backend",
            "probe_ahead",
            "stop_timeout_s",
        ),
        "runnerd.local.provider",
    ),
    **dict.fromkeys(
        ("KEYS", "bound_changes", "keep_bound", "parse_settings", "render"),
        "runnerd.local.settings",
    ),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later reads are plain attribute reads
    return value


__all__ = [
    "KEYS",
    "NAME",
    "SETTINGS",
    "WATCH_IO",
    "LocalBackend",
    "bound_changes",
    "check_config",
    "config_warnings",
    "keep_bound",
    "offered_images",
    "open_backend",
    "parse_settings",
    "probe_ahead",
    "render",
    "stop_timeout_s",
]
