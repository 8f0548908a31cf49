"""`python -m bench.watchcore`: a watch session's restarts through a real daemon, same run.

One daemon (local backend, `[watch] enabled`), timed from the client's
request to the event a client waits for, on a held SSE stream:

- the reference: a run session, `POST /v1/sessions` → `status running`;
- `POST /reload` → the next generation's `run started` (no debounce);
- `POST /workspace` (one write) → `run started {trigger: watch}`, which
  includes the 300 ms debounce (`runnerd.watch.debounce.DELAY_S`), shown
  also without it;
- `POST /resume` of a suspended session → `status running` (a new sandbox,
  the workspace restored from its checkpoint, every app started).

Medians of `ROUNDS`; each as its ratio to the reference measured in the
same run. Printed, never asserted. Run as its own module.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from bench.harness import open_daemon, sh_bundle, start_session, wait_status
from runnerd.watch.debounce import DELAY_S

ROUNDS = int(os.environ.get("RUNNERD_BENCH_WATCHCORE_ROUNDS", "15"))
SERVE = "echo up; exec sleep 600"
WATCH = "[watch]\nenabled = true\nidle_seconds = 1\n"
JSON = {"content-type": "application/json"}


@asynccontextmanager
async def events(
    client: httpx.AsyncClient, sid: str
) -> AsyncIterator[trio.MemoryReceiveChannel[dict[str, Any]]]:
    """The session's SSE events, as they arrive, while held (a subscriber)."""
    send, receive = trio.open_memory_channel[dict[str, Any]](1000)

    async def follow() -> None:
        async with client.stream("GET", f"/v1/sessions/{sid}/events", timeout=None) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    await send.send(json.loads(line[6:]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        yield receive
        nursery.cancel_scope.cancel()


async def _until(
    stream: trio.MemoryReceiveChannel[dict[str, Any]], want: Callable[[dict[str, Any]], bool]
) -> None:
    with trio.fail_after(60):
        async for event in stream:
            if want(event):
                return


def _kind(event: dict[str, Any]) -> str | None:
    return event["status"]["kind"] if event["type"] == "status" else None


def _started(generation: int) -> Callable[[dict[str, Any]], bool]:
    return lambda e: (
        e["type"] == "run" and e["phase"] == "started" and e["generation"] == generation
    )


async def _timed(
    action: Callable[[], Awaitable[object]], done: Callable[[], Awaitable[None]]
) -> float:
    t0 = time.perf_counter()
    await action()
    await done()
    return time.perf_counter() - t0


async def _reference(client: httpx.AsyncClient) -> float:
    t0 = time.perf_counter()
    sid = await start_session(client, sh_bundle(SERVE))
    await wait_status(client, sid, {"running"})
    elapsed = time.perf_counter() - t0
    await client.delete(f"/v1/sessions/{sid}")
    return elapsed


async def _restarts(
    client: httpx.AsyncClient, path: str, body: dict[str, Any] | None
) -> list[float]:
    watch = {**sh_bundle(SERVE), "mode": "watch"}
    sid = await start_session(client, watch)
    times = []
    async with events(client, sid) as stream:
        await _until(stream, lambda e: e["type"] == "status" and e["status"]["kind"] == "running")
        for generation in range(2, ROUNDS + 2):
            post = client.post(
                f"/v1/sessions/{sid}/{path}", json=body, headers=None if body else JSON
            )
            times.append(
                await _timed(lambda p=post: p, lambda g=generation: _until(stream, _started(g)))
            )
    await client.delete(f"/v1/sessions/{sid}")
    return times


async def _resumes(client: httpx.AsyncClient) -> list[float]:
    sid = await start_session(client, {**sh_bundle(SERVE), "mode": "watch"})
    times = []
    for round_ in range(ROUNDS):
        # A plain GET is the only way to look without subscribing.
        while (await client.get(f"/v1/sessions/{sid}")).json()["status"]["kind"] != "suspended":  # noqa: ASYNC110
            await trio.sleep(0.05)  # plain GETs: an open stream would hold it up
        async with events(client, sid) as stream:  # replays every earlier round first
            for _ in range(round_ + 1):
                await _until(stream, lambda e: _kind(e) == "suspended")
            t0 = time.perf_counter()
            await client.post(f"/v1/sessions/{sid}/resume", headers=JSON)
            await _until(stream, lambda e: _kind(e) == "running")
            times.append(time.perf_counter() - t0)
    await client.delete(f"/v1/sessions/{sid}")
    return times


async def bench_watchcore() -> list[tuple[str, str]]:
    async with open_daemon(extra=WATCH) as d, d.client() as client:
        before = [await _reference(client) for _ in range(ROUNDS)]
        reloads = await _restarts(client, "reload", None)
        writes = await _restarts(
            client, "workspace", {"write": [{"path": "a.txt", "content": "1"}]}
        )
        resumes = await _resumes(client)
        after = [await _reference(client) for _ in range(ROUNDS)]
    reference = statistics.median(before + after)
    rows = [("run session POST → running (the reference)", f"{reference * 1000:.1f} ms")]
    for what, times, minus in (
        ("POST /reload → run started", reloads, 0.0),
        ("POST /workspace → run started (with the 300 ms debounce)", writes, 0.0),
        ("POST /workspace → run started, less the debounce", writes, DELAY_S),
        ("POST /resume → running", resumes, 0.0),
    ):
        median = statistics.median(times) - minus
        rows.append((what, f"{median / reference:.2f}× ({median * 1000:.1f} ms)"))
    return rows


async def main() -> None:
    rows = await bench_watchcore()
    print(f"\nmachine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, {ROUNDS} rounds\n")
    print("| benchmark | median, over the reference |")
    print("|---|---|")
    for what, figure in rows:
        print(f"| {what} | {figure} |")


if __name__ == "__main__":
    trio.run(main)
