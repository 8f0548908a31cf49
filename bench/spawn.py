"""`python -m bench spawn`: what a local session costs beyond a process.

Issue 22's per-session figures, each beside a reference measured in the
same run, with the 1-minute load average:

- `POST /v1/sessions` → `running` (SSE), sequential, p50 / p99, on the
  default daemon (the compiled init, `runnerd/local/nsinit.c`) and on one
  told to run the Python init (`local.init_python`: what every session ran
  before), against the floor: fork + exec of `/bin/sh` under a fresh PTY
  until its first output is read, from this process. The three take turns
  sample by sample so the machine's load falls on each alike.
- host memory per idle session: the PSS (`/proc/PID/smaps_rollup`) of every
  process the daemon started for `n` idle `exec sleep` sessions (the inits,
  the workload, slirp4netns), divided by `n`, and how many processes that
  is per session; the same on the Python-init daemon.
- `RUNNERD_BENCH_SESSIONS` (default 1,000) idle sessions started by 8
  concurrent clients on the default daemon, POST of the first to the last
  `running` (status polls), beside the floor for as many fork + execs
  under PTYs from 8 threads.

Figures are printed, never asserted.
"""

from __future__ import annotations

import functools
import itertools
import os
import secrets
import subprocess
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import trio

from bench.harness import Daemon, open_daemon, percentile, sh_bundle, start_session, wait_status
from bench.leanpost import post_sessions
from bench.netns import _pss_kb, _session_pids
from bench.throughput import cpu_seconds
from runnerd.local.containment import CLONE_NEWNET, probe_child, probe_containment
from runnerd.local.identity import SessionIdentity

Row = tuple[str, str, str]
# Each POST says its terminal's size, as a client that attaches does, so no
# session waits for a first size (`local.terminal_size_wait_seconds`).
SIZED = {"x-runnerd-terminal-size": "80x24"}
UID_BASE = 0x70000000  # `local.session_uid_base`'s default
# What the backend itself falls back to when runnerd's own interpreter is out
# of a session uid's reach (a venv under /root, as here).
PYTHON_INIT = 'init_python = "/usr/bin/python3"'


def pty_exec_floor() -> float:
    """Seconds to fork + exec `/bin/sh` on a fresh PTY (its own session)
    and read its first output: what starting a process under a terminal
    costs at least."""
    t0 = time.perf_counter()
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", "echo ok"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        slave = -1
        data = b""
        while b"ok" not in data:
            data += os.read(master, 64)
        elapsed = time.perf_counter() - t0
        proc.wait()
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    return elapsed


async def _to_running(client: httpx.AsyncClient) -> float:
    t0 = time.perf_counter()
    sid = await start_session(client, sh_bundle("exec sleep 60\n"), SIZED)
    await wait_status(client, sid, {"running"})
    elapsed = time.perf_counter() - t0
    await client.delete(f"/v1/sessions/{sid}")
    return elapsed


async def _count_running(client: httpx.AsyncClient, ids: set[str]) -> int:
    sessions = (await client.get("/v1/sessions")).json()["sessions"]
    return sum(1 for e in sessions if e["sessionId"] in ids and e["status"]["kind"] == "running")


async def _poll_running(client: httpx.AsyncClient, ids: set[str], n: int) -> None:
    """Until the `n` sessions of `ids` are all `running`: the list, polled
    (one request for all, five times a second: a stream or a poll per
    session would measure the client's load on the daemon, not a start)."""
    with trio.fail_after(600):
        for _ in itertools.count():
            if len(ids) == n and await _count_running(client, ids) == n:
                return
            await trio.sleep(0.2)


def lean_posts(d: Daemon) -> Path | None:
    """The burst's POSTs: through `bench.leanpost` on `d`'s socket, or
    through httpx with RUNNERD_BENCH_BURST_CLIENT=httpx (the figures
    before 2026-12-02 04:00 UTC were taken that way)."""
    return None if os.environ.get("RUNNERD_BENCH_BURST_CLIENT") == "httpx" else d.socket_path


async def _start_idle(
    client: httpx.AsyncClient,
    n: int,
    marker: str,
    clients: int = 8,
    lean: Path | None = None,
) -> float:
    """Start `n` idle sessions from `clients` concurrent clients; seconds
    from the first POST to the last `running`. With `lean` (the daemon's
    socket) the POSTs go through `bench.leanpost`, else through `client`
    (httpx), as do the polls either way."""
    ids: set[str] = set()
    body = sh_bundle(f"exec sleep {marker}\n")

    async def worker(count: int) -> None:
        if lean is not None:
            await post_sessions(lean, body, SIZED, count, ids)
            return
        for _ in range(count):
            ids.add(await start_session(client, body, SIZED))

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(clients):
            nursery.start_soon(worker, n // clients + (1 if i < n % clients else 0))
        nursery.start_soon(_poll_running, client, ids, n)
    return time.perf_counter() - t0


async def _tree_memory(d: Daemon, n: int) -> tuple[float, float]:
    """(MB of PSS per idle session, processes per session) over `n` idle
    sessions of daemon `d`, ended before returning."""
    marker = f"3600.{secrets.randbelow(10**6):06d}"
    async with d.client() as client:
        await _start_idle(client, n, marker, clients=4)
        await trio.sleep(1.0)  # slirp4netns and the inits settle
        pids = _session_pids(d.proc.pid, marker)
        pss_kb = sum(_pss_kb(pid) for pid in pids)
        for s in (await client.get("/v1/sessions")).json()["sessions"]:
            await client.delete(f"/v1/sessions/{s['sessionId']}")
    return pss_kb / 1000 / n, len(pids) / n


def namespace_floor(samples: int = 30) -> float:
    """p50 seconds to fork + exec `/bin/true` in the namespaces a session
    gets (the probed plan, with a network namespace and `lo` up), set up
    from this small process: the kernel's part of a session's start."""
    root = os.geteuid() == 0
    plan = probe_containment(allow_namespaces=True, session_uid=UID_BASE if root else None)
    identity = SessionIdentity(UID_BASE, UID_BASE) if root and plan.drops_root else None
    child = functools.partial(probe_child, plan.unshare_flags | CLONE_NEWNET, False, identity)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        subprocess.run(["/bin/true"], preexec_fn=child, cwd="/", check=True)
        times.append(time.perf_counter() - t0)
    return percentile(times, 50)


def _floor_many(n: int, threads: int = 8) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: pty_exec_floor(), range(n)))
    return time.perf_counter() - t0


