"""`python -m bench.watchio`: a watch session app's `/io` against a run session's, same run.

One daemon, one workload (`throughput.writer_script`: wait for a line, then
`total_bytes` in 64 KiB writes), read to its last byte by the lean raw
client (`harness.drain_pty_raw`) three ways: a run session's PTY (the
reference), a watch session's `tty` app (its own PTY, its own ring of
chunks that carry a stream byte) and a `streams` app (stdout on a pipe).
The reference is measured before and after the two apps, and each app's
rate is printed as its ratio to the mean of the two: the figure says what
serving an app's ring costs over a run session's, on this machine, now.
Run as its own module (not one of `python -m bench`'s names, whose list
the watch benchmarks of `bench.watch` share).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import trio

from bench.harness import drain_pty_raw, open_daemon, sh_bundle, start_session, wait_status
from bench.throughput import MB, writer_script

Row = tuple[str, str, str]
WATCH = "[watch]\nenabled = true\n"


def watch_body(script: str, io: str) -> dict[str, Any]:
    body = sh_bundle(script)
    return {
        **body,
        "mode": "watch",
        "apps": [{"name": "w", "entryRelativePath": "main.sh", "io": io}],
    }


async def _rate(socket: Any, client: Any, body: dict[str, Any], total: int, watch: bool) -> float:
    sid = await start_session(client, body)
    await wait_status(client, sid, {"running"})
    with trio.fail_after(300):
        received, _, elapsed = await drain_pty_raw(
            socket,
            sid,
            send=b"go\n",
            query="?app=w" if watch else "",
            head_bytes=5 if watch else 4,
            until_bytes=total if watch else None,
        )
    await client.delete(f"/v1/sessions/{sid}")
    return received / elapsed / MB


async def bench_watchio(total_bytes: int = 128 * 1024 * 1024) -> list[Row]:
    total_bytes = int(os.environ.get("RUNNERD_BENCH_WATCHIO_BYTES", total_bytes))
    script = writer_script(total_bytes)
    async with (
        open_daemon(replay_buffer_bytes=2 * total_bytes, extra=WATCH) as d,
        d.client() as client,
    ):
        path = d.socket_path
        before = await _rate(path, client, sh_bundle(script), total_bytes, watch=False)
        tty = await _rate(path, client, watch_body(script, "tty"), total_bytes, watch=True)
        streams = await _rate(path, client, watch_body(script, "streams"), total_bytes, watch=True)
        after = await _rate(path, client, sh_bundle(script), total_bytes, watch=False)
    reference = (before + after) / 2
    size = f"{total_bytes / MB:.0f} MB"
    return [
        (
            f"run session PTY → /io ({size}; the reference), before / after",
            f"{before:.0f} / {after:.0f} MB/s",
            "—",
        ),
        (
            "watch `tty` app → /io?app=, over the reference",
            f"{tty / reference:.2f}× ({tty:.0f} MB/s)",
            "—",
        ),
        (
            "watch `streams` app → /io?app=, over the reference",
            f"{streams / reference:.2f}× ({streams:.0f} MB/s)",
            "—",
        ),
    ]


async def main() -> None:
    rows = await bench_watchio()
    print(f"\nmachine: {os.cpu_count()} cores, Python {sys.version.split()[0]}\n")
    print("| benchmark | measured | target |")
    print("|---|---|---|")
    for what, figure, target in rows:
        print(f"| {what} | {figure} | {target} |")


if __name__ == "__main__":
    trio.run(main)
