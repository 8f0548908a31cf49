"""`python -m bench watch`: watch sessions on the local backend, from outside.

A real daemon over its UNIX socket, driven as the Telo editor drives it:

- an API write (`POST /workspace`) → the app's next generation `started`
  on SSE, p50/p99, for an app runnerd restarts (`sh`): the goal is the
  300 ms debounce window plus at most 50 ms, so the figure is shown as the
  window plus the rest, beside a run session's POST → `running` p50
  measured in the same run (the cost of starting a process through
  runnerd at all; `local.terminal_size_wait_seconds = 0`, so it does not
  wait for a first terminal size, which no watch app does either);
- the same for a self-watching app (the stand-in Telo kernel,
  `tests/kubesim/kernel.py --watch`, as a `watch = "self"` runtime): runnerd
  only writes the files; the kernel notices them by polling every
  `kernel_watch.POLL_S` and settling one more poll, so its floor is two
  polls, not the debounce;
- idle suspend: from the last subscriber gone (here: none ever came) to
  `suspended`, past `watch.idle_seconds` (the contract allows 2 s), and
  resume: `POST /resume` → `running`, against the same run-session start;
- host memory of an idle watch session with two apps (the PSS of its
  processes), against an idle run session of the same workload.

Figures are printed with the load average beside them, never asserted.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from bench.harness import open_daemon, percentile, sh_bundle, start_session, wait_status
from bench.netns import _pss_kb, _session_pids
from tests.harness import SESSION_PYTHON
from tests.kubesim import kernel_watch
from tests.kubesim.images import KERNEL_PROGRAM

Row = tuple[str, str, str]
DEBOUNCE_S = 0.3
IDLE_S = 1


def _watch_toml(idle_s: int) -> str:
    return (
        "[watch]\nenabled = true\n"
        f"idle_seconds = {idle_s}\ncheckpoint_seconds = 3600\nreload_limit = 1000000\n"
        "max_sessions = 64\n"
    )


def _telo_toml() -> str:
    command = json.dumps([SESSION_PYTHON, "-I", KERNEL_PROGRAM[-1], "run", "{entry}"])
    return (
        f"[local.runtimes.telo]\ncommand = {command}\n"
        'inspect_args = ["--inspect", "127.0.0.1:{inspect_port}"]\n'
        'watch = "self"\nwatch_args = ["--watch"]\n'
    )


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def watch_body(apps: dict[str, str]) -> dict[str, Any]:
    """A watch session of `sh` apps: name → script (each its own file)."""
    files = [{"relativePath": f"{name}.sh", "contents": text} for name, text in apps.items()]
    first = next(iter(apps))
    return {
        "env": {},
        "mode": "watch",
        "config": {"image": "sh", "pullPolicy": "missing"},
        "bundle": {"entryRelativePath": f"{first}.sh", "files": files},
        "apps": [{"name": name, "entryRelativePath": f"{name}.sh"} for name in apps],
    }


@asynccontextmanager
async def run_events(
    client: httpx.AsyncClient, sid: str
) -> AsyncIterator[trio.MemoryReceiveChannel[tuple[float, dict[str, Any]]]]:
    """The session's SSE `run` events as (arrival time, event), live."""
    send, receive = trio.open_memory_channel[tuple[float, dict[str, Any]]](1000)

    async def follow() -> None:
        async with client.stream("GET", f"/v1/sessions/{sid}/events") as r:
            event = ""
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "run":
                    await send.send((time.perf_counter(), json.loads(line[6:])))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        yield receive
        nursery.cancel_scope.cancel()


async def _next_started(
    events: trio.MemoryReceiveChannel[tuple[float, dict[str, Any]]], generation: int
) -> float:
    with trio.fail_after(30):
        async for at, event in events:
            if event["phase"] == "started" and event["generation"] >= generation:
                return at
    raise RuntimeError("stream ended")


async def _status(client: httpx.AsyncClient, sid: str, kind: str, poll_s: float = 0.005) -> float:
    """Poll GET (not a subscriber) until the status is `kind`; its time."""
    with trio.fail_after(60):
        while True:
            r = await client.get(f"/v1/sessions/{sid}")
            if r.json()["status"]["kind"] == kind:
                return time.perf_counter()
            await trio.sleep(poll_s)