async def _latency_rows(compiled: Daemon, python: Daemon, n: int) -> list[Row]:
    samples: dict[str, list[float]] = {"compiled": [], "python": [], "floor": []}
    async with compiled.client() as c, python.client() as p:
        for _ in range(n):
            samples["compiled"].append(await _to_running(c))
            samples["python"].append(await _to_running(p))
            samples["floor"].append(await trio.to_thread.run_sync(pty_exec_floor))
    floor = percentile(samples["floor"], 50)
    rows: list[Row] = [
        ("fork + exec of /bin/sh under a fresh PTY (the floor), p50", f"{floor * 1000:.1f} ms", "—")
    ]
    for way, label in (("compiled", "compiled init"), ("python", "Python init, reference")):
        p50, p99 = percentile(samples[way], 50), percentile(samples[way], 99)
        rows.append(
            (f"local POST → running ({label}; {n} sessions)",
             f"p50 {p50 * 1000:.1f} ms ({p50 / floor:.1f}× the floor), p99 {p99 * 1000:.1f} ms",
             "≤ 15 ms" if way == "compiled" else "—")
        )  # fmt: skip
    return rows


async def _memory_rows(compiled: Daemon, python: Daemon, n: int) -> list[Row]:
    rows: list[Row] = []
    for d, label in ((compiled, "compiled init"), (python, "Python init, reference")):
        mb, procs = await _tree_memory(d, n)
        rows.append(
            (f"host memory per idle local session, PSS of its tree ({label}; {n} sessions)",
             f"{mb:.2f} MB ({procs:.1f} processes per session)",
             "≤ 1 MB" if d is compiled else "—")
        )  # fmt: skip
    return rows


async def _many_rows(n: int) -> list[Row]:
    marker = f"3600.{secrets.randbelow(10**6):06d}"
    async with open_daemon(max_sessions=n + 8, replay_buffer_bytes=65536) as d, d.client() as c:
        cpu0 = cpu_seconds(d.proc.pid)
        started_s = await _start_idle(c, n, marker, lean=lean_posts(d))
        cpu_ms = (cpu_seconds(d.proc.pid) - cpu0) / n * 1000
    floor_s = await trio.to_thread.run_sync(_floor_many, n)
    ns_ms = await trio.to_thread.run_sync(namespace_floor) * 1000
    return [
        (f"{n} idle local sessions started (8 clients)",
         f"{started_s:.1f} s ({started_s / floor_s:.1f}× the floor)", "≤ 10 s"),
        (f"{n} fork + execs under fresh PTYs from 8 threads (the floor)", f"{floor_s:.2f} s", "—"),
        ("the daemon's own CPU per session started (utime + stime)", f"{cpu_ms:.1f} ms", "—"),
        ("a session's namespaces (with its network's) set up from a small process, p50",
         f"{ns_ms:.1f} ms", "—"),
    ]  # fmt: skip


async def bench_spawn(latency_n: int = 100, memory_n: int = 50) -> list[Row]:
    """Every figure of the module docstring, the load average around each."""
    many = int(os.environ.get("RUNNERD_BENCH_SESSIONS", "1000"))
    rows: list[Row] = []
    parts: list[tuple[str, Callable[[], Awaitable[list[Row]]]]] = []
    async with (
        open_daemon(max_sessions=latency_n + memory_n + 8) as compiled,
        open_daemon(max_sessions=latency_n + memory_n + 8, local_extra=PYTHON_INIT) as python,
    ):
        parts = [
            ("latency", lambda: _latency_rows(compiled, python, latency_n)),
            ("memory", lambda: _memory_rows(compiled, python, memory_n)),
        ]
        for _name, part in parts:
            load0 = os.getloadavg()[0]
            got = await part()
            rows += [(what, f"{fig}; load {load0:.1f} → {os.getloadavg()[0]:.1f}", t)
                     for what, fig, t in got]  # fmt: skip
    load0 = os.getloadavg()[0]
    rows += [(what, f"{fig}; load {load0:.1f} → {os.getloadavg()[0]:.1f}", t)
             for what, fig, t in await _many_rows(many)]  # fmt: skip
    return rows


if __name__ == "__main__":
    for row in trio.run(bench_spawn):
        print(" | ".join(row))
