"""`python -m bench throughput`: PTY → WebSocket against the bare PTY, same run.

The workload writes `total_bytes` to its PTY; a client reads the session's
`/io` to its close, one run per client: `counting` (`bench.countclient`: a
blocking socket in a thread that only looks at frame heads, so the figure
is the daemon's) and `trio` (`harness.drain_pty_raw`, the lean trio client
the earlier figures used; it copies every byte twice in Python). The floor
is the kernel's own rate for the same workload: a blocking read loop on a
bare PTY, no trio, no HTTP, measured before the first run and after each,
so each run has a floor on either side; its ratio is to their mean (issue
22's goal: ≥ 0.9×). Each round starts with the relay floor
(`bench.relayfloor`): runnerd's burst reader, framing and gathered send in
a plain loop, to a counting client, with no trio, HTTP or session; it
tells what any relay of this PTY costs here, apart from the daemon's own.
Then the compiled floors (`bench/relayfloor.c`, built with `cc -O2` into a
temporary directory at the start; left out, and said, when there is no
`cc`): the same bare read loop in C, and the same relay in C (burst reads,
each chunk copied into a ring, framed, one `writev` per chunk to a counting
client in C), each ratio to the Python bare floors around its round, as
the daemon's is. The compiled relay says what a relay with no interpreter
at all reaches on this machine: the part of the gap the kernel's PTY and a
socket hop leave, against the part the interpreter adds.

`RUNNERD_BENCH_BEFORE` names another checkout (e.g. `git worktree add
/tmp/old main`, its `make -s bytecode` done) whose daemon runs in turn with
this one's in every round, the same clients, for a before/after in the same
minutes; `RUNNERD_BENCH_ROUNDS` (default 1) how many rounds; medians are
printed, with the range when there are several.

Printed per daemon and client: the rate, its ratio to the floor, the
daemon's CPU per MB (its own utime + stime from `/proc/PID/stat` over the
drain, not its children's) and the client's (its thread's CPU time), and
the 1-minute load average over the rounds.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio

from bench.countclient import drain_counting
from bench.harness import REPO, drain_pty_raw, open_daemon, sh_bundle, start_session, wait_status

MB = 1_000_000
CHUNK = 65536
Row = tuple[str, str, str]
CLIENTS = ("counting", "trio")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` (its own, not its reaped children's)."""
    stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - one read of a proc file
    fields = stat.rsplit(")", 1)[1].split()
    # After the ")" that ends comm: field 3 is index 0, so utime (14) is 11.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def writer_script(total_bytes: int) -> str:
    """The workload (sh): wait for a line (the client is attached), then
    write `total_bytes` in 64 KiB writes."""
    return f"read go\nexec dd if=/dev/zero bs={CHUNK} count={total_bytes // CHUNK} status=none\n"


@dataclass(frozen=True)
class Drain:
    """One daemon run's figures (CPU in seconds per MB)."""

    rate_mb_s: float
    received: int
    gaps: int
    daemon_cpu_per_mb: float
    client_cpu_per_mb: float


def _counting(socket_path: Path, sid: str) -> tuple[int, int, float, float]:
    cpu0 = time.thread_time()
    received, gaps, elapsed = drain_counting(socket_path, sid, send=b"go\n")
    return received, gaps, elapsed, time.thread_time() - cpu0


async def _trio_client(socket_path: Path, sid: str) -> tuple[int, int, float, float]:
    cpu0 = time.thread_time()
    received, gaps, elapsed = await drain_pty_raw(socket_path, sid, send=b"go\n")
    return received, gaps, elapsed, time.thread_time() - cpu0


