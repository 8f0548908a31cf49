"""`python -m tests.kubesim` as a separate process: URL on stdout, kubeconfig, clean exit."""

from __future__ import annotations

import base64
import functools
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import trio
import yaml

ROOT = Path(__file__).resolve().parents[2]


async def test_standalone_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    cmd = [sys.executable, "-m", "tests.kubesim", "--listen", "127.0.0.1:0"]
    cmd += ["--kubeconfig-out", str(kubeconfig), "--no-kubelet"]
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            trio.run_process, cmd, cwd=ROOT, stdout=subprocess.PIPE, check=False
        )
        proc: trio.Process = await nursery.start(run)
        assert proc.stdout is not None
        with trio.fail_after(10):
            url = (await proc.stdout.receive_some(200)).decode().strip()
        assert url.startswith("https://127.0.0.1:")
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        assert cluster["server"] == url and config["current-context"] == "kubesim"
        assert config["contexts"][0]["context"]["namespace"] == "runnerd"
        assert kubeconfig.stat().st_mode & 0o777 == 0o600
        ca = tmp_path / "ca.pem"
        ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca)) as client:
            r = await client.get(
                f"{url}/api/v1/namespaces/runnerd/pods",
                headers={"Authorization": f"Bearer {user['token']}"},
            )
        assert r.status_code == 200 and r.json()["kind"] == "PodList"
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(5):
            assert await proc.wait() == 0
        await proc.stdout.aclose()


async def test_standalone_refuses_a_non_loopback_listen() -> None:
    cmd = [sys.executable, "-m", "tests.kubesim", "--listen", "0.0.0.0:0"]
    with trio.fail_after(10):
        done = await trio.run_process(cmd, cwd=ROOT, capture_stderr=True, check=False)
    assert done.returncode == 2
    assert b"--listen must be 127.0.0.1:PORT (loopback only), not '0.0.0.0:0'" in done.stderr
