"""Figures for replay continuity across a restart (runnerd.session.statefile).

`.venv/bin/python -m bench.restart [--sessions N]` measures, on real files in
a temp dir on this machine's disk: one reservation write (the atomic,
fsynced rewrite a live session pays once per 1024 events or PTY chunks),
the per-chunk cost of PTY output with and without the reserver, and a
detach's save and a successor's load of N sessions whose rings are full
(`replay_buffer_bytes` = 5 MB of PTY output each, the default). Printed,
never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from runnerd.contract import progress_event
from runnerd.session.registry import SessionRecord
from runnerd.session.statefile import StateDir

REPLAY_BYTES = 5_000_000
CHUNK = b"x" * 4096  # a typical PTY read


def _full_record(state: StateDir | None, session_id: str) -> SessionRecord:
    reserver = None if state is None else state.reserver(session_id)
    record = SessionRecord(session_id, 0.0, REPLAY_BYTES, reserver=reserver)
    for i in range(2 * REPLAY_BYTES // len(CHUNK)):
        record.output(CHUNK)
        if i % 64 == 0:
            record.emit(progress_event("boot", f"step {i}"))
    return record


def main(sessions: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        state = StateDir.open(Path(tmp) / "state")
        writes = []
        for i in range(200):
            t0 = time.perf_counter()
            state.reserver(f"w{i:04d}").claim(1, 1)
            writes.append(time.perf_counter() - t0)
        print(
            f"reservation write (fsync + rename): median {statistics.median(writes) * 1e3:.3f}"
            f" ms, p95 {sorted(writes)[189] * 1e3:.3f} ms"
        )
        for label, files in (("without", None), ("with", state)):
            t0 = time.perf_counter()
            _full_record(files, "perchunk")
            per = (time.perf_counter() - t0) / (2 * REPLAY_BYTES // len(CHUNK))
            print(f"PTY output per 4 KiB chunk, {label} the reserver: {per * 1e6:.2f} µs")
        records = [_full_record(None, f"s{i:04d}") for i in range(sessions)]
        t0 = time.perf_counter()
        for record in records:
            state.save_replay(record)
        saved = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in state.path.glob("s*.json"))
        t0 = time.perf_counter()
        for record in records:
            resumed = state.resume(record.id)
            SessionRecord(record.id, 0.0, REPLAY_BYTES, resumed=resumed)
        loaded = time.perf_counter() - t0
        print(
            f"detach save of {sessions} full sessions: {saved:.2f} s, {size / 1e6:.1f} MB on"
            f" disk; successor load + ring rebuild: {loaded:.2f} s"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=8)
    main(parser.parse_args().sessions)
