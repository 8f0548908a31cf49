"""Refusals at start on the kubernetes backend: exit 2 naming what to fix,
as on the local backend (the backend's own tasks must not turn them into a
crash), with nothing left listening."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.daemon.test_startup_imports import IMPORTTIME, UNUSED, imported
from tests.harness import DaemonExited, start_daemon
from tests.kube.daemon import kube_daemon, kube_overrides
from tests.kubesim.server import KubeSim


async def test_an_unusable_state_dir_exits_2_naming_the_key(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(DaemonExited) as exited:
        async with kube_daemon(
            kubesim, tmp_path, runner={"state_dir": str(tmp_path / "a-file" / "state")}
        ):
            pass
    assert exited.value.code == 2, exited.value.stderr
    assert "runner.state_dir: cannot use" in exited.value.stderr
    assert "Not a directory" in exited.value.stderr and "crashed" not in exited.value.stderr
    assert not (tmp_path / "runnerd.sock").exists()


async def test_a_socket_another_runnerd_holds_exits_2(kubesim: KubeSim, tmp_path: Path) -> None:
    second = tmp_path / "second"
    second.mkdir()
    async with kube_daemon(kubesim, tmp_path) as first:
        overrides = kube_overrides(kubesim, second)
        overrides["server"] = {"listen": [f"unix:{first.socket_path}"]}
        with pytest.raises(DaemonExited) as exited:
            async with start_daemon(second, overrides):
                pass
        async with first.client() as client:  # the first one still serves
            assert (await client.get("/v1/health")).status_code == 200
    assert exited.value.code == 2, exited.value.stderr
    assert "another runnerd is already serving on" in exited.value.stderr
    assert "crashed" not in exited.value.stderr


async def test_serve_on_the_kubernetes_backend_leaves_httpx_command_line_unimported(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """httpx's CLI (pygments, rich) is deferred like the rest of what
    serving never uses (runnerd/daemon/deferred.py); its client is not."""
    async with start_daemon(
        tmp_path, kube_overrides(kubesim, tmp_path), command=IMPORTTIME
    ) as daemon:
        async with daemon.client() as client:
            assert (await client.get("/v1/health")).status_code == 200
        modules = imported(daemon)
    assert "httpx._client" in modules
    assert [m for m in ("pygments", "rich", *UNUSED) if m in modules] == []
