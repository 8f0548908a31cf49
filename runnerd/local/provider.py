"""What the local backend exports to the core (`runnerd.backends.Provider`).

Owns the local backend's answers to what the daemon, the CLI and the HTTP
edge ask of whichever backend is configured, so no core module names it:
its config check (every image names a `[local.runtimes]` entry: `{entry}`
runtimes for bundle sessions, runtimes without it for catalog apps), the
images it offers, its stop timeout, its start-up warnings, and `open_backend` (the
backend for the daemon's lifetime: the workdir claimed and swept on entry,
finished sessions' directories removed until its exit, the warm sandboxes
kept ready meanwhile).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Mapping

import trio

from runnerd.backend import BackendContext
from runnerd.config import AppEntry, Config, ConfigError, RunnerConfig
from runnerd.contract import IoMode
from runnerd.local.backend import LocalBackend
from runnerd.local.hostprobe import open_probe_child
from runnerd.local.initpython import SYSTEM_PYTHON
from runnerd.local.launch import read_interpreter, same_file
from runnerd.local.runtimes import SERVICE_PATH, runtime_problems, search_path
from runnerd.local.settings import ENTRY, LocalConfig
from runnerd.local.workdir import WorkdirError

NAME = "local"
SETTINGS = LocalConfig
# Watch sessions' apps run on a PTY or on pipes (`runnerd.local.streams`).
WATCH_IO: tuple[IoMode, ...] = ("tty", "streams")
# A stop waits the workload's SIGTERM grace plus this for the SIGKILL, the
# drain and the cleanup (cgroup, session directory).
STOP_HEADROOM_S = 3.0


def check_config(config: Config[LocalConfig], *, reloaded: bool = False) -> None:
    """Every image the config names is a runtime the right kind of session can run.

    `reloaded`: `config` is a reloaded catalog against the `[local]` the
    daemon started with (runtimes change only on restart); the error says so.

    Raises:
        ConfigError: naming the key of the first image that breaks the rule.
    """
    try:
        check_images(config.runner, config.settings, config.apps)
    except ConfigError as exc:
        if not reloaded:
            raise
        raise ConfigError(
            exc.key,
            f"{exc.problem} in the running [local]; [local.runtimes] changes need a restart",
        ) from exc


def check_images(runner: RunnerConfig, local: LocalConfig, apps: Mapping[str, AppEntry]) -> None:
    """On the local backend every image names a runtime: `{entry}` runtimes for
    bundle sessions, runtimes without it for catalog apps (no bundle).

    Raises:
        ConfigError: naming the key of the first image that breaks the rule.
    """
    defined = ", ".join(local.runtimes) or "none"

    def runtime(key: str, image: str, bundle: bool) -> None:
        rt = local.runtimes.get(image)
        if rt is None and image == RunnerConfig.default_image:
            # The built-in default is a container image (the Kubernetes
            # backend's): say what to write instead of only what is wrong.
            raise ConfigError(
                key,
                f"the default {image!r} is a container image, which the local backend cannot"
                f" run; name a [local.runtimes] entry (defined: {defined}), e.g."
                f' default_image = "telo" with [local.runtimes.telo]'
                f' command = ["telo", "run", "{ENTRY}"]',
            )
        if rt is None:
            raise ConfigError(
                key, f"{image!r} is not a [local.runtimes] entry (defined: {defined})"
            )
        if bundle != any(ENTRY in arg for arg in rt.command):
            need = "must contain" if bundle else "must not contain"
            use = "a bundle session" if bundle else "an app session, which has no bundle"
            raise ConfigError(
                key, f"runtime {image!r} is used by {use}: its command {need} {ENTRY}"
            )

    runtime("runner.default_image", runner.default_image, True)
    for i, image in enumerate(runner.allowed_images or ()):
        runtime(f"runner.allowed_images[{i}]", image, True)
    for app in apps.values():
        runtime(f"apps.{app.name}.image", app.image, False)


def offered_images(config: Config[LocalConfig]) -> tuple[str, ...]:
    """The images a bundle session may pick when the operator lists none:
    every runtime that runs bundles (`{entry}` in its command) and that no
    catalog app uses (a catalog image is never offered, so a client cannot
    launch an app's runtime with its own bundle)."""
    app_images = {app.image for app in config.apps.values()}
    return tuple(
        name
        for name, rt in config.settings.runtimes.items()
        if name not in app_images and any(ENTRY in arg for arg in rt.command)
    )


def stop_timeout_s(config: Config[LocalConfig]) -> float:
    """How long a stop may take: SIGTERM grace, then SIGKILL and the cleanup."""
    return config.settings.stop_grace_s + STOP_HEADROOM_S


def config_warnings(config: Config[LocalConfig], daemon_path: str | None) -> list[str]:
    """`runtime_problems` with the filesystem: the runtimes' executables are
    looked up as the daemon would (`daemon_path`, then the minimal PATH) and
    on the PATH systemd gives a service; a script's `#!/usr/bin/env` program
    on the workload's PATH and on `daemon_path` (the operator's)."""
    path = search_path(daemon_path)
    return runtime_problems(
        config.settings,
        find=_find_executable,
        path=path,
        service_path=SERVICE_PATH,
        interpreter=read_interpreter,
        same_file=same_file,
    )


def _find_executable(program: str, path: str) -> str | None:
    if "/" in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program, path=path)


