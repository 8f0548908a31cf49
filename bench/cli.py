"""The command line's figures: what a user feels when typing `runnerd ...`.

- `runnerd run DIR` of a one-line script (`exit 3`), from the shell's fork to
  the exit code in the shell (bundle, POST, progress stream, attach, replay,
  status): the whole round trip, not the daemon's part alone;
- the CLI's own start-up: `runnerd --version` (interpreter + argparse +
  our imports, no request) and `runnerd ls` (start-up + one request), beside
  a bare `python -c pass` for the interpreter's share.
Each is the median (and p90) of N sequential runs against a live daemon.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from bench.harness import open_daemon, percentile

Row = tuple[str, str, str]
RUNS = 30


async def _time(argv: list[str], env: dict[str, str], expect: int, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = await trio.run_process(
            argv, env=env, stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True,
            check=False,
        )  # fmt: skip
        samples.append(time.perf_counter() - t0)
        if result.returncode != expect:
            raise RuntimeError(f"{argv} exited {result.returncode}: {result.stderr!r}")
    return samples


def _row(what: str, samples: list[float], target: str) -> Row:
    median, p90 = statistics.median(samples) * 1000, percentile(samples, 90) * 1000
    return (what, f"{median:.0f} ms (p90 {p90:.0f} ms, n={len(samples)})", target)


async def bench_cli(runs: int = RUNS) -> list[Row]:
    runnerd = [sys.executable, "-m", "runnerd"]
    async with open_daemon() as d:
        env = {**os.environ, "RUNNERD_SOCKET": str(d.socket_path)}
        with tempfile.TemporaryDirectory(prefix="runnerd-bench-cli-") as tmp:
            (Path(tmp) / "main.sh").write_text("exit 3\n")
            run = await _time([*runnerd, "run", tmp], env, 3, runs)
        ls = await _time([*runnerd, "ls", "-a"], env, 0, runs)
        version = await _time([*runnerd, "--version"], env, 0, runs)
        bare = await _time([sys.executable, "-c", "pass"], env, 0, runs)
    return [
        _row("`runnerd run DIR` (`exit 3`) → exit code in the shell", run, "—"),
        _row("`runnerd ls -a` (CLI start-up + one request)", ls, "—"),
        _row("`runnerd --version` (CLI start-up, no request)", version, "—"),
        _row("`python -c pass` (the interpreter alone)", bare, "—"),
    ]
