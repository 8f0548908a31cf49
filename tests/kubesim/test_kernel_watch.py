"""The stand-in kernel under `--watch`, as a program: each change of its entry's
directory is a new run, and its debug stream carries the real kernel's
lifecycle events (`Kernel.PortsResolved`, `Kernel.Starting`, `Kernel.Stopped`,
`Kernel.RunFailed`) with their shapes, which `runnerd.watch.kernel` projects."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from runnerd.watch.kernel import KernelProjection
from runnerd.watch.runs import AppRuns
from tests.kubesim.images import KERNEL_PROGRAM

Frame = dict[str, Any]
TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Kernel:
    """A watching kernel and its debug stream, read as it goes."""

    def __init__(self, process: trio.Process, frames: trio.MemoryReceiveChannel[Frame]) -> None:
        self.process, self._frames = process, frames
        self.seen: list[Frame] = []

    async def until(self, wanted: Callable[[Frame], bool]) -> list[Frame]:
        """Event frames up to and including the first one `wanted` accepts."""
        taken: list[Frame] = []
        with trio.fail_after(TIMEOUT_S):
            async for frame in self._frames:
                self.seen.append(frame)
                if frame.get("kind") == "event":
                    taken.append(frame)
                    if wanted(frame):
                        return taken
        raise AssertionError(f"the debug stream ended: {self.seen}")

    async def until_printed(self, text: str) -> None:
        """Until the run printed the line `text` (its log frame)."""
        line = {"kind": "log", "stream": "stdout", "text": text}
        with trio.fail_after(TIMEOUT_S):
            while line not in self.seen:
                self.seen.append(await self._frames.receive())


def named(name: str) -> Callable[[Frame], bool]:
    return lambda frame: frame.get("event") == name


async def _read_debug(port: int, send: trio.MemorySendChannel[Frame]) -> None:
    url = f"http://127.0.0.1:{port}/events"
    async with httpx.AsyncClient(timeout=httpx.Timeout(5, read=None), trust_env=False) as http:
        while True:  # the server comes up a moment after the process
            try:
                async with http.stream("GET", url) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            await send.send(json.loads(line[6:]))
                return
            except httpx.ConnectError:
                await trio.sleep(0.02)


@asynccontextmanager
async def watching(entry: Path) -> AsyncIterator[Kernel]:
    port = free_port()
    argv = [*KERNEL_PROGRAM, "run", "--watch", str(entry), "--inspect", f"127.0.0.1:{port}"]
    send, receive = trio.open_memory_channel[Frame](1000)
    async with trio.open_nursery() as nursery:
        run = partial(
            trio.run_process, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, check=False
        )
        process = await nursery.start(run)
        nursery.start_soon(_read_debug, port, send)
        try:
            yield Kernel(process, receive)
        finally:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(TIMEOUT_S):
                await process.wait()
            nursery.cancel_scope.cancel()


def touch(path: Path, text: str) -> None:
    """Write `text`, with an mtime surely not the one before (coarse clocks)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


async def test_kernel_watch_a_change_is_a_new_run_with_the_kernel_s_frames(
    tmp_path: Path,
) -> None:
    entry = tmp_path / "app.telo"
    entry.write_text("port 3000\nport 9000 udp\nprint one\nwait\n")
    async with watching(entry) as kernel:
        first = await kernel.until(named("Kernel.Started"))
        assert first == [
            {"kind": "event", "event": "Kernel.PortsResolved",
             "payload": {"ports": [{"port": 3000, "protocol": "tcp"},
                                   {"port": 9000, "protocol": "udp"}]}},
            {"kind": "event", "event": "Kernel.Starting", "payload": {"telo": "0.0.0-kubesim"}},
            {"kind": "event", "event": "Kernel.Started", "payload": {}},
        ]  # fmt: skip
        # The run's print is through before the change: a change that came
        # first would stop the run before it printed (a busy machine's
        # interpreter start can take longer than the kernel's poll).
        await kernel.until_printed("one")
        # A change elsewhere in the entry's directory restarts the run too.
        touch(tmp_path / "lib.txt", "x")
        second = await kernel.until(named("Kernel.Started"))
        assert [f["event"] for f in second] == [
            "Kernel.Stopped",
            "Kernel.PortsResolved",
            "Kernel.Starting",
            "Kernel.Started",
        ]
        assert second[0]["payload"] == {"exitCode": 0}


async def test_kernel_watch_a_run_ending_by_itself_reports_its_exit_code(tmp_path: Path) -> None:
    entry = tmp_path / "app.telo"
    entry.write_text("print bye\nexit 3\n")
    async with watching(entry) as kernel:
        stopped = (await kernel.until(named("Kernel.Stopped")))[-1]
        assert stopped["payload"] == {"exitCode": 3}
        # The kernel stays up, watching: the next change is the next run.
        touch(entry, "print again\nexit 0\n")
        await kernel.until(named("Kernel.Starting"))
        stopped = (await kernel.until(named("Kernel.Stopped")))[-1]
        assert stopped["payload"] == {"exitCode": 0}
        assert kernel.process.returncode is None


async def test_kernel_watch_a_load_failure_is_run_failed_then_a_fix_runs(tmp_path: Path) -> None:
    entry = tmp_path / "app.telo"
    entry.write_text("print fine\nbogus directive\n")
    async with watching(entry) as kernel:
        failed = await kernel.until(named("Kernel.RunFailed"))
        assert [f["event"] for f in failed] == ["Kernel.RunFailed"]  # no Starting
        assert failed[0]["payload"] == {
            "phase": "load",
            "code": "ERR_MANIFEST_VALIDATION_FAILED",
            "message": f"telo: {entry}:2: unknown directive 'bogus'",
        }
        touch(entry, "echo > \n")
        await kernel.until(named("Kernel.Started"))
        # stdin reaches the run's process.
        assert kernel.process.stdin is not None
        await kernel.process.stdin.send_all(b"hi\n")
        await kernel.until_printed("> hi")


async def test_kernel_watch_frames_project_into_generations(tmp_path: Path) -> None:
    entry = tmp_path / "app.telo"
    entry.write_text("port 3000\nprint one\nexit 0\n")
    async with watching(entry) as kernel:
        await kernel.until(named("Kernel.Stopped"))
        touch(entry, "bogus\n")
        await kernel.until(named("Kernel.RunFailed"))
        touch(entry, "wait\n")
        await kernel.until(named("Kernel.Started"))
        touch(entry, "print x\nwait\n")
        await kernel.until(named("Kernel.Started"))
    projection = KernelProjection(AppRuns("web"))
    projection.expect("initial")
    runs = [e for at, f in enumerate(kernel.seen) for e in projection.feed(f, float(at)).runs]
    assert [(e["generation"], e["phase"]) for e in runs] == [
        (1, "started"), (1, "completed"),
        (2, "started"), (2, "failed"),
        (3, "started"), (3, "completed"),
        (4, "started"),
    ]  # fmt: skip
    assert [e.get("trigger") for e in runs if e["phase"] == "started"] == [
        "initial",
        "watch",
        "watch",
        "watch",
    ]
