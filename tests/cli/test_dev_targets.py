"""`make run` and `make run-kube` as a developer runs them, side by side.

Each target runs in a copy of the checkout's Makefile and config/ in a temp
directory (the venv, runnerd/ and tests/ linked in), so the `run/` directory the
targets write is the test's. Both targets name fixed loopback ports
(config/dev.toml 8062; config/dev-kube.toml 8064, and 8063 for bundles):
the test is skipped when something else holds one of them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import trio

REPO = Path(__file__).resolve().parents[2]
DEV_PORTS = (8062, 8063, 8064)
READY_S = 120.0  # make run-kube starts the test cluster first


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture
def checkout() -> Iterator[Path]:
    # Short: the targets' sockets live under it (AF_UNIX paths ≤ 108 bytes).
    root = Path(tempfile.mkdtemp(prefix="rd-make-", dir="/tmp"))
    try:
        for name in ("Makefile", "pyproject.toml"):
            shutil.copy2(REPO / name, root / name)
        # Older than any stamp of the (shared, symlinked) venv: make must never
        # reinstall from this copy, which has no runnerd package to install
        # (an editable install from here empties the real venv's mapping).
        os.utime(root / "pyproject.toml", (0, 0))
        shutil.copytree(REPO / "config", root / "config")
        # runnerd/ too: the targets build the compiled session init from its
        # sources (nothing to do when the checkout's build is current).
        for name in (".venv", "tests", "runnerd"):
            (root / name).symlink_to(REPO / name)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.asynccontextmanager
async def make_target(root: Path, target: str) -> AsyncIterator[trio.Process]:
    """`make TARGET` in `root` until READY=1 from its runnerd; at the end of
    the block, Ctrl-C (SIGINT to its process group, as a terminal sends it)
    and wait for it to exit."""
    notify_path = root / f"{target}.notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(notify_path))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "LISTEN_"))}
        env["NOTIFY_SOCKET"] = str(notify_path)
        log = (root / f"{target}.log").open("wb")
        proc = await trio.lowlevel.open_process(
            ["make", "-s", target], cwd=root, env=env, stdout=log, stderr=log,
            start_new_session=True,
        )  # fmt: skip
        try:
            with trio.fail_after(READY_S):
                await wait_ready(notify, proc, root / f"{target}.log")
            yield proc
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(30):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT)
                await proc.wait()
            log.close()


async def wait_ready(notify: socket.socket, proc: trio.Process, log: Path) -> None:
    sock = trio.socket.from_stdlib_socket(notify.dup())
    with sock:
        while True:
            with trio.move_on_after(1):
                if b"READY=1" in await sock.recv(4096):
                    return
            assert proc.returncode is None, read_log(log)


def read_log(path: Path) -> str:
    return path.read_text(errors="replace")


async def capabilities(transport: httpx.AsyncHTTPTransport, base: str) -> str:
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        name: str = (await client.get("/v1/capabilities")).json()["displayName"]
        return name


async def test_run_and_run_kube_serve_side_by_side_and_leave_nothing(checkout: Path) -> None:
    busy = [port for port in DEV_PORTS if not port_free(port)]
    if busy:
        pytest.skip(f"loopback ports {busy} are in use (a developer's `make run`?)")
    run = checkout / "run"
    async with make_target(checkout, "run") as local, make_target(checkout, "run-kube") as kube:
        names = {
            await capabilities(httpx.AsyncHTTPTransport(uds=str(run / sock)), "http://runnerd")
            for sock in ("runnerd.sock", "runnerd-kube.sock")
        }
        names |= {
            await capabilities(httpx.AsyncHTTPTransport(), f"http://127.0.0.1:{port}")
            for port in (8062, 8064)
        }
        assert names == {"runnerd (dev)", "runnerd (dev, test cluster)"}
        assert (run / "kubesim.kubeconfig").exists()
    assert local.returncode is not None and kube.returncode is not None
    left = sorted(p.name for p in run.iterdir() if p.name.startswith(("kubesim", "runnerd")))
    assert left == [], left
