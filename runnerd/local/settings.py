"""`[local]`: the local backend's settings, parsed and rendered. Pure.

Owns `LocalConfig` and `RuntimeConfig` (what the backend is configured with)
and the provider's settings functions (`runnerd.backends.Provider`):
`KEYS` (its table's keys: `runnerd.backends` refuses any other, naming it),
`parse_settings` (the table as `runnerd.config` kept it), `render` (what
`check-config` prints) and, for a reload, `keep_bound` / `bound_changes`
(the whole table is bound at start).

Decisions (documented for operators in config/runnerd.toml):
- On the local backend an "image" is a `[local.runtimes.NAME]`. A runtime
  whose command contains `{entry}` runs bundles; one without runs as is and is
  what a catalog app names (an app session has no bundle). So
  `default_image` and `allowed_images` must name `{entry}` runtimes, and an
  app's `image` a runtime without `{entry}` (`runnerd.local.provider.check_config`).
- `local.workdir` resolves against the config file's directory, as every
  relative path does.
- `local.stop_grace_seconds` is at most `MAX_STOP_GRACE_S` (5 s): SIGTERM
  must end the daemon within 10 s, workloads included.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from runnerd.config import ConfigError, Section, Table, show, toml_key

KEYS = (
    "workdir", "stop_grace_seconds", "terminal_size_wait_seconds", "runtimes", "containment",
    "network", "session_uid_base", "session_uid_count", "init_python", "warm_sandboxes",
)  # fmt: skip
RUNTIME_KEYS = ("command", "inspect_args", "path", "watch", "watch_args")
ENTRY = "{entry}"
# SIGTERM must end the daemon within 10 s (the contract): each workload gets
# this much grace after SIGTERM before SIGKILL, and the shutdown budget must
# still cover it plus the kill and the cleanup.
MAX_STOP_GRACE_S = 5.0
MAX_TERMINAL_SIZE_WAIT_S = 30.0
# Each warm sandbox is an idle session's processes and memory (~1.5 MB of
# PSS with slirp4netns), held for as long as no session takes it.
MAX_WARM_SANDBOXES = 16


@dataclass(frozen=True)
class RuntimeConfig:
    """A local-backend "image": a command line with `{entry}` substituted."""

    name: str
    command: tuple[str, ...]
    # Extra argv when the session asks for `inspect`; `{inspect_port}` substituted.
    inspect_args: tuple[str, ...] = ()
    # Directories put first on the workload's PATH (before the minimal
    # /usr/local/bin:/usr/bin:/bin) and searched first for `command[0]`: where
    # the interpreter a script's `#!/usr/bin/env node` names is found.
    # Default none: a session sees only the minimal PATH.
    path: tuple[str, ...] = ()
    # How a watch session's app on this runtime follows workspace changes:
    # "restart" (the default): the core restarts it; "self": the runtime
    # watches the workspace itself (`telo run --watch`), started once with
    # `watch_args` appended (as `inspect_args` are) and left running.
    watch: Literal["restart", "self"] = "restart"
    watch_args: tuple[str, ...] = ()

    @property
    def self_watching(self) -> bool:
        return self.watch == "self"


@dataclass(frozen=True)
class LocalConfig:
    """`[local]`: what the local backend is configured with."""

    workdir: Path = Path("/var/lib/runnerd/sessions")
    stop_grace_s: float = 2.0
    # How long after its creation a session's workload may wait for its first
    # terminal size (a client's resize), so that it starts with that size,
    # not 80x24 changing under it. A size given up front (the POST's
    # x-runnerd-terminal-size, or a resize before the wait) ends it at once.
    # 0.2 s: a client that opens the terminal right after its POST sends its
    # size well within it, and a session no client attaches to starts ~0.2 s
    # later. 0: never wait.
    terminal_size_wait_s: float = 0.2
    runtimes: Mapping[str, RuntimeConfig] = field(default_factory=dict)
    # "auto": a PID namespace per session where the kernel allows it, else
    # the process group (announced); "process-group": always the latter.
    containment: Literal["auto", "process-group"] = "auto"
    # "isolated": a network namespace per session, declared ports published
    # on the host's loopback, outbound through slirp4netns when installed;
    # "none": the namespace's loopback only; "host": the host's network
    # (a session reaches runnerd's TCP listener: announced as unisolated).
    network: Literal["isolated", "none", "host"] = "isolated"
    # A root daemon runs each live session as a uid (and gid) of its own from
    # base … base+count-1, numbers no account or file on the host may use.
    # 0x70000000: above the container ranges systemd hands out (524288 …
    # 1879048191) and the /etc/subuid blocks useradd starts at 100000, below
    # 2^31 (tools that keep uids signed). 65536: systemd's container block,
    # far more than max_sessions. Ignored by a non-root daemon.
    session_uid_base: int = 0x70000000
    session_uid_count: int = 65536
    # The interpreter that runs each session's init (`runnerd.local.nsinit`,
    # stdlib only), as the session's uid. None: runnerd's own, else
    # /usr/bin/python3 when a session uid cannot run runnerd's (a venv under
    # a 0700 home). Set, it is the only one tried.
    init_python: str | None = None
    # Run sessions' sandboxes made ahead (`runnerd.local.warm`): a session
    # that takes one skips its namespaces and slirp4netns (issue 22: POST →
    # `running` 18 → ~5 ms). 2: a session started right after another
    # still finds one while the first's replacement is being made; each
    # costs an idle session's processes. 0: every session starts cold.
    warm_sandboxes: int = 2


def _runtime_path(rt: Table) -> tuple[str, ...]:
    """`path`: absolute directories, none with a `:` (the PATH separator)."""
    path = rt.string_list("path") or ()
    for i, directory in enumerate(path):
        if not directory.startswith("/") or ":" in directory:
            raise ConfigError(
                f"{rt.key('path')}[{i}]",
                f"must be an absolute directory without ':', got {show(directory)}",
            )
    return path


def _runtime(name: str, rt: Table, command: tuple[str, ...]) -> RuntimeConfig:
    """One `[local.runtimes.NAME]`; `watch_args` only with `watch = "self"`
    (they are what turns its watching on)."""
    watch = rt.choice("watch", "restart", ("restart", "self"))
    watch_args = rt.string_list("watch_args")
    if watch_args and watch != "self":
        raise ConfigError(rt.key("watch_args"), 'is used only with watch = "self"')
    return RuntimeConfig(
        name=name,
        command=command,
        inspect_args=rt.string_list("inspect_args") or (),
        path=_runtime_path(rt),
        watch=cast(Literal["restart", "self"], watch),
        watch_args=watch_args or (),
    )


def _terminal_size_wait_s(t: Table) -> float:
    key = "terminal_size_wait_seconds"
    wait_s = t.seconds(key, LocalConfig.terminal_size_wait_s, zero_ok=True)
    if wait_s > MAX_TERMINAL_SIZE_WAIT_S:
        raise ConfigError(
            t.key(key),
            f"must be at most {MAX_TERMINAL_SIZE_WAIT_S:g} seconds (every session no client"
            f" attaches to starts that much later), got {show(wait_s)}",
        )
    return wait_s


def parse_settings(t: Table, base_dir: Path) -> LocalConfig:
    """`[local]` as `LocalConfig`; a relative `workdir` resolves against
    `base_dir` (the config file's directory), as every path does.

    Raises:
        ConfigError: naming the key (`local.runtimes.sh.command: ...`).
    """
    runtimes: dict[str, RuntimeConfig] = {}
    table = t.table("runtimes", None)
    for name in table.data:
        rt = table.table(name, RUNTIME_KEYS)
        command = rt.string_list("command", empty_ok=False)
        if command is None:
            raise ConfigError(rt.key("command"), "is required")
        runtimes[name] = _runtime(name, rt, command)
    workdir = Path(os.path.normpath(base_dir / t.string("workdir", str(LocalConfig.workdir))))
    stop_grace_s = t.seconds("stop_grace_seconds", LocalConfig.stop_grace_s, zero_ok=True)
    if stop_grace_s > MAX_STOP_GRACE_S:
        raise ConfigError(
            t.key("stop_grace_seconds"),
            f"must be at most {MAX_STOP_GRACE_S:g} seconds (SIGTERM must stop runnerd"
            f" within 10 s), got {show(stop_grace_s)}",
        )
    containment = t.choice("containment", "auto", ("auto", "process-group"))
    network = t.choice("network", LocalConfig.network, ("isolated", "none", "host"))
    uid_base, uid_count = _session_uids(t)
    init_python = t.optional_string("init_python")
    if init_python is not None and not os.path.isabs(init_python):
        raise ConfigError(t.key("init_python"), f"must be an absolute path, got {init_python!r}")
    warm = t.data.get("warm_sandboxes", LocalConfig.warm_sandboxes)
    if isinstance(warm, bool) or not isinstance(warm, int) or not 0 <= warm <= MAX_WARM_SANDBOXES:
        raise ConfigError(
            t.key("warm_sandboxes"),
            f"must be an integer from 0 to {MAX_WARM_SANDBOXES}, got {show(warm)}",
        )
    return LocalConfig(
        workdir=workdir,
        stop_grace_s=stop_grace_s,
        terminal_size_wait_s=_terminal_size_wait_s(t),
        runtimes=runtimes,
        containment=cast(Literal["auto", "process-group"], containment),
        network=cast(Literal["isolated", "none", "host"], network),
        session_uid_base=uid_base,
        session_uid_count=uid_count,
        init_python=init_python,
        warm_sandboxes=warm,
    )


# uid_t is 32 bits and (uid_t)-1 means "unchanged" to setresuid and chown.
MAX_SESSION_UID = 2**32 - 2


def _session_uids(t: Table) -> tuple[int, int]:
    """`session_uid_base` and `session_uid_count`: a range of real uids
    that holds neither root nor nobody (65534) nor (uid_t)-1."""
    base = t.positive_int("session_uid_base", LocalConfig.session_uid_base)
    count = t.positive_int("session_uid_count", LocalConfig.session_uid_count)
    last = base + count - 1
    if last > MAX_SESSION_UID:
        raise ConfigError(
            t.key("session_uid_count"),
            f"session_uid_base + session_uid_count - 1 must be at most {MAX_SESSION_UID},"
            f" got {last}",
        )
    if base <= 65534 <= last:
        raise ConfigError(
            t.key("session_uid_base"), f"the range {base}-{last} holds 65534 (nobody)"
        )
    return base, count


def render(settings: LocalConfig) -> list[Section]:
    """`[local]` and each `[local.runtimes.NAME]` as `check-config` prints them."""
    loc = settings
    out: list[Section] = [
        (
            "local",
            {
                "workdir": loc.workdir,
                "stop_grace_seconds": loc.stop_grace_s,
                "terminal_size_wait_seconds": loc.terminal_size_wait_s,
                "containment": loc.containment,
                "network": loc.network,
                "session_uid_base": loc.session_uid_base,
                "session_uid_count": loc.session_uid_count,
                "init_python": loc.init_python,
                "warm_sandboxes": loc.warm_sandboxes,
            },
        )
    ]
    for rt in loc.runtimes.values():
        out.append((f"local.runtimes.{toml_key(rt.name)}", {
            "command": rt.command, "inspect_args": rt.inspect_args, "path": rt.path,
            "watch": rt.watch, "watch_args": rt.watch_args,
        }))  # fmt: skip
    return out


def keep_bound(old: LocalConfig, new: LocalConfig) -> LocalConfig:
    """What a reload runs on: `old`, all of it (the workdir is claimed and the
    runtimes resolved at start; a reloaded catalog is checked against them)."""
    return old


def bound_changes(old: LocalConfig, new: LocalConfig) -> list[str]:
    """`["local"]` when the table changed: a restart applies it."""
    return ["local"] if old != new else []
