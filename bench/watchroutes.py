"""`python -m bench.watchroutes`: the watch session routes, through a real daemon.

One daemon (local backend, UNIX socket), one watch session of one app whose
workspace holds `FILES` small files. Each figure is a median of `ROUNDS`
round trips with its ratio to a reference measured in the same run:

- `GET /v1/sessions/{id}` (the reference: in-memory state, no workspace IO);
- `GET /workspace` (a walk of the workspace, every file hashed);
- `POST /workspace` of one small file (the write, the debounce scheduled);
- edit → restart: from sending a one-file `POST /workspace` to its
  `run started {trigger: watch}` on the event stream, against the
  debounce delay the contract sets (300 ms; the contract allows 2 s).

Run as its own module (`python -m bench.watchroutes`), so `bench/__main__.py`
is untouched. Printed, never asserted.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import trio

from bench.harness import open_daemon, start_session, wait_status
from runnerd.watch.debounce import DELAY_S

FILES = 200
ROUNDS = 30
RESTARTS = 8
WATCH = "[watch]\nenabled = true\nreload_limit = 100000\n"
Row = tuple[str, str, str]


def _body() -> dict[str, Any]:
    files = [{"relativePath": f"src/f{i}.txt", "contents": "x" * 512} for i in range(FILES)]
    files.append({"relativePath": "main.sh", "contents": "echo up; exec sleep 600"})
    return {
        "env": {},
        "mode": "watch",
        "config": {"image": "sh", "pullPolicy": "missing"},
        "bundle": {"entryRelativePath": "main.sh", "files": files},
    }


async def _median_s(call: Callable[[], Awaitable[httpx.Response]]) -> float:
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        response = await call()
        times.append(time.perf_counter() - t0)
        if response.status_code >= 300:
            raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")
    return statistics.median(times)


async def _wait_started(client: httpx.AsyncClient, sid: str, generation: int) -> None:
    """Until the app's `generation` has started (the stream replays from 1)."""
    async with client.stream("GET", f"/v1/sessions/{sid}/events") as events:
        async for line in events.aiter_lines():
            event = json.loads(line[6:]) if line.startswith("data: ") else {}
            if event.get("type") == "run" and event["generation"] == generation:
                return
    raise RuntimeError("the event stream ended before the restart")


async def _restart_s(client: httpx.AsyncClient, sid: str, generation: int) -> float:
    """Send one write; seconds until the app's `generation` starts (trigger watch)."""
    change = {"write": [{"path": "main.sh", "content": f"echo {generation}; exec sleep 600"}]}
    async with client.stream("GET", f"/v1/sessions/{sid}/events") as events:
        t0 = time.perf_counter()
        written = await client.post(f"/v1/sessions/{sid}/workspace", json=change)
        assert written.status_code == 200, written.text
        async for line in events.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event.get("type") == "run" and event["generation"] == generation:
                if event["phase"] == "started":
                    assert event["trigger"] == "watch", event
                    return time.perf_counter() - t0
    raise RuntimeError("the event stream ended before the restart")


async def bench_watchroutes() -> list[Row]:
    async with open_daemon(extra=WATCH) as daemon, daemon.client() as client:
        sid = await start_session(client, _body())
        await wait_status(client, sid, {"running"})
        base = f"/v1/sessions/{sid}"
        reference = await _median_s(lambda: client.get(base))
        listing = await _median_s(lambda: client.get(f"{base}/workspace"))
        one = {"write": [{"path": "note.txt", "content": "n"}]}
        write = await _median_s(lambda: client.post(f"{base}/workspace", json=one))
        # The writes' one (debounced) restart is generation 2: measure from 3 on.
        await _wait_started(client, sid, 2)
        first = 3
        restarts = [await _restart_s(client, sid, first + i) for i in range(RESTARTS)]
    restart = statistics.median(restarts)
    ms = 1000.0
    return [
        ("GET /v1/sessions/{id} (reference)", f"{reference * ms:.2f} ms", "1.00x"),
        (f"GET /workspace ({FILES + 1} files)", f"{listing * ms:.2f} ms",
         f"{listing / reference:.2f}x the reference"),
        ("POST /workspace (one file)", f"{write * ms:.2f} ms",
         f"{write / reference:.2f}x the reference"),
        ("edit → run started (watch)", f"{restart * ms:.0f} ms",
         f"{restart / DELAY_S:.2f}x the {DELAY_S * ms:.0f} ms debounce (contract: ≤ 2 s)"),
    ]  # fmt: skip


async def main() -> None:
    rows = await bench_watchroutes()
    print("| benchmark | median | against |")
    print("|---|---|---|")
    for what, figure, against in rows:
        print(f"| {what} | {figure} | {against} |")


if __name__ == "__main__":
    if sys.argv[1:]:
        raise SystemExit("usage: python -m bench.watchroutes")
    trio.run(main)
