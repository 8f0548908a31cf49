"""`python -m bench.watchcli`: a local save under `runnerd watch` → the app's new
output on its stdout, against an API write → the same output, in the same run.

One daemon with watch sessions on, two watch sessions of one workload (an app
`app` whose `main.sh` prints `serving N` and sleeps), measured in turn, round
by round, so machine load falls on both alike:
- the reference: `POST /workspace` writing version N of `main.sh` → `serving
  N` on the app's `/io?app=app` (what an editor sees: the daemon's 300 ms
  debounce, the restart, the output relay);
- `runnerd watch DIR` (a subprocess, stdout a pipe): `main.sh` saved on disk
  with version N → `app | serving N` on its stdout. On top of the reference:
  inotify, the client's 100 ms quiet step (`runnerd.client.syncloop`), a
  scan, the POST, the client's own `/io` and rendering.
Printed: p50/p99 of each, and the watch's median over the reference's (a
ratio) with the difference in milliseconds. Figures are never asserted. Run
as its own module (`python -m bench`'s names are the lead's list).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio
from trio_websocket import WebSocketConnection, wrap_client_stream

from bench.harness import open_daemon, percentile, sh_bundle, start_session, wait_status

Row = tuple[str, str, str]
# reload_limit: every round is one write; the default 30 a minute would 429.
WATCH = "[watch]\nenabled = true\nreload_limit = 100000\n"


def script(version: int) -> str:
    return f'echo "serving {version}"; exec sleep 1000\n'


@contextlib.asynccontextmanager
async def open_app_io(socket_path: Path, sid: str) -> AsyncIterator[WebSocketConnection]:
    stream = await trio.open_unix_socket(str(socket_path))
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery, stream, "localhost", f"/v1/sessions/{sid}/io?app=app&lastSeq=0"
        )
        try:
            yield ws
        finally:
            await ws.aclose()


async def _until_in_io(ws: WebSocketConnection, text: bytes) -> None:
    seen = b""
    while text not in seen:
        message = await ws.get_message()
        if isinstance(message, bytes):
            seen = seen[-256:] + message[5:]  # 4-byte seq, stream byte, payload


class Output:
    """A subprocess's stdout, collected as it arrives."""

    def __init__(self) -> None:
        self.data = b""
        self._changed = trio.Event()

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(65536):
            self.data += chunk
            self._changed.set()
            self._changed = trio.Event()

    async def until(self, text: bytes, after: int) -> None:
        while text not in self.data[after:]:
            await self._changed.wait()


async def _api_round(client: Any, ws: WebSocketConnection, sid: str, n: int) -> float:
    change = {"write": [{"path": "main.sh", "content": script(n)}]}
    t0 = time.perf_counter()
    response = await client.post(f"/v1/sessions/{sid}/workspace", json=change)
    assert response.status_code == 200, response.text
    await _until_in_io(ws, f"serving {n}\r".encode())
    return time.perf_counter() - t0


async def _save_round(root: Path, out: Output, n: int) -> float:
    after = len(out.data)
    t0 = time.perf_counter()
    (root / "main.sh").write_text(script(n))
    await out.until(f"app | serving {n}\r".encode(), after)
    return time.perf_counter() - t0


def _watch_body() -> dict[str, Any]:
    return {**sh_bundle(script(0)), "mode": "watch"}


async def bench_watchcli(rounds: int = 15) -> list[Row]:
    rounds = int(os.environ.get("RUNNERD_BENCH_WATCHCLI_ROUNDS", rounds))
    api_s: list[float] = []
    save_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="runnerd-bench-watch-") as tmp:
        root = Path(tmp)
        (root / "main.sh").write_text(script(0))
        async with open_daemon(extra=WATCH) as d, d.client() as client:
            sid = await start_session(client, _watch_body())
            await wait_status(client, sid, {"running"})
            env = {**os.environ, "RUNNERD_SOCKET": str(d.socket_path), "NO_COLOR": "1"}
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "runnerd", "watch", str(root)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=env,
            )  # fmt: skip
            out = Output()
            try:
                async with open_app_io(d.socket_path, sid) as ws, trio.open_nursery() as nursery:
                    assert proc.stdout is not None
                    nursery.start_soon(out.drain, proc.stdout)
                    with trio.fail_after(120):
                        await out.until(b"app | serving 0\r", 0)
                        await _save_round(root, out, 1)  # warm-up: the watcher is in place
                        await _api_round(client, ws, sid, 1)
                        for n in range(2, rounds + 2):
                            api_s.append(await _api_round(client, ws, sid, n))
                            save_s.append(await _save_round(root, out, n))
                    nursery.cancel_scope.cancel()
            finally:
                proc.send_signal(2)  # Ctrl-C: it stops its session
                with trio.move_on_after(20):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                await client.delete(f"/v1/sessions/{sid}")
    return _rows(api_s, save_s)


def _rows(api_s: list[float], save_s: list[float]) -> list[Row]:
    def ms(values: list[float], pct: float) -> float:
        return percentile(values, pct) * 1000

    api50, save50 = ms(api_s, 50), ms(save_s, 50)
    one, five, _ = os.getloadavg()
    return [
        (
            f"API write → the app's new output on /io (the reference; {len(api_s)} rounds)",
            f"p50 {api50:.0f} ms, p99 {ms(api_s, 99):.0f} ms",
            "300 ms debounce + a restart",
        ),
        (
            "a save on disk under `runnerd watch` → the new output on its stdout",
            f"p50 {save50:.0f} ms, p99 {ms(save_s, 99):.0f} ms; "
            f"{save50 / api50:.2f}× the reference (+{save50 - api50:.0f} ms)",
            f"load {one:.2f}/{five:.2f}",
        ),
    ]


async def main() -> None:
    rows = await bench_watchcli()
    print(f"\nmachine: {os.cpu_count()} cores, Python {sys.version.split()[0]}\n")
    print("| benchmark | measured | note |")
    print("|---|---|---|")
    for what, figure, note in rows:
        print(f"| {what} | {figure} | {note} |")


if __name__ == "__main__":
    trio.run(main)
