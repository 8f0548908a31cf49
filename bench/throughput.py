"""`python -m bench throughput`: PTY → WebSocket against the bare PTY, same run.

The workload writes `total_bytes` to its PTY; a lean raw WebSocket client
(`harness.drain_pty_raw`) reads the session's `/io` to its close. The floor
is the kernel's own rate for the same workload: a blocking read loop on a
bare PTY, no trio, no HTTP, measured right before and right after on the
same machine. The figures printed: the rate, its ratio to the floor (issue
22's goal: ≥ 0.9×), the daemon's CPU seconds per MB (utime + stime from `/proc/PID/stat`, the
daemon's own, not its children's, over the drain), and the 1-minute load
average at the start and end.
"""

from __future__ import annotations

import os
import subprocess
import time

import trio

from bench.harness import drain_pty_raw, open_daemon, sh_bundle, start_session, wait_status

MB = 1_000_000
CHUNK = 65536
Row = tuple[str, str, str]


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


async def daemon_rate(total_bytes: int) -> tuple[float, int, int, float]:
    """(MB/s, bytes received, gaps, daemon CPU s per MB) through a session.

    The replay buffer is larger than the payload, so a client slower than
    the workload shows as a lower rate, not as evicted bytes."""
    async with open_daemon(replay_buffer_bytes=2 * total_bytes) as d, d.client() as client:
        sid = await start_session(client, sh_bundle(writer_script(total_bytes)))
        await wait_status(client, sid, {"running"})
        cpu0 = cpu_seconds(d.proc.pid)
        with trio.fail_after(300):
            received, gaps, elapsed = await drain_pty_raw(d.socket_path, sid, send=b"go\n")
        cpu = cpu_seconds(d.proc.pid) - cpu0
    return received / elapsed / MB, received, gaps, cpu / (received / MB)


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


async def bench_throughput(total_bytes: int = 512 * 1024 * 1024) -> list[Row]:
    """The floor, the daemon's rate, the floor again; the ratio is to the
    mean of the two floors (the machine's load drifts between runs)."""
    total_bytes = int(os.environ.get("RUNNERD_BENCH_THROUGHPUT_BYTES", total_bytes))
    load0 = os.getloadavg()[0]
    before, _ = await trio.to_thread.run_sync(bare_pty_rate, total_bytes)
    rate, received, gaps, cpu_per_mb = await daemon_rate(total_bytes)
    after, floor_cpu_per_mb = await trio.to_thread.run_sync(bare_pty_rate, total_bytes)
    load1 = os.getloadavg()[0]
    floor = (before + after) / 2
    note = f"{received / MB:.0f} MB, {gaps} gaps, load {load0:.1f} → {load1:.1f}"
    return [
        ("PTY → WebSocket throughput", f"{rate:.0f} MB/s ({note})", "—"),
        (
            "same workload, bare PTY read loop (the floor), before / after",
            f"{before:.0f} / {after:.0f} MB/s",
            "—",
        ),
        ("PTY → WebSocket / floor (their mean)", f"{rate / floor:.2f}×", "≥ 0.9×"),
        ("daemon CPU per MB streamed", f"{cpu_per_mb * 1000:.1f} ms/MB", "—"),
        ("bare PTY reader's CPU per MB (the floor's)", f"{floor_cpu_per_mb * 1000:.1f} ms/MB", "—"),
    ]
