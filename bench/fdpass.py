"""`python -m bench.fdpass [FDS] [N]`: a spawn's cost with two fds handed on.

In this process, with `FDS` (6,000: a daemon with 1,000 sessions) fds
open, `N` (200) runs of `/bin/true` through `subprocess` with two fds in
`pass_fds`, three ways taking turns: the two side by side (CPython's child
then closes every fd one by one, `runnerd.local.fdpass`), the same two
through `fdpass.passing`, and apart by themselves (the floor). Per spawn:
wall time, the child's CPU and this process's (its wait reaps the child and
drops its /proc entries). Printed, never asserted; the load beside it.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable

from runnerd.local import fdpass


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _side_by_side(fds: list[int]) -> None:
    subprocess.run(["/bin/true"], pass_fds=(fds[10], fds[11]), check=True)


def _handed(fds: list[int]) -> None:
    with fdpass.passing() as hand:
        hand(fds[10])
        hand(fds[11])
        subprocess.run(["/bin/true"], pass_fds=hand.fds, check=True)


def _apart(fds: list[int]) -> None:
    subprocess.run(["/bin/true"], pass_fds=(fds[10], fds[12]), check=True)


def main(count: int, n: int) -> None:
    fds = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(count)]
    ways: dict[str, Callable[[list[int]], None]] = {
        "side by side": _side_by_side,
        "through fdpass": _handed,
        "apart (floor)": _apart,
    }
    took = {name: [0.0, 0.0, 0.0] for name in ways}
    load0 = os.getloadavg()[0]
    for _ in range(n):
        for name, way in ways.items():
            t0 = time.perf_counter()
            c0, s0 = _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF)
            way(fds)
            sums = took[name]
            sums[0] += time.perf_counter() - t0
            sums[1] += _cpu(resource.RUSAGE_CHILDREN) - c0
            sums[2] += _cpu(resource.RUSAGE_SELF) - s0
    floor = took["apart (floor)"][0]
    for name, (wall, child, parent) in took.items():
        print(
            f"{count} fds open, two handed on {name}: {wall / n * 1000:.2f} ms a spawn"
            f" ({wall / floor:.2f}× the floor), child CPU {child / n * 1000:.2f} ms,"
            f" parent CPU {parent / n * 1000:.2f} ms; load {load0:.1f} → {os.getloadavg()[0]:.1f}"
        )
    for fd in fds:
        os.close(fd)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [6000, 200][len(args) :]))
