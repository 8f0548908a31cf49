"""A self-watching app through a real daemon: the local backend runs the
stand-in Telo kernel (`tests/kubesim/kernel.py`) with `--watch` on a
`watch = "self"` runtime, and the core projects its generations from the
kernel's debug frames (`Kernel.Starting`/`Stopped`/`PortsResolved`) instead
of restarting it on a write."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.watch_client import route, runs, start_watch, started, wait_frames
from tests.harness import SESSION_PYTHON

KERNEL = Path(__file__).resolve().parent.parent / "kubesim" / "kernel.py"
TELO = {
    # -I: isolated, so the script's directory (whose selectors.py is k8s') is not on sys.path.
    "command": [SESSION_PYTHON, "-I", str(KERNEL), "run", "{entry}"],
    "inspect_args": ["--inspect", "127.0.0.1:{inspect_port}"],
    "watch": "self",
    "watch_args": ["--watch"],
}


async def test_a_self_watching_apps_generations_are_its_kernels(tmp_path: Path) -> None:
    from tests.harness import start_daemon

    overrides = {"watch": {"enabled": True}, "local": {"runtimes": {"telo": TELO}}}
    async with start_daemon(tmp_path, overrides) as daemon:
        async with daemon.client() as client:
            body = {"config": {"image": "telo", "pullPolicy": "missing"}}
            session_id = await start_watch(
                client,
                files={"main.telo": "port 8081\nprint v1\nwait\n"},
                entry="main.telo",
                **body,
            )
            await wait_frames(client, session_id, lambda fs: started(fs, "app", 1) is not None)
            write = {"write": [{"path": "main.telo", "content": "port 8082\nprint v2\nwait\n"}]}
            answer = await route(client, "POST", session_id, "workspace", json=write)
            assert answer.status_code == 200, answer.text
            frames = await wait_frames(
                client, session_id, lambda fs: started(fs, "app", 2) is not None
            )
            answer = await route(client, "POST", session_id, "reload")
            assert answer.status_code == 202, answer.text
            frames = await wait_frames(
                client, session_id, lambda fs: started(fs, "app", 3) is not None
            )
            await client.delete(f"/v1/sessions/{session_id}")
    events = [(e["generation"], e["phase"], e.get("trigger", e.get("code"))) for e in runs(frames)]
    assert events[:5] == [
        (1, "started", "initial"),
        (1, "completed", 0),  # the kernel stopped its run for the change
        (2, "started", "watch"),  # the kernel's own restart, not the core's
        (2, "completed", 143),  # the reload stopped the process
        (3, "started", "manual"),
    ]
    assert runs(frames)[0]["telo"] == "0.0.0-kubesim"  # the kernel's version, carried
    ports = [f.data for f in frames if f.event == "endpoints"]
    assert {"port": 8082, "protocol": "tcp", "host": ""} in ports[-1].get("added", [])
