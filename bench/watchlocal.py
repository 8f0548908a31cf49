"""`python -m bench watchlocal`: a watch session's restart on the local backend.

In-process, the real `LocalBackend` (the strongest containment this host
allows), no daemon: what one generation of an app costs in the shared
sandbox, against a run session started on the same backend in the same run
(the reference: new namespaces, network and directory every time).

- a run session: `backend.run` until its first output, then stopped;
- a watch app's generation: `run_app` in an open watch session until its
  first output, then stopped (a restart is exactly that pair);
- entering and leaving a watch session (`open_watch`: the directory, the
  workspace and the sandbox's holder).

The workload prints one line and sleeps. Figures are medians of `ROUNDS`,
with the ratio to the reference; printed, never asserted.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from runnerd.backend import BundleSpec, CreationSpec, ImageSpec, Limits, RunSpec, SessionIdentity
from runnerd.backend.watch import AppLaunch, OutputStream, WatchSpec
from runnerd.local import LocalBackend
from runnerd.local.settings import LocalConfig, RuntimeConfig

ROUNDS = 15
SCRIPT = "echo ready\nexec sleep 600\n"
LIMITS = Limits(cpu="1", memory="256Mi", ephemeral_storage="1Gi", ttl_s=3600.0)
Row = tuple[str, str, str]


class _Sink:
    """Just enough of `Sink` and `AppSink`: `ready` once output arrived."""

    def __init__(self) -> None:
        self.ready = trio.Event()

    def output(self, data: bytes, stream: OutputStream = OutputStream.TTY) -> None:
        if b"ready" in data:
            self.ready.set()

    def status(self, status: Any) -> None: ...
    def progress(self, phase: Any, message: str, done: bool | None = None) -> None: ...
    def output_lost(self) -> None: ...
    def reachability(self, port: int, state: Any) -> None: ...
    def debug(self, frame: Any) -> None: ...

    async def terminal_size(self, wait_s: float) -> tuple[int, int] | None:
        return (80, 24)

    async def drain(self, *steps: Callable[[], Awaitable[object]]) -> bool:
        for step in steps:
            await step()
        return True


def _bundle() -> BundleSpec:
    return BundleSpec(entry="app.sh", files=(("app.sh", SCRIPT),))


async def _run_session(backend: LocalBackend, n: int) -> float:
    spec = RunSpec.create(
        session_id=f"benchrun{n:04d}",
        image=ImageSpec(image="sh", pull_policy="missing"),
        env={},
        limits=LIMITS,
        bundle=_bundle(),
    )
    sink = _Sink()
    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(backend.run, spec, sink)  # type: ignore[arg-type]
        await sink.ready.wait()
        nursery.cancel_scope.cancel()
    return time.perf_counter() - began


def _watch_spec(n: int) -> WatchSpec:
    return WatchSpec(
        identity=SessionIdentity(session_id=f"benchwat{n:04d}", limits=LIMITS, created_at=0.0),
        creation=CreationSpec(
            image=ImageSpec(image="sh", pull_policy="missing"), env={}, bundle=_bundle()
        ),
    )


async def _generations(backend: LocalBackend) -> tuple[list[float], float]:
    times = []
    began = time.perf_counter()
    async with backend.open_watch(_watch_spec(0), _Sink()) as host:  # type: ignore[arg-type]
        entered = time.perf_counter() - began
        for _ in range(ROUNDS):
            sink = _Sink()
            began = time.perf_counter()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.run_app, AppLaunch("web", "app.sh"), sink)
                await sink.ready.wait()
                nursery.cancel_scope.cancel()
            times.append(time.perf_counter() - began)
    return times, entered


async def _enter_leave(backend: LocalBackend) -> list[float]:
    times = []
    for n in range(1, ROUNDS + 1):
        began = time.perf_counter()
        async with backend.open_watch(_watch_spec(n), _Sink()):  # type: ignore[arg-type]
            pass
        times.append(time.perf_counter() - began)
    return times


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


async def _measure(workdir: Path) -> list[Row]:
    sh = RuntimeConfig(name="sh", command=("/bin/sh", "{entry}"))
    backend = LocalBackend(LocalConfig(workdir=workdir, stop_grace_s=0.5, runtimes={"sh": sh}))
    reference = statistics.median([await _run_session(backend, n) for n in range(ROUNDS)])
    generations, _ = await _generations(backend)
    generation = statistics.median(generations)
    entering = statistics.median(await _enter_leave(backend))
    return [
        ("run session: start → first output → stopped", _ms(reference), "reference"),
        (
            "watch app generation: start → first output → stopped",
            _ms(generation),
            f"{generation / reference:.2f}× the run session",
        ),
        (
            "watch session: enter + leave (directory, workspace, holder)",
            _ms(entering),
            f"{entering / reference:.2f}× the run session",
        ),
    ]


async def bench_watchlocal() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="rd-bench-watch-") as temp:
        return await _measure(Path(temp) / "sessions")
