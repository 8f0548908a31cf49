"""What a valid config may still get wrong on this host: warnings, not errors.

Owns `runtime_problems` (pure: the executable lookup is injected), which
`runnerd check-config` prints and the local backend logs at start-up. A
runtime whose executable is missing is a warning, not an error: the file is
valid, and the operator may install the program after checking it (every
session on that runtime fails to start until then, naming the program).
"""

from __future__ import annotations

from collections.abc import Callable

from runnerd.config.model import LocalConfig, toml_key

# Searched after the daemon's own PATH, and the workload's PATH.
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
# What systemd sets as PATH for a service (systemd.exec(5), "Environment").
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# How to install the runtime the production config names; for the message.
INSTALL_HINTS = {"telo": "the Telo CLI: npm install -g @telorun/cli (Node.js 24 or newer)"}


def search_path(daemon_path: str | None) -> str:
    """The PATH used to find a runtime's executable: the daemon's, then the
    minimal directories it lacks (each directory once, in that order)."""
    entries = [*(daemon_path or "").split(":"), *MINIMAL_PATH.split(":")]
    return ":".join(dict.fromkeys(entry for entry in entries if entry))


def runtime_problems(
    local: LocalConfig,
    *,
    find: Callable[[str, str], str | None],
    path: str,
    service_path: str,
) -> list[str]:
    """One warning per runtime whose executable `find(program, path)` does not
    find on `path`, or finds there but not on `service_path` (systemd's), so
    that a unit would fail where a shell succeeds."""
    warnings = []
    for name, runtime in local.runtimes.items():
        program = runtime.command[0]
        key = f"local.runtimes.{toml_key(name)}.command"
        hint = INSTALL_HINTS.get(program)
        install = f"install {hint}" if hint else f"install '{program}'"
        found = find(program, path)
        if found is None and "/" in program:
            warnings.append(
                f"{key}: '{program}' does not exist (or is not executable); every session"
                f" on runtime '{name}' will fail to start: install it there, or correct the path"
            )
        elif found is None:
            warnings.append(
                f"{key}: executable '{program}' not found on PATH ({path}); every session"
                f" on runtime '{name}' will fail to start: {install}, or give its absolute path"
            )
        elif "/" not in program and find(program, service_path) is None:
            warnings.append(
                f"{key}: '{program}' is {found}, which is not on a systemd service's PATH"
                f" ({service_path}): under systemd write the absolute path"
            )
    return warnings
