"""The start-up figures: spawn → first 200 on `/v1/health`, and idle RSS,
for a daemon on each backend (the kubernetes one on the test cluster,
`tests/kubesim`, run in this process: its informer's list and watch are
answered while it starts, as a real apiserver's would be).

Each figure is printed beside references measured in the same run, taken in
turn with the daemon's starts so machine load falls on each alike: the floor
`python -c pass` (an interpreter's start), `python -c "import trio"` (the
event loop runnerd cannot start without), `import quart_trio,
hypercorn.trio` (the serving layer), the smallest app on that stack
(`bench.servefloor`, spawn → first 200 and idle RSS, as is and with
runnerd's deferral of unused modules: the start and memory the stack
leaves runnerd with nothing of its own behind the routes), and, when
`RUNNERD_BENCH_UPSTREAM` names one, the upstream Node runner (issue 22's
goal: a third of its start, a quarter of its RSS). The load average is
printed beside them: a figure taken under load is not comparable.

`RUNNERD_BENCH_UPSTREAM` is a shell command starting the upstream runner
in the foreground, with `RUNNERD_BENCH_UPSTREAM_HEALTH` the URL it answers
200 on once up (default `http://127.0.0.1:8080/v1/health`); it is killed
after each start. Before measuring, runnerd's sources are compiled
(`compileall`, what `make bytecode` does and an installed wheel has; and
the dataclasses' methods, `runnerd.daemon.dataclasscache`, as `make
bytecode` does): with
`PYTHONDONTWRITEBYTECODE` set, as on this VM, a checkout never caching them
would compile every module at each start (~100 ms) and measure that instead.
Beside the wall time, the CPU time a start took (the daemon's own at its
first 200 with its reaped children's, the floors' from `getrusage`): it holds up better under load.
`RUNNERD_BENCH_ROUNDS` sets the rounds (default 5). `RUNNERD_BENCH_BEFORE`
names another checkout (e.g. a `git worktree add /tmp/old main`) whose
daemon is started in turn too, for a before/after in the same run. Each
daemon's start is broken down by `bench.startprofile` in the same rounds
(an "of which" line: the serving layer's and runnerd's import self times,
the host probes alone). Printed, never asserted.
"""

from __future__ import annotations

import compileall
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import httpx
import trio

from bench.harness import REPO, Daemon, open_daemon, rss_bytes, wait_healthy
from bench.startprofile import Breakdown, describe, profile_start
from tests.harness import build_config, dump_toml
from tests.kube.daemon import kube_overrides
from tests.kubesim.server import KubeSim, open_kubesim

MB = 1_000_000
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
Row = tuple[str, str, str]


class Start(NamedTuple):
    wall_s: float  # spawn → first 200 (for a floor: → exit)
    cpu_s: float  # CPU time of the process by then
    rss: int  # once idle (0 for a floor)


def _median(starts: list[Start], field: str) -> float:
    return statistics.median(float(getattr(s, field)) for s in starts)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _spawn(argv: list[str]) -> Start:
    """A floor: `argv` from spawn to exit (nothing listens)."""
    t0, cpu0 = time.perf_counter(), _children_cpu_s()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return Start(time.perf_counter() - t0, _children_cpu_s() - cpu0, 0)


def _cpu_s(pid: int) -> float:
    """User + system CPU time of `pid` so far and of the children it has
    reaped (the host probes' children, the local backend's probe child),
    from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) * TICK_S


def _load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


async def _upstream_start() -> Start | None:
    """Spawn → first 200 of the upstream runner, and its RSS once up; None
    when `RUNNERD_BENCH_UPSTREAM` is unset. Its CPU time is not read (a
    shell wraps it): reported as 0."""
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
        return Start(started, 0.0, _tree_rss(proc.pid))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


def _tree_rss(pid: int) -> int:
    """RSS of `pid` and its children (a shell wraps the upstream command)."""
    total = rss_bytes(pid)
    for child in os.listdir("/proc"):
        if child.isdigit():
            try:
                stat = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == pid:
                    total += _tree_rss(int(child))
            except (OSError, RuntimeError):
                continue  # gone, or a kernel thread
    return total


async def _serve_floor_start(*flags: str) -> Start:
    """Spawn → first 200 of `bench.servefloor` (with `flags`) on a UNIX
    socket, its CPU time by then and its RSS once idle, as a daemon's."""
    with tempfile.TemporaryDirectory(prefix="runnerd-bench-floor-") as tmp:
        sock = Path(tmp) / "floor.sock"
        t0 = time.perf_counter()
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "bench.servefloor", *flags, str(sock)], cwd=str(REPO)
        )
        try:
            started = await wait_healthy(proc, sock, t0)
            cpu_s = _cpu_s(proc.pid)
            await trio.sleep(0.5)  # as a daemon's: start-up garbage settled
            return Start(started, cpu_s, rss_bytes(proc.pid))
        finally:
            proc.kill()
            await proc.wait()