async def daemon_rate(total_bytes: int, client: str, repo: Path = REPO) -> Drain:
    """One session of `repo`'s daemon drained by `client` (`CLIENTS`).

    The replay buffer is larger than the payload, so a client slower than
    the workload shows as a lower rate, not as evicted bytes."""
    async with open_daemon(replay_buffer_bytes=2 * total_bytes, repo=repo) as d, d.client() as c:
        sid = await start_session(c, sh_bundle(writer_script(total_bytes)))
        await wait_status(c, sid, {"running"})
        cpu0 = cpu_seconds(d.proc.pid)
        with trio.fail_after(300):
            if client == "counting":
                run = await trio.to_thread.run_sync(_counting, d.socket_path, sid)
            else:
                run = await _trio_client(d.socket_path, sid)
        cpu = cpu_seconds(d.proc.pid) - cpu0
    received, gaps, elapsed, client_cpu = run
    mb = received / MB
    return Drain(mb / elapsed, received, gaps, cpu / mb, client_cpu / mb)


def bare_pty_rate(total_bytes: int) -> tuple[float, float]:
    """The kernel's own PTY rate for the same workload, and the reader's CPU
    seconds per MB: one blocking read loop, no trio, no HTTP."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", writer_script(total_bytes)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    os.write(master, b"go\n")
    received, t0, cpu0 = 0, time.perf_counter(), time.thread_time()
    try:
        while received < total_bytes:
            try:
                data = os.read(master, CHUNK)
            except OSError:  # EIO: the writer is gone
                break
            if not data:
                break
            received += len(data)
    finally:
        elapsed, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        proc.wait()
        os.close(master)
    return received / elapsed / MB, cpu / (received / MB)


def relay_rate(total_bytes: int) -> tuple[float, float]:
    """The relay floor (`bench.relayfloor`, a process of its own): MB/s and
    its CPU seconds per MB."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.relayfloor", str(total_bytes)],
        cwd=REPO,
        capture_output=True,
        check=True,
        text=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def build_compiled_floor(into: Path) -> Path | None:
    """`bench/relayfloor.c` built into `into`, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    binary = into / "relayfloor"
    subprocess.run([cc, "-O2", "-o", str(binary), str(REPO / "bench" / "relayfloor.c")], check=True)
    return binary


def compiled_rate(binary: Path, mode: str, total_bytes: int) -> tuple[float, float]:
    """The compiled floor in `mode` (`bare` or `relay`): MB/s and its CPU
    seconds per MB."""
    out = subprocess.run(
        [str(binary), mode, writer_script(total_bytes)], capture_output=True, check=True, text=True
    ).stdout.split()
    return float(out[0]), float(out[1]) / 1000


@dataclass
class _Figures:
    """What the rounds measured: per (daemon, client), each run with its
    ratio to the floor around it; the floors; the relay floors with theirs;
    the load averages seen."""

    runs: dict[tuple[str, str], list[tuple[Drain, float]]]
    floors: list[tuple[float, float]]
    relays: list[tuple[float, float, float]]
    loads: list[float]
    # (mode, MB/s, CPU s per MB, ratio to the Python bare floors around it)
    compiled: list[tuple[str, float, float, float]]


async def _rounds(
    total_bytes: int, daemons: dict[str, Path], rounds: int, compiled: Path | None
) -> _Figures:
    figures = _Figures(
        {(d, c): [] for d in daemons for c in CLIENTS}, [], [], [os.getloadavg()[0]], []
    )
    figures.floors.append(await trio.to_thread.run_sync(bare_pty_rate, total_bytes))
    pairs = [(name, client) for name in daemons for client in CLIENTS]
    for round_ in range(rounds):
        relay, relay_cpu = await trio.to_thread.run_sync(relay_rate, total_bytes)
        figures.floors.append(await trio.to_thread.run_sync(bare_pty_rate, total_bytes))
        floor = (figures.floors[-2][0] + figures.floors[-1][0]) / 2
        figures.relays.append((relay, relay_cpu, relay / floor))
        for mode in ("bare", "relay") if compiled else ():
            rate, cpu = await trio.to_thread.run_sync(compiled_rate, compiled, mode, total_bytes)
            figures.floors.append(await trio.to_thread.run_sync(bare_pty_rate, total_bytes))
            floor = (figures.floors[-2][0] + figures.floors[-1][0]) / 2
            figures.compiled.append((mode, rate, cpu, rate / floor))
        # Every other round in reverse: no daemon always runs first.
        for name, client in pairs if round_ % 2 == 0 else pairs[::-1]:
            drain = await daemon_rate(total_bytes, client, daemons[name])
            figures.floors.append(await trio.to_thread.run_sync(bare_pty_rate, total_bytes))
            floor = (figures.floors[-2][0] + figures.floors[-1][0]) / 2
            figures.runs[name, client].append((drain, drain.rate_mb_s / floor))
            figures.loads.append(os.getloadavg()[0])
    return figures


def _spread(values: list[float], fmt: str) -> str:
    """The median, and the range when there are several."""
    median = format(statistics.median(values), fmt)
    if len(values) < 2:
        return median
    return f"{median} ({format(min(values), fmt)}–{format(max(values), fmt)})"


async def bench_throughput(total_bytes: int = 512 * 1024 * 1024) -> list[Row]:
    """The floor, then each daemon with each client, a floor after each run."""
    total_bytes = int(os.environ.get("RUNNERD_BENCH_THROUGHPUT_BYTES", total_bytes))
    rounds = int(os.environ.get("RUNNERD_BENCH_ROUNDS", "1"))
    daemons = {"this checkout": REPO}
    if before := os.environ.get("RUNNERD_BENCH_BEFORE"):
        daemons["before"] = Path(before)
    with tempfile.TemporaryDirectory(prefix="runnerd-relayfloor-") as build:
        compiled = build_compiled_floor(Path(build))
        figures = await _rounds(total_bytes, daemons, rounds, compiled)
    many = f"median of {rounds}, " if rounds > 1 else ""
    rows: list[Row] = []
    for (name, client), runs in figures.runs.items():
        drains = [drain for drain, _ in runs]
        what = f"PTY → WebSocket, {name}, {client} client"
        note = f"{drains[0].received / MB:.0f} MB, {sum(d.gaps for d in drains)} gaps"
        rows += [
            (what, f"{_spread([d.rate_mb_s for d in drains], '.0f')} MB/s ({many}{note})", "—"),
            (f"{what}: / floor", f"{_spread([r for _, r in runs], '.2f')}×", "≥ 0.9×"),
            (
                f"{what}: CPU per MB, daemon / client",
                f"{_spread([d.daemon_cpu_per_mb * 1000 for d in drains], '.1f')} / "
                f"{_spread([d.client_cpu_per_mb * 1000 for d in drains], '.1f')} ms",
                "—",
            ),
        ]
    return [
        *rows,
        (
            "same workload, bare PTY read loop (the floor), before the first run and after each",
            f"{_spread([rate for rate, _ in figures.floors], '.0f')} MB/s, "
            f"{_spread([cpu * 1000 for _, cpu in figures.floors], '.1f')} ms CPU per MB",
            "—",
        ),
        (
            "relay floor (`bench.relayfloor`: burst reads, kept, framed, sendmsg; no trio/HTTP)",
            f"{_spread([r for r, _, _ in figures.relays], '.0f')} MB/s, "
            f"{_spread([r for _, _, r in figures.relays], '.2f')}× the floor, "
            f"{_spread([c * 1000 for _, c, _ in figures.relays], '.1f')} ms CPU per MB",
            "—",
        ),
        *_compiled_rows(figures),
        ("1-minute load average over the runs", _spread(figures.loads, ".1f"), "—"),
    ]


def _compiled_rows(figures: _Figures) -> list[Row]:
    if not figures.compiled:
        return [("compiled floors (`bench/relayfloor.c`)", "not built: no C compiler", "—")]
    rows: list[Row] = []
    for mode, what in (
        ("bare", "compiled bare read loop (`bench/relayfloor.c bare`)"),
        ("relay", "compiled relay (`bench/relayfloor.c relay`: burst reads, ring, writev)"),
    ):
        runs = [run for run in figures.compiled if run[0] == mode]
        rows.append((
            what,
            f"{_spread([r for _, r, _, _ in runs], '.0f')} MB/s, "
            f"{_spread([r for _, _, _, r in runs], '.2f')}× the floor, "
            f"{_spread([c * 1000 for _, _, c, _ in runs], '.1f')} ms CPU per MB",
            "—",
        ))  # fmt: skip
    return rows
