"""`python -m bench.spawn_profile N [OUT]`: the daemon's cost of `N` idle sessions.

Starts `N` idle local sessions from 8 clients on a fresh default daemon (as
`bench.spawn`'s 1,000-session row) and prints the wall time, the daemon's
own CPU per session (utime + stime over the start), its RSS once they idle,
and the 1-minute load average before and after. With `OUT`, `py-spy record
-r 250 -f raw --threads --gil` samples the daemon into `OUT` meanwhile
(py-spy on `PATH` or in the venv). Figures are printed, never asserted; run
it against an older checkout in the same minutes for a reference.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import trio

from bench.harness import open_daemon
from bench.spawn import _start_idle
from bench.throughput import cpu_seconds


def _rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return 0


def _py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


async def profile_start(n: int, out: str | None) -> str:
    marker = f"3600.{secrets.randbelow(10**6):06d}"
    async with open_daemon(max_sessions=n + 8, replay_buffer_bytes=65536) as d, d.client() as c:
        spy = None
        if out is not None:
            argv = [_py_spy(), "record", "-r", "250", "-f", "raw", "--threads", "--gil"]
            spy = await trio.lowlevel.open_process(
                [*argv, "-o", out, "-p", str(d.proc.pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await trio.sleep(1.5)  # py-spy attaches
        load0, cpu0 = os.getloadavg()[0], cpu_seconds(d.proc.pid)
        started_s = await _start_idle(c, n, marker)
        cpu_ms = (cpu_seconds(d.proc.pid) - cpu0) / n * 1000
        line = (
            f"{n} sessions: {started_s:.2f} s, daemon CPU {cpu_ms:.2f} ms per session,"
            f" daemon RSS {_rss_mb(d.proc.pid)} MB; load {load0:.1f} → {os.getloadavg()[0]:.1f}"
        )
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes OUT and exits
            await spy.wait()
    return line


if __name__ == "__main__":
    print(trio.run(profile_start, int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))