async def _daemon_start(repo: Path, config: Callable[[Path], str] | None = None) -> Start:
    """Spawn → first 200 of a daemon from `repo` (local backend, or the one
    `config` writes), its CPU time by then, and its RSS once idle."""
    d: Daemon
    async with open_daemon(repo=repo, config=config) as d:
        cpu_s = _cpu_s(d.proc.pid)
        await trio.sleep(0.5)  # let start-up garbage settle before reading RSS
        return Start(d.started_s, cpu_s, rss_bytes(d.proc.pid))


def _kube_config(sim: KubeSim) -> Callable[[Path], str]:
    """A kubernetes-backend config on `sim` (the tests' own, `log_level`
    warning as the local one), written into the daemon's temp dir."""

    def write(base: Path) -> str:
        overrides = kube_overrides(sim, base)
        overrides["server"] = {"log_level": "warning"}
        return dump_toml(build_config(base, base / "runnerd.sock", overrides))

    return write


DAEMONS = ("local", "kubernetes", "before, local", "before, kubernetes")

# An interpreter; the event loop; the serving layer the brief fixes (what
# runnerd imports before its first line runs).
FLOORS = {
    "`python -c pass`": "pass",
    "`python -c 'import trio'`": "import trio",
    "`import quart_trio, hypercorn.trio`": "import quart_trio, hypercorn.trio",
}

# The smallest app on the serving layer, as is and with runnerd's deferrals
# (`bench.servefloor`): spawn → first 200 and idle RSS, as a daemon's.
SERVE_FLOORS = {
    "serving floor (`bench.servefloor`)": (),
    "serving floor, deferred (`bench.servefloor --deferred`)": ("--deferred",),
}


def _ratios(ours: list[Start], refs: dict[str, list[Start]], field: str) -> str:
    value = _median(ours, field)
    return ", ".join(f"{value / _median(v, field):.1f}× {k}" for k, v in refs.items())


async def bench_startup() -> list[Row]:
    """Median of the rounds' cold starts of a daemon on each backend (UNIX
    socket only, as `bench.harness.open_daemon` starts one; the kubernetes
    one on the test cluster, run in this process), the floors, the upstream
    runner and the `RUNNERD_BENCH_BEFORE` checkout taken in turn."""
    before_repo = os.environ.get("RUNNERD_BENCH_BEFORE")
    for repo in (REPO, *([Path(before_repo)] if before_repo else [])):
        compileall.compile_dir(repo / "runnerd", quiet=1)
        # And, where the checkout has it, the dataclasses' methods compiled
        # (`make bytecode` does both: runnerd/daemon/dataclasscache.py).
        if (repo / "runnerd" / "daemon" / "dataclasscache.py").exists():
            await trio.run_process(
                [sys.executable, "-m", "runnerd.daemon.dataclasscache"],
                cwd=repo, stdout=subprocess.DEVNULL,
            )  # fmt: skip
    names = (*FLOORS, *SERVE_FLOORS, *DAEMONS, "upstream")
    runs: dict[str, list[Start]] = {name: [] for name in names}
    profiles: dict[str, list[Breakdown]] = {name: [] for name in DAEMONS}
    with tempfile.TemporaryDirectory(prefix="runnerd-bench-sim-") as tmp:
        async with open_kubesim(Path(tmp)) as sim:
            for round_ in range(int(os.environ.get("RUNNERD_BENCH_ROUNDS", "5"))):
                await _round(runs, profiles, round_, sim, before_repo)
    return _rows(runs, profiles)


