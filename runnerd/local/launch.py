"""What the local backend executes: the argv and environment of a session.

Owns the runtime lookup, the `{entry}` / `{inspect_port}` substitution and the
workload environment. Pure apart from `resolve_executable`,
`read_interpreter` and `same_file`, which look at the filesystem.

Why executables are resolved here, with the daemon's PATH: the workload gets a
minimal PATH (`MINIMAL_PATH`, after the runtime's own `path` directories),
but an operator's runtime may name a program that only the daemon's PATH
finds (`python3` under pyenv, for instance). So `command[0]` is resolved
against the runtime's `path`, then the daemon's PATH, then the minimal one,
at probe and at start, and the child execs that absolute path. The
workload's PATH still applies to everything the workload itself runs,
including the interpreter of a `#!/usr/bin/env node` script.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runnerd.config.envnames import is_env_name
from runnerd.local.runtimes import INSTALL_HINTS, runtime_search_path
from runnerd.local.runtimes import MINIMAL_PATH as MINIMAL_PATH
from runnerd.local.runtimes import search_path as search_path
from runnerd.local.settings import RuntimeConfig

ENTRY = "{entry}"
INSPECT_PORT = "{inspect_port}"


@dataclass(frozen=True)
class Unresolved:
    """Why a runtime cannot run; `message` and `remediation` are client-safe."""

    message: str
    remediation: str


def resolve_executable(program: str, path: str) -> str | None:
    """`program` as an absolute path of an executable file, or None."""
    if "/" in program:
        absolute = os.path.abspath(program)
        return absolute if os.path.isfile(absolute) and os.access(absolute, os.X_OK) else None
    found = shutil.which(program, path=path)
    return os.path.abspath(found) if found else None


def resolve_runtime(
    runtimes: Mapping[str, RuntimeConfig], image: str, path: str
) -> tuple[RuntimeConfig, str] | Unresolved:
    """The runtime named `image` and its executable's absolute path."""
    runtime = runtimes.get(image)
    if runtime is None:
        # The configured runtimes are not listed: catalog apps' runtimes are
        # among them, and those never reach a client (capabilities lists the
        # images a client may pick).
        return Unresolved(
            f"no local runtime named '{image}'",
            f"pick an image listed in /v1/capabilities, or add [local.runtimes.{image}]"
            " to the runnerd config",
        )
    if not runtime.command:
        return Unresolved(
            f"local runtime '{image}' has an empty command",
            f"set local.runtimes.{image}.command in the runnerd config",
        )
    program = runtime.command[0]
    executable = resolve_executable(program, runtime_search_path(runtime, path))
    if executable is None:
        what = INSTALL_HINTS.get(program, f"'{program}'")
        return Unresolved(
            f"local runtime '{image}': executable '{program}' not found",
            f"install {what} on the runner host, or fix local.runtimes.{image}.command",
        )
    return runtime, executable


def build_argv(
    runtime: RuntimeConfig,
    executable: str,
    *,
    entry: Path | None,
    inspect_port: int | None,
    watch: bool = False,
) -> list[str]:
    """The command line: `{entry}` → `entry`, and with `inspect_port` the
    runtime's `inspect_args` appended with `{inspect_port}` substituted;
    with `watch` (a watch session's app on a `watch = "self"` runtime) its
    `watch_args` appended after them.

    Raises:
        ValueError: the command needs `{entry}` but there is no bundle.
    """
    argv = [executable, *runtime.command[1:]]
    if inspect_port is not None:
        argv += [arg.replace(INSPECT_PORT, str(inspect_port)) for arg in runtime.inspect_args]
    if watch:
        argv += runtime.watch_args
    if any(ENTRY in arg for arg in argv):
        if entry is None:
            raise ValueError(
                f"runtime '{runtime.name}' runs a bundle entry ({ENTRY}), and an app session"
                " has no bundle"
            )
        argv = [arg.replace(ENTRY, str(entry)) for arg in argv]
    return argv


def read_interpreter(script: str) -> tuple[str, ...] | None:
    """The words of `script`'s `#!` line (`("/usr/bin/env", "node")`), or None:
    not a script, or unreadable."""
    try:
        with open(script, "rb") as file:
            head = file.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = tuple(head[2:].split(b"\n", 1)[0].decode(errors="replace").split())
    return words or None


def same_file(a: str, b: str) -> bool:
    """`a` and `b` are the same file (/bin/node and /usr/bin/node on merged /usr)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b


def build_env(
    session_env: Mapping[str, str], *, home: Path, path: str = MINIMAL_PATH
) -> dict[str, str]:
    """The workload's whole environment: the session env over our plumbing
    (`path` is its PATH: `runtimes.workload_path` of its runtime).

    Never the daemon's own environment. The session's values win, as with a
    container's `-e` over its image defaults: the env is the client's (or the
    operator's, for catalog apps), and the executable is already resolved.

    Raises:
        ValueError: a key outside the one env-name rule (`runnerd.config.envnames`)
            or a value with a NUL byte; names the key, never a value.
    """
    for key, value in session_env.items():
        if not is_env_name(key):
            raise ValueError(f"env key {key!r} is not a valid environment variable name")
        if "\0" in value:
            raise ValueError(f"env {key} contains a NUL character")
    plumbing = {
        "PATH": path,
        "HOME": str(home),
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
    }
    return {**plumbing, **session_env}
