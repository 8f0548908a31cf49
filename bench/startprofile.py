"""Where a daemon's start goes, beside `bench.startup`'s figures (issue 22).

Two measurements per daemon and round, taken in turn with its starts:

- one start under `-X importtime`, whose self times are summed: runnerd's
  own modules (`runnerd.*`) against everything else it imports (the stdlib,
  trio, the serving layer quart-trio/hypercorn and what they pull, httpx on
  the kubernetes backend), printed as "serving layer". `-X importtime`
  itself adds a little to every module, so these are upper bounds, not
  parts of the plain start's wall time;
- the local backend's host probes on their own: `LocalBackend` built on the
  same config in a fresh interpreter (its containment, network, init and
  cgroup checks: what a start pays on its path unless they run beside the
  imports, `runnerd.local.hostprobe`); 0 on the kubernetes backend.

Printed, never asserted.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import trio

from bench.harness import build_config_text, open_daemon

_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)")
# The probes of a local backend, alone: a fresh interpreter, the config read,
# then `LocalBackend` built (it probes in its constructor when no probe
# child was started), timed.
_PROBES = """
import sys, time
from pathlib import Path
from runnerd.cli.main import read_config
from runnerd.local import LocalBackend
config = read_config(Path(sys.argv[1]))
t0 = time.perf_counter()
LocalBackend(config.settings)
print(time.perf_counter() - t0)
"""


class Breakdown(NamedTuple):
    serving_s: float  # self time of every module not runnerd's
    runnerd_s: float  # self time of runnerd's own modules
    probes_s: float  # the local backend's host probes, alone


def split_import_times(stderr: str) -> tuple[float, float]:
    """(everything else, runnerd's own): summed self times, in seconds,
    from `-X importtime` output (other lines are ignored)."""
    ours = others = 0
    for match in _IMPORT_LINE.finditer(stderr):
        us, module = int(match[1]), match[2]
        if module == "runnerd" or module.startswith("runnerd."):
            ours += us
        else:
            others += us
    return others / 1e6, ours / 1e6


async def profile_start(repo: Path, config: Callable[[Path], str] | None) -> Breakdown:
    """One start of the daemon from `repo` (local, or the one `config`
    writes, as `open_daemon` takes it) under `-X importtime`, and the local
    backend's probes alone (0 for another backend)."""
    with tempfile.TemporaryFile() as err:
        async with open_daemon(
            repo=repo, config=config, python_flags=("-X", "importtime"), stderr=err.fileno()
        ):
            pass
        err.seek(0)
        serving_s, runnerd_s = split_import_times(err.read().decode(errors="replace"))
    probes_s = 0.0 if config is not None else await trio.to_thread.run_sync(_probes_s, repo)
    return Breakdown(serving_s, runnerd_s, probes_s)


def _probes_s(repo: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="runnerd-bench-probes-") as tmp:
        base = Path(tmp)
        cfg = base / "runnerd.toml"
        cfg.write_text(build_config_text(base, max_sessions=64, replay_buffer_bytes=5_000_000))
        done = subprocess.run(
            [sys.executable, "-c", _PROBES, str(cfg)],
            cwd=repo,
            check=True,
            capture_output=True,
            text=True,
        )
    return float(done.stdout.split()[-1])


def describe(profiles: list[Breakdown]) -> str:
    """The medians, as the "of which" line prints them."""

    def ms(field: str) -> str:
        return f"{statistics.median(getattr(p, field) for p in profiles) * 1e3:.0f} ms"

    return (
        f"serving layer {ms('serving_s')}, runnerd modules {ms('runnerd_s')},"
        f" probes {ms('probes_s')} (self times under -X importtime; probes alone)"
    )