async def _round(
    runs: dict[str, list[Start]],
    profiles: dict[str, list[Breakdown]],
    round_: int,
    sim: KubeSim,
    before_repo: str | None,
) -> None:
    """One start of each: the floors, then the daemons in an order that
    alternates between rounds (none always starts right after the floors,
    or right after another), then the upstream runner."""
    for name, code in FLOORS.items():
        # Ended by os._exit, as the daemon ends: an interpreter's
        # teardown of the modules imported is no part of a start.
        exit_now = f"{code}\nimport os\nos._exit(0)"
        runs[name].append(_spawn([sys.executable, "-c", exit_now]))
    for name, flags in SERVE_FLOORS.items():
        runs[name].append(await _serve_floor_start(*flags))
    kube = _kube_config(sim)
    daemons: list[tuple[str, Path, Callable[[Path], str] | None]] = [
        ("local", REPO, None),
        ("kubernetes", REPO, kube),
    ]
    if before_repo:
        daemons += [("before, local", Path(before_repo), None)]
        daemons += [("before, kubernetes", Path(before_repo), kube)]
    for name, repo, config in daemons[:: 1 if round_ % 2 else -1]:
        runs[name].append(await _daemon_start(repo, config))
    for name, repo, config in daemons:
        profiles[name].append(await profile_start(repo, config))
    if (up := await _upstream_start()) is not None:
        runs["upstream"].append(up)


def _rows(runs: dict[str, list[Start]], profiles: dict[str, list[Breakdown]]) -> list[Row]:
    refs = {k: runs[k] for k in FLOORS}
    floors = "; ".join(
        f"{k} {_median(v, 'wall_s') * 1e3:.0f} ms ({_median(v, 'cpu_s') * 1e3:.0f} ms CPU)"
        for k, v in refs.items()
    )
    upstream = runs["upstream"]
    rows: list[Row] = [("start references", f"{floors}; {_load()}", "—")]
    if upstream:
        up_start, _, up_rss = (_median(upstream, f) for f in Start._fields)
        rows.append(
            (
                "upstream runner (Node)",
                f"start {up_start * 1e3:.0f} ms, RSS {up_rss / MB:.1f} MB",
                "—",
            )
        )
    else:
        rows.append(("upstream runner", "not measured: set RUNNERD_BENCH_UPSTREAM", "—"))
    for name in SERVE_FLOORS:
        start, cpu, rss = (_median(runs[name], f) for f in Start._fields)
        vs_start = vs_rss = ""
        if upstream:
            vs_start = f" ({start / _median(upstream, 'wall_s'):.2f}× upstream)"
            vs_rss = f" ({rss / _median(upstream, 'rss'):.2f}× upstream)"
        figure = (
            f"spawn → first 200 {start * 1e3:.0f} ms{vs_start}, {cpu * 1e3:.0f} ms CPU;"
            f" idle RSS {rss / MB:.1f} MB{vs_rss}"
        )
        rows.append((name, figure, "—"))
    for name in DAEMONS:
        if runs[name]:
            rows += _daemon_rows(name, runs[name], refs, upstream)
            rows.insert(-2, (f"of which ({name})", describe(profiles[name]), "—"))
    return rows


def _daemon_rows(
    name: str, ours: list[Start], refs: dict[str, list[Start]], upstream: list[Start]
) -> list[Row]:
    """One daemon's start, CPU and RSS, against the floors and the upstream."""
    start, cpu, rss = (_median(ours, f) for f in Start._fields)
    vs_start = vs_rss = ""
    if upstream:
        vs_start = f"**{start / _median(upstream, 'wall_s'):.2f}× upstream**, "
        vs_rss = f" (**{rss / _median(upstream, 'rss'):.2f}× upstream**)"
    return [
        (
            f"spawn → first 200 /v1/health ({name})",
            f"{start * 1e3:.0f} ms ({vs_start}{_ratios(ours, refs, 'wall_s')})",
            "≤ 0.33× upstream" if not name.startswith("before") else "—",
        ),
        (
            f"CPU time of that start ({name})",
            f"{cpu * 1e3:.0f} ms ({_ratios(ours, refs, 'cpu_s')})",
            "—",
        ),
        (
            f"idle RSS ({name})",
            f"{rss / MB:.1f} MB{vs_rss}",
            "≤ 0.25× upstream" if not name.startswith("before") else "—",
        ),
    ]


if __name__ == "__main__":
    for name, figure, target in trio.run(bench_startup):
        print(f"{name:40} {figure:70} {target}")
