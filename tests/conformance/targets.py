"""The three backends the conformance suite runs on, each as a `Target`.

Owns how each backend is opened for a test and what the suite needs to know
of it that the seam does not say: its stop timeout (the provider's, as the
daemon passes it to the session manager), an image it cannot start, how its
start is held, and how to tell from outside that a session's workload is
being created and whether it still exists.

- local: `runnerd.local` with an `sh` runtime on a temp workdir, real
  processes under real PTYs in its sandbox (a root run gets a session uid and
  a PID namespace); a start waits for a client's terminal size. Built as
  tests/local builds it, trash task included: the provider's `open_backend`
  would also lock the workdir for the process's life. A workload exists while
  its session directory or its process does (the `HOST_PID` token it prints,
  found in the host's /proc); it is being created once the backend asks for
  the terminal's size.
- kubernetes: `runnerd.kube` opened by its provider, as the daemon opens it,
  on a fresh test cluster (`tests.kubesim`: TLS apiserver and kubelet). A
  workload exists while its pod is in the cluster's store; an image no
  registry has holds its start (the pull backs off).
- fake: `tests.conformance.fake` on its own host (a start waits for a
  client's terminal size too, with its workload created). A workload exists
  while the host holds it.

Each target's backend is an `ObservedBackend` (`tests.conformance.seam`);
`open_backend` may be entered again once left: a successor daemon's backend
on the same cluster or host, for detach.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import trio

from runnerd.backend import BackendContext, BundleSpec, ImageSpec, Limits, RunSpec
from runnerd.backends import parse_config, provider_for
from runnerd.config import Config
from runnerd.local import LocalBackend
from runnerd.session.manager import SessionManager
from tests.conformance.fake import FakeBackend, open_fake_host
from tests.conformance.seam import ObservedBackend, RunLog
from tests.escapes import HOST_PID, find_host_pid
from tests.harness import _merge
from tests.kube.daemon import NOT_PRESENT, free_port, session_pods, wait_pods
from tests.kubesim.server import open_kubesim

# Prints `workload <id>` (a real shell: its HOST_PID token), then sleeps.
SHELL_SLEEPER = f"{HOST_PID}; echo workload $HOST_PID; exec sleep 1000"
FAKE_SLEEPER = "echo workload fake; sleep 1000"
TTL_S = 60.0

_ids = count()


@dataclass(frozen=True)
class Target:
    """One backend under test; see the module docstring."""

    name: str
    open_backend: Callable[[], AbstractAsyncContextManager[ObservedBackend]]
    stop_timeout_s: float
    # A script that prints one line `workload <id>` and then sleeps.
    sleeper: str
    # An image whose start fails (its `run()` raises StartError).
    bad_image: ImageSpec
    # Whether the workload of (session id, the `<id>` it printed) still exists.
    exists: Callable[[str, str], bool]
    # Return once the run's workload is being created (before `started`).
    wait_creating: Callable[[RunLog], Awaitable[None]]
    # An image whose start is held (a pull backing off); None: `image`, held
    # until a client gives a terminal size (`Sink.terminal_size`).
    held_image: ImageSpec | None = None
    image: ImageSpec = ImageSpec("sh", "missing")

    def spec(self, script: str, *, image: ImageSpec | None = None) -> RunSpec:
        """A bundle session running `script` as its `main.sh`."""
        return RunSpec.create(
            session_id=f"c{next(_ids):011d}",
            image=image or self.image,
            env={},
            limits=Limits("50m", "100Mi", "512Mi", TTL_S),
            bundle=BundleSpec("main.sh", (("main.sh", script),)),
        )


@asynccontextmanager
async def open_manager(backend: ObservedBackend, target: Target) -> AsyncIterator[SessionManager]:
    """A session manager on `backend`, as the daemon builds one (with the
    backend's stop timeout); every session is stopped on the way out."""
    manager = SessionManager(
        backend,
        max_sessions=8,
        exit_ttl_s=3600.0,
        replay_buffer_bytes=1_000_000,
        stop_timeout_s=target.stop_timeout_s,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        try:
            yield manager
        finally:
            await manager.stop_all()
            nursery.cancel_scope.cancel()


def _config(tmp_path: Path, raw: Mapping[str, Any]) -> Config:
    base = {
        "server": {"listen": [f"unix:{tmp_path / 'runnerd.sock'}"]},
        "runner": {"default_image": "sh", "state_dir": str(tmp_path / "state")},
    }
    return parse_config(_merge(base, raw), base_dir=tmp_path, read_text=Path.read_text)


async def _asked_size(run: RunLog) -> None:
    await run.asked_size.wait()


@asynccontextmanager
async def open_local_target(tmp_path: Path) -> AsyncIterator[Target]:
    workdir = tmp_path / "sessions"
    config = _config(
        tmp_path,
        {
            "local": {
                "workdir": str(workdir),
                "stop_grace_seconds": 0.5,
                # A start waits for a client's size this long: a test that
                # gives none holds its session in its start.
                "terminal_size_wait_seconds": 30,
                "runtimes": {"sh": {"command": ["/bin/sh", "{entry}"]}},
            }
        },
    )

    @asynccontextmanager
    async def open_backend() -> AsyncIterator[ObservedBackend]:
        workdir.mkdir(mode=0o700, exist_ok=True)  # what the provider's workdir claim does
        backend = LocalBackend(config.settings)
        async with trio.open_nursery() as nursery:
            await nursery.start(backend.trash.run)
            try:
                yield ObservedBackend(backend)
            finally:
                backend.trash.close()

    yield Target(
        name="local",
        open_backend=open_backend,
        stop_timeout_s=provider_for(config).stop_timeout_s(config),
        sleeper=SHELL_SLEEPER,
        bad_image=ImageSpec("no-such-runtime", "missing"),
        exists=lambda session_id, token: (
            (workdir / session_id).exists() or (bool(token) and find_host_pid(token) is not None)
        ),
        wait_creating=_asked_size,
    )


@asynccontextmanager
async def open_kube_target(tmp_path: Path) -> AsyncIterator[Target]:
    async with open_kubesim(
        tmp_path, bookmark_interval_s=0.2, history_limit=200, compaction_interval_s=10
    ) as sim:
        port = free_port()  # self_url names the bundle listener's port: not 0
        config = _config(
            tmp_path,
            {
                "runner": {"backend": "kubernetes"},
                "kubernetes": {
                    "kubeconfig": str(sim.write_kubeconfig(tmp_path / "kubeconfig")),
                    "self_url": f"http://127.0.0.1:{port}",
                    "bundle_listen": f"tcp:127.0.0.1:{port}",
                },
            },
        )
        provider = provider_for(config)

        @asynccontextmanager
        async def open_backend() -> AsyncIterator[ObservedBackend]:
            async with provider.open_backend(config, BackendContext()) as backend:
                yield ObservedBackend(backend)

        yield Target(
            name="kubernetes",
            open_backend=open_backend,
            stop_timeout_s=provider.stop_timeout_s(config),
            sleeper=SHELL_SLEEPER,
            bad_image=ImageSpec(NOT_PRESENT, "never"),
            # No registry has it: the pull backs off for the create's grace.
            held_image=ImageSpec(NOT_PRESENT, "missing"),
            exists=lambda session_id, _token: f"runnerd-{session_id}" in session_pods(sim),
            wait_creating=lambda run: wait_pods(
                sim, lambda pods: f"runnerd-{run.spec.session_id}" in pods
            ),
        )


@asynccontextmanager
async def open_fake_target(tmp_path: Path) -> AsyncIterator[Target]:
    async with open_fake_host() as host:

        @asynccontextmanager
        async def open_backend() -> AsyncIterator[ObservedBackend]:
            await trio.lowlevel.checkpoint()
            yield ObservedBackend(FakeBackend(host))

        yield Target(
            name="fake",
            open_backend=open_backend,
            stop_timeout_s=5.0,
            sleeper=FAKE_SLEEPER,
            bad_image=ImageSpec("no-such-image", "missing"),
            exists=lambda session_id, _token: session_id in host.workloads,
            wait_creating=_asked_size,
        )


OPENERS: Mapping[str, Callable[[Path], AbstractAsyncContextManager[Target]]] = {
    "local": open_local_target,
    "kubernetes": open_kube_target,
    "fake": open_fake_target,
}