async def _run_session_start(client: httpx.AsyncClient, n: int) -> float:
    """A run session's POST → `running` p50 (the reference)."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        sid = await start_session(client, sh_bundle("exec sleep 60\n"))
        await wait_status(client, sid, {"running"})
        samples.append(time.perf_counter() - t0)
        await client.delete(f"/v1/sessions/{sid}")
    return percentile(samples, 50)


def _kernel_body() -> dict[str, Any]:
    return {
        "env": {},
        "mode": "watch",
        "config": {"image": "telo", "pullPolicy": "missing"},
        "bundle": {
            "entryRelativePath": "app.telo",
            "files": [{"relativePath": "app.telo", "contents": "print gen 1\nwait\n"}],
        },
    }


async def _write_to_started(client: httpx.AsyncClient, n: int, *, kernel: bool) -> list[float]:
    body = _kernel_body() if kernel else watch_body({"web": "echo gen 1; exec sleep 3600\n"})
    path = "app.telo" if kernel else "web.sh"
    sid = await start_session(client, body)
    samples = []
    async with run_events(client, sid) as events:
        await _next_started(events, 1)
        for gen in range(2, n + 2):
            t0 = time.perf_counter()
            script = f"print gen {gen}\nwait\n" if kernel else f"echo gen {gen}; exec sleep 3600\n"
            r = await client.post(
                f"/v1/sessions/{sid}/workspace",
                json={"write": [{"path": path, "content": script}]},
            )
            r.raise_for_status()
            samples.append(await _next_started(events, gen) - t0)
    await client.delete(f"/v1/sessions/{sid}")
    return samples


async def bench_watch_restart(n: int = 40) -> list[Row]:
    extra = _watch_toml(3600) + _telo_toml()
    async with open_daemon(size_wait_s=0, extra=extra) as d, d.client() as client:
        reference = await _run_session_start(client, 20)
        samples = await _write_to_started(client, n, kernel=False)
        kernel = await _write_to_started(client, n, kernel=True)
    p50, p99 = percentile(samples, 50), percentile(samples, 99)
    k50, k99 = percentile(kernel, 50), percentile(kernel, 99)
    floor = 2 * kernel_watch.POLL_S
    return [
        (
            f"API write → new generation `started` (sh app; {n} writes)",
            f"p50 {p50 * 1000:.0f} ms = debounce {DEBOUNCE_S * 1000:.0f} + "
            f"{(p50 - DEBOUNCE_S) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms; "
            f"a run session's POST → running p50 {reference * 1000:.1f} ms ({_load()})",
            "≤ debounce + 50 ms",
        ),
        (
            f"API write → `started` (self-watching stand-in kernel; {n} writes)",
            f"p50 {k50 * 1000:.0f} ms = its two polls {floor * 1000:.0f} + "
            f"{(k50 - floor) * 1000:.0f} ms, p99 {k99 * 1000:.0f} ms ({_load()})",
            "≤ its own watch + 50 ms",
        ),
    ]


async def bench_watch_suspend(n: int = 10) -> list[Row]:
    suspends, resumes = [], []
    async with open_daemon(size_wait_s=0, extra=_watch_toml(IDLE_S)) as d, d.client() as client:
        reference = await _run_session_start(client, 20)
        for _ in range(n):
            body = watch_body({"web": "exec sleep 3600\n", "api": "exec sleep 3600\n"})
            sid = await start_session(client, body)
            running_at = await _status(client, sid, "running")
            suspends.append(await _status(client, sid, "suspended", 0.01) - running_at - IDLE_S)
            t0 = time.perf_counter()
            (await client.post(f"/v1/sessions/{sid}/resume")).raise_for_status()
            resumes.append(await _status(client, sid, "running") - t0)
            await client.delete(f"/v1/sessions/{sid}")
    return [
        (
            f"idle → `suspended`, past idle_seconds (2 apps; {n} sessions)",
            f"p50 {percentile(suspends, 50) * 1000:.0f} ms, max {max(suspends) * 1000:.0f} ms "
            f"({_load()})",
            "≤ 2 s (contract)",
        ),
        (
            "POST /resume → `running` (2 apps)",
            f"p50 {percentile(resumes, 50) * 1000:.0f} ms, "
            f"{percentile(resumes, 50) / reference:.1f}× a run session's POST → running "
            f"({reference * 1000:.1f} ms, {_load()})",
            "—",
        ),
    ]


async def bench_watch_memory(n: int = 10) -> list[Row]:
    marker = f"3600.{secrets.randbelow(10**6):06d}"
    sleep = f"exec sleep {marker}\n"
    async with open_daemon(size_wait_s=0, extra=_watch_toml(3600)) as d, d.client() as client:
        run_ids = [await start_session(client, sh_bundle(sleep)) for _ in range(n)]
        for sid in run_ids:
            await _status(client, sid, "running")
        await trio.sleep(1.0)
        run_pss = sum(_pss_kb(pid) for pid in _session_pids(d.proc.pid, marker)) / n
        for sid in run_ids:
            await client.delete(f"/v1/sessions/{sid}")
        ids = [
            await start_session(client, watch_body({"web": sleep, "api": sleep})) for _ in range(n)
        ]
        for sid in ids:
            await _status(client, sid, "running")
        await trio.sleep(1.0)
        watch_pss = sum(_pss_kb(pid) for pid in _session_pids(d.proc.pid, marker)) / n
    return [
        (
            f"host memory per idle watch session, 2 apps (PSS; {n} sessions)",
            f"{watch_pss / 1000:.2f} MB, {watch_pss / run_pss:.2f}× an idle run session "
            f"({run_pss / 1000:.2f} MB, {_load()})",
            "—",
        )
    ]


async def bench_watch() -> list[Row]:
    return await bench_watch_restart() + await bench_watch_suspend() + await bench_watch_memory()