def open_backend(
    config: Config[LocalConfig], context: BackendContext
) -> contextlib.AbstractAsyncContextManager[LocalBackend]:
    """The local backend for the daemon's lifetime. Every session it starts
    has `context.hidden_paths` covered (with a mount namespace). It counts
    nothing of its own (`context.metrics` is the seam's; the session core
    counts PTY bytes).

    On entry it takes `local.workdir` (one runnerd per workdir) and removes
    what a killed predecessor left; the lock is held until the process exits.
    Meanwhile it removes finished sessions' directories (`runnerd.local.trash`);
    on exit, once every session has ended, it removes the last of them.

    Raises:
        ConfigError: `local.workdir` is unusable or another runnerd holds it.
    """
    return _open_backend(config, context)


# The probe child (`runnerd.local.hostprobe.open_probe_child`): on. It was
# off for a while: with it, 1,000 idle sessions took 2-2.8x as long to start
# and SIGTERM 8-10 s. The cause was the compiled init's fd, opened first
# thing and so fd 3, which every session's spawn kept: CPython's child then
# closed the daemon's fds one by one (`runnerd.local.fdpass`, which now
# parks that fd apart). With it parked, the burst and the shutdown took as
# long with the child as without (bench/README.md, 2026-12-02, fdpass).
PROBE_CHILD = True


def probe_ahead(config: Config[LocalConfig]) -> contextlib.AbstractContextManager[object]:
    """The host probes `LocalBackend` makes, started in a child process
    (`runnerd.local.hostprobe`), for `open_backend` to take; nothing while
    `PROBE_CHILD` is off (the backend then probes itself)."""
    if not PROBE_CHILD:
        return contextlib.nullcontext(None)
    return open_probe_child(config.settings)


@contextlib.asynccontextmanager
async def _open_backend(
    config: Config[LocalConfig], context: BackendContext
) -> AsyncIterator[LocalBackend]:
    backend = LocalBackend(
        config.settings,
        hidden=context.hidden_paths,
        max_body_bytes=config.server.max_body_bytes,
        ahead=context.ahead,
    )
    if backend.init_problem is not None:
        # Every session would fail its start: refuse now, with the file named.
        raise ConfigError(
            "local.init_python",
            f"{backend.init_problem}; make it reachable by every uid, set local.init_python"
            f" to one that is (Debian's python3 installs {SYSTEM_PYTHON}), or set"
            ' local.containment = "process-group"',
        )
    if backend.workdir_problem is not None:
        raise ConfigError(
            "local.workdir",
            f"{backend.workdir_problem}; give that directory o+x, or pick a workdir"
            " every uid can reach the parent of (the default /var/lib/runnerd/sessions)",
        )
    try:
        backend.claim_workdir()
    except WorkdirError as exc:
        raise ConfigError("local.workdir", str(exc)) from exc
    async with trio.open_nursery() as nursery:
        await nursery.start(backend.trash.run)
        if backend.warm is not None:
            await nursery.start(backend.warm.run)  # at once: the slots are made meanwhile
        try:
            yield backend
        finally:
            if backend.warm is not None:
                await backend.warm.aclose()  # its slots' directories go to the trash
            backend.trash.close()  # the nursery waits for its last removals
