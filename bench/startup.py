"""The start-up figures: spawn → first 200 on `/v1/health`, and idle RSS.

Each figure is printed beside references measured in the same run, taken in
turn with the daemon's starts so machine load falls on each alike: the floor
`python -c pass` (an interpreter's start), `python -c "import trio"` (the
event loop runnerd cannot start without), and, when
`RUNNERD_BENCH_UPSTREAM` names one, the upstream Node runner (issue 22's
goal: a third of its start, a quarter of its RSS). The load average is
printed beside them: a figure taken under load is not comparable.

`RUNNERD_BENCH_UPSTREAM` is a shell command starting the upstream runner
in the foreground, with `RUNNERD_BENCH_UPSTREAM_HEALTH` the URL it answers
200 on once up (default `http://127.0.0.1:8080/v1/health`); it is killed
after each start. `RUNNERD_BENCH_BEFORE` names another checkout (e.g. a
`git worktree add /tmp/old main`) whose daemon is started in turn too, for a
before/after in the same run. Printed, never asserted.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio

from bench.harness import REPO, Daemon, open_daemon, rss_bytes

MB = 1_000_000
ROUNDS = 5
Row = tuple[str, str, str]


def _spawn_s(argv: list[str]) -> float:
    """Seconds from spawn to exit of `argv` (a floor: nothing listens)."""
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


async def _upstream_start() -> tuple[float, int] | None:
    """Spawn → first 200 of the upstream runner, and its RSS once up; None
    when `RUNNERD_BENCH_UPSTREAM` is unset."""
    command = os.environ.get("RUNNERD_BENCH_UPSTREAM")
    if not command:
        return None
    url = os.environ.get("RUNNERD_BENCH_UPSTREAM_HEALTH", "http://127.0.0.1:8080/v1/health")
    t0 = time.perf_counter()
    proc = await trio.lowlevel.open_process(command, shell=True, start_new_session=True)
    try:
        async with httpx.AsyncClient() as client:
            with trio.fail_after(60):
                while True:
                    try:
                        if (await client.get(url)).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass  # not listening yet
                    await trio.sleep(0.002)
        started = time.perf_counter() - t0
        await trio.sleep(0.5)
        return started, _tree_rss(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


def _tree_rss(pid: int) -> int:
    """RSS of `pid` and its children (a shell wraps the upstream command)."""
    total = rss_bytes(pid)
    for child in os.listdir("/proc"):
        if child.isdigit():
            try:
                stat = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()
                if int(stat[1]) == pid:
                    total += _tree_rss(int(child))
            except (OSError, RuntimeError):
                continue  # gone, or a kernel thread
    return total


def _ratios(value: float, refs: dict[str, list[float]]) -> str:
    return ", ".join(f"{value / statistics.median(v):.1f}× {k}" for k, v in refs.items() if v)


async def _daemon_start(repo: Path) -> tuple[float, int]:
    """Spawn → first 200 of a local daemon from `repo`, and its RSS once idle."""
    d: Daemon
    async with open_daemon(repo=repo) as d:
        await trio.sleep(0.5)  # let start-up garbage settle before reading RSS
        return d.started_s, rss_bytes(d.proc.pid)


async def bench_startup() -> list[Row]:
    """Median of `ROUNDS` cold starts of a local-backend daemon (UNIX socket
    only, as `bench.harness.open_daemon` starts one), the floors, the
    upstream runner and the `RUNNERD_BENCH_BEFORE` checkout taken in turn."""
    ours: list[tuple[float, int]] = []
    refs: dict[str, list[float]] = {"`python -c pass`": [], "`python -c 'import trio'`": []}
    upstream: list[tuple[float, int]] = []
    before_repo = os.environ.get("RUNNERD_BENCH_BEFORE")
    before: list[tuple[float, int]] = []
    for _ in range(ROUNDS):
        refs["`python -c pass`"].append(_spawn_s([sys.executable, "-c", "pass"]))
        refs["`python -c 'import trio'`"].append(_spawn_s([sys.executable, "-c", "import trio"]))
        ours.append(await _daemon_start(REPO))
        if before_repo:
            before.append(await _daemon_start(Path(before_repo)))
        if (up := await _upstream_start()) is not None:
            upstream.append(up)
    start = statistics.median(u[0] for u in ours)
    rss = statistics.median(u[1] for u in ours)
    floors = ", ".join(f"{k} {statistics.median(v) * 1000:.0f} ms" for k, v in refs.items())
    rows: list[Row] = [
        ("start references", f"{floors}; {_load()}", "—"),
        (
            "spawn → first 200 /v1/health (local)",
            f"{start * 1000:.0f} ms ({_ratios(start, refs)})",
            "≤ 0.33× upstream",
        ),
        ("idle RSS (local)", f"{rss / MB:.1f} MB", "≤ 0.25× upstream"),
    ]
    for name, runs in (("before", before), ("upstream", upstream)):
        if runs:
            other_start = statistics.median(u[0] for u in runs)
            other_rss = statistics.median(u[1] for u in runs)
            ratio = start / other_start
            rows += [
                (f"{name} start", f"{other_start * 1e3:.0f} ms; now {ratio:.2f}×", "—"),
                (f"{name} RSS", f"{other_rss / MB:.1f} MB; now {rss / other_rss:.2f}×", "—"),
            ]
    if not upstream:
        rows.append(("upstream runner", "not measured: set RUNNERD_BENCH_UPSTREAM", "—"))
    return rows


if __name__ == "__main__":
    for name, figure, target in trio.run(bench_startup):
        print(f"{name:40} {figure:70} {target}")
