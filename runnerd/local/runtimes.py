"""What a valid config may still get wrong on this host: warnings, not errors.

Owns `runtime_problems` (pure: the executable lookup, the reading of a
script's `#!` line and the same-file test are injected),
which `runnerd check-config` prints and the local backend logs at start-up,
and the PATHs a runtime is looked up on and runs with. A runtime whose
executable is missing is a warning, not an error: the file is valid, and the
operator may install the program after checking it (every session on that
runtime fails to start until then, naming the program).

A runtime whose executable is a script (`telo` is `#!/usr/bin/env node`)
runs the interpreter that the *workload's* PATH finds (`workload_path`: the
runtime's `path`, then `MINIMAL_PATH`), which may not be the one the
operator's shell finds: Debian's node 20 instead of a Node.js 24 under
/opt. That is a warning naming the script, its interpreter and both
resolutions, with the `path` key that fixes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runnerd.config import toml_key
from runnerd.local.settings import LocalConfig, RuntimeConfig

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


def runtime_search_path(runtime: RuntimeConfig, path: str) -> str:
    """Where `runtime.command[0]` is looked up: its `path` first, then `path`."""
    return ":".join(dict.fromkeys(e for e in (*runtime.path, *path.split(":")) if e))


def workload_path(runtime: RuntimeConfig) -> str:
    """The PATH a session on `runtime` gets (unless its env sets one)."""
    return runtime_search_path(runtime, MINIMAL_PATH)


def env_program(interpreter: tuple[str, ...]) -> str | None:
    """The program a `#!/usr/bin/env [-S] [NAME=V...] PROG ...` line looks up
    on PATH, or None (an absolute interpreter, or no program named)."""
    if not interpreter or interpreter[0].rsplit("/", 1)[-1] != "env":
        return None
    for word in " ".join(interpreter[1:]).split():
        if not word.startswith("-") and "=" not in word:
            return None if "/" in word else word
    return None


Find = Callable[[str, str], str | None]
Interpreter = Callable[[str], tuple[str, ...] | None]


@dataclass(frozen=True)
class _Host:
    find: Find
    interpreter: Interpreter
    same_file: Callable[[str, str], bool]


def runtime_problems(
    local: LocalConfig,
    *,
    find: Find,
    path: str,
    service_path: str,
    interpreter: Interpreter = lambda _script: None,
    same_file: Callable[[str, str], bool] = lambda a, b: a == b,
) -> list[str]:
    """One warning per runtime whose executable `find(program, path)` does not
    find on `path` (each runtime's `path` searched first), or finds there but
    not on `service_path` (systemd's), so that a unit would fail where a shell
    succeeds; and one per runtime whose script's `#!/usr/bin/env PROG`
    (`interpreter(script)`: the words of its `#!` line, or None) finds no
    PROG on the workload's PATH, or another file (`same_file`) than on `path`."""
    host = _Host(find, interpreter, same_file)
    warnings = []
    for name, runtime in local.runtimes.items():
        found = find(runtime.command[0], runtime_search_path(runtime, path))
        problem = _executable_problem(name, runtime, found, host, path, service_path)
        if problem is None and found is not None:
            problem = _interpreter_problem(name, runtime, found, host, path)
        if problem is not None:
            warnings.append(problem)
    return warnings


def _executable_problem(
    name: str,
    runtime: RuntimeConfig,
    found: str | None,
    host: _Host,
    path: str,
    service_path: str,
) -> str | None:
    program = runtime.command[0]
    key = f"local.runtimes.{toml_key(name)}.command"
    hint = INSTALL_HINTS.get(program)
    install = f"install {hint}" if hint else f"install '{program}'"
    if found is None and "/" in program:
        return (
            f"{key}: '{program}' does not exist (or is not executable); every session"
            f" on runtime '{name}' will fail to start: install it there, or correct the path"
        )
    if found is None:
        return (
            f"{key}: executable '{program}' not found on PATH"
            f" ({runtime_search_path(runtime, path)}); every session"
            f" on runtime '{name}' will fail to start: {install}, or give its absolute path"
        )
    on_service_path = host.find(program, runtime_search_path(runtime, service_path))
    if "/" not in program and on_service_path is None:
        return (
            f"{key}: '{program}' is {found}, which is not on a systemd service's PATH"
            f" ({service_path}): under systemd write the absolute path"
        )
    return None


def _interpreter_problem(
    name: str, runtime: RuntimeConfig, script: str, host: _Host, path: str
) -> str | None:
    interpreter = host.interpreter(script)
    program = env_program(interpreter or ())
    if interpreter is None or program is None:
        return None
    key = f"local.runtimes.{toml_key(name)}"
    said = f"{key}.command: {script} starts with '#!{' '.join(interpreter)}'"
    sessions = workload_path(runtime)
    in_session = host.find(program, sessions)
    expected = host.find(program, path)
    if expected is None:
        fix = f"set {key}.path to the directory of the '{program}' sessions should run"
    else:
        fix = f'set {key}.path = ["{expected.rsplit("/", 1)[0]}"] to run {expected}'
    if in_session is None:
        return (
            f"{said}, and '{program}' is not on the workload's PATH ({sessions}): every"
            f" session on runtime '{name}' will fail to start; {fix}"
        )
    if expected is not None and not host.same_file(in_session, expected):
        return (
            f"{said}: sessions run {in_session} (the workload's PATH is {sessions}), not"
            f" {expected}, which PATH ({path}) finds; {fix}"
        )
    return None
