"""`python -m bench.spawn_ab REF [LATENCY_N] [MANY_N] [ROUNDS]`: local starts against `REF`.

`REF` is another checkout of runnerd (a `git worktree` of an older commit,
with its `runnerd/local/nsinit.bin` built), run from its own directory, so
each figure has its reference from the same minutes:

- `POST /v1/sessions` → `running` (SSE), p50 / p99 of `LATENCY_N` (100)
  sequential idle sessions on each daemon and the floor (fork + exec under
  a fresh PTY, `bench.spawn.pty_exec_floor`), taking turns sample by
  sample so the machine's load falls on each alike;
- `MANY_N` (1,000) idle sessions from 8 clients on a fresh daemon of each,
  `ROUNDS` (2) times, the two taking turns (ABBA, 10 s apart): the wall time (POST of the
  first → the last `running`) and the daemon's CPU per session, then
  its shutdown with them all (SIGTERM → exit: every session stopped).

Each line carries the 1-minute load average before → after. Figures are
printed, never asserted.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import trio

from bench.harness import REPO, open_daemon, percentile
from bench.spawn import _start_idle, _to_running, lean_posts, pty_exec_floor
from bench.throughput import cpu_seconds

SETTLE_S = 10.0


def _load() -> float:
    return os.getloadavg()[0]


async def latency(ref: Path, n: int) -> list[str]:
    samples: dict[str, list[float]] = {"this": [], "ref": [], "floor": []}
    load0 = _load()
    async with (
        open_daemon(max_sessions=16) as this,
        open_daemon(max_sessions=16, repo=ref) as before,
        this.client() as c,
        before.client() as b,
    ):
        for _ in range(n):
            samples["this"].append(await _to_running(c))
            samples["ref"].append(await _to_running(b))
            samples["floor"].append(await trio.to_thread.run_sync(pty_exec_floor))
    ref_p50 = percentile(samples["ref"], 50)
    lines = []
    for way in ("this", "ref", "floor"):
        p50, p99 = percentile(samples[way], 50), percentile(samples[way], 99)
        lines.append(
            f"POST → running, {way}: p50 {p50 * 1000:.1f} ms ({p50 / ref_p50:.2f}× ref),"
            f" p99 {p99 * 1000:.1f} ms"
        )
    return [f"{line}; load {load0:.1f} → {_load():.1f}" for line in lines]


async def many(repo: Path, n: int) -> str:
    marker = f"3600.{secrets.randbelow(10**6):06d}"
    async with (
        open_daemon(max_sessions=n + 8, replay_buffer_bytes=65536, repo=repo) as d,
        d.client() as c,
    ):
        load0, cpu0 = _load(), cpu_seconds(d.proc.pid)
        started_s = await _start_idle(c, n, marker, lean=lean_posts(d))
        cpu_ms = (cpu_seconds(d.proc.pid) - cpu0) / n * 1000
        load1 = _load()
        stop_s = await d.terminate()
    return (
        f"{n} sessions, {'this' if repo == REPO else 'ref'}: {started_s:.2f} s,"
        f" daemon CPU {cpu_ms:.2f} ms per session; load {load0:.1f} → {load1:.1f};"
        f" then SIGTERM → exit {stop_s:.2f} s"
    )


async def main(ref: Path, latency_n: int, many_n: int, rounds: int) -> None:
    if latency_n:
        for line in await latency(ref, latency_n):
            print(line, flush=True)
    # ABBA: each checkout runs as often first and second after the other's
    # teardown (the kernel frees 1,000 network namespaces in the background
    # for seconds after a shutdown), with a pause for that between runs.
    for i in range(rounds):
        for repo in (ref, REPO) if i % 2 == 0 else (REPO, ref):
            print(await many(repo, many_n), flush=True)
            await trio.sleep(SETTLE_S)


if __name__ == "__main__":
    args = sys.argv[1:]
    nums = [int(a) for a in args[1:]] + [100, 1000, 2][len(args) - 1 :]
    trio.run(main, Path(args[0]).resolve(), *nums[:3])
