"""`python -m bench.profiled FILE ARGS...`: `python -m runnerd ARGS...` under cProfile.

The daemon ends with `os._exit` (no interpreter teardown, so cProfile's own
`-o` is never written): the profile is dumped to FILE just before, by the
daemon's own process only (a forked child calling `os._exit` writes
nothing). Read it with `python -m pstats FILE`. `open_daemon` runs the
daemon this way when `RUNNERD_BENCH_PROFILE=FILE` is set.
"""

from __future__ import annotations

import cProfile
import os
import runpy
import sys
from typing import NoReturn


def main() -> None:
    path, args = sys.argv[1], sys.argv[2:]
    profiler = cProfile.Profile()
    pid, real_exit = os.getpid(), os._exit

    def exit_dumping(code: int) -> NoReturn:
        if os.getpid() == pid:
            profiler.disable()
            profiler.dump_stats(path)
        real_exit(code)

    os._exit = exit_dumping
    sys.argv = ["runnerd", *args]
    profiler.enable()
    runpy.run_module("runnerd", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
