"""Error and warning texts an operator reads: each names the right key and
says what is actually wrong (check-config and serve, real processes)."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import build_config, dump_toml, run_runnerd


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # A short directory: AF_UNIX paths are limited to 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write(tmp_path: Path, sock_dir: Path, overrides: dict[str, Any]) -> str:
    path = tmp_path / "runnerd.toml"
    path.write_text(dump_toml(build_config(tmp_path, sock_dir / "api.sock", overrides)))
    return str(path)


async def test_metrics_on_the_api_address_under_another_name_is_refused(
    tmp_path: Path, sock_dir: Path
) -> None:
    config = write(tmp_path, sock_dir, {
        "server": {"listen": ["tcp:127.0.0.1:19998"]},
        "metrics": {"listen": "tcp:localhost:19998"},
    })  # fmt: skip
    result = await run_runnerd("check-config", "--config", config)
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "metrics.listen: 'tcp:localhost:19998'" in stderr
    assert "server.listen[0] (tcp:127.0.0.1:19998)" in stderr


async def test_a_metrics_bind_failure_names_metrics_listen(tmp_path: Path, sock_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write(tmp_path, sock_dir, {"metrics": {"listen": f"tcp:127.0.0.1:{port}"}})
        result = await run_runnerd("serve", "--config", config)
    stderr = result.stderr.decode()
    assert result.returncode != 0
    assert f"metrics.listen: tcp:127.0.0.1:{port}: Address already in use" in stderr, stderr
    assert "server.listen:" not in stderr
    assert not (sock_dir / "api.sock").exists()  # the API listener was closed again


async def test_a_missing_absolute_runtime_says_the_file_does_not_exist(
    tmp_path: Path, sock_dir: Path
) -> None:
    runtimes = {"gone": {"command": ["/nonexistent/tool", "{entry}"]}}
    config = write(tmp_path, sock_dir, {"local": {"runtimes": runtimes}})
    result = await run_runnerd("check-config", "--config", config)
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 0, output
    assert "local.runtimes.gone.command: '/nonexistent/tool' does not exist" in output
    assert "PATH" not in output and "absolute path" not in output


async def test_a_missing_runtime_names_each_path_directory_once(
    tmp_path: Path, sock_dir: Path
) -> None:
    runtimes = {"gone": {"command": ["no-such-tool-here", "{entry}"]}}
    config = write(tmp_path, sock_dir, {"local": {"runtimes": runtimes}})
    # What `env -i PATH=/usr/bin:/bin runnerd check-config` sees.
    result = await run_runnerd("check-config", "--config", config, env={"PATH": "/usr/bin:/bin"})
    output = (result.stdout + result.stderr).decode()
    assert "not found on PATH (/usr/bin:/bin:/usr/local/bin);" in output, output
