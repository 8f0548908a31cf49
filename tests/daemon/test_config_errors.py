"""Config errors exit 2 before anything listens; `check-config` masks secrets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonExited, build_config, dump_toml, run_runnerd, start_daemon

SECRET = "s3cr3t-catalog-value-9f2c"


def listing(directory: Path) -> set[str]:
    return set(os.listdir(directory))


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"runner": {"max_sesions": 3}}, "runner.max_sesions"),
        ({"runner": {"max_sessions": "x"}}, "runner.max_sessions: must be a positive integer"),
        ({"terms": {"file": "missing-terms.md"}}, "terms.file"),
        ({"runner": {"backend": "kubernetes"}}, "kubernetes.self_url: is required"),
    ],
    ids=["unknown-key", "bad-type", "unreadable-terms", "kubernetes-without-self-url"],
)
async def test_serve_exits_2_on_config_error_before_listening(
    tmp_path: Path, overrides: dict[str, Any], expected: str
) -> None:
    with pytest.raises(DaemonExited) as exited:
        async with start_daemon(tmp_path, overrides):
            pass
    assert exited.value.code == 2
    assert expected in exited.value.stderr
    assert not {"runnerd.sock", "runnerd.sock.lock"} & listing(tmp_path)


async def test_serve_names_the_missing_config_file(tmp_path: Path) -> None:
    result = await run_runnerd("serve", "--config", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert "nope.toml" in result.stderr.decode()


async def test_check_config_prints_effective_config_with_secrets_masked(tmp_path: Path) -> None:
    config = tmp_path / "runnerd.toml"
    data = build_config(
        tmp_path,
        tmp_path / "runnerd.sock",
        {
            "local": {"runtimes": {"demo": {"command": ["/bin/sh", "-c", "exec cat"]}}},
            "apps": {"demo": {"image": "demo", "env": {"API_KEY": SECRET}}},
        },
    )
    config.write_text(dump_toml(data))
    result = await run_runnerd("check-config", "--config", str(config))
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "[apps.demo]" in out and "API_KEY" in out
    assert SECRET not in out and SECRET not in result.stderr.decode()
    assert "runnerd.sock" not in listing(tmp_path)  # validating never listens


async def test_check_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "runnerd.toml"
    data = build_config(tmp_path, tmp_path / "runnerd.sock", {"server": {"socket_mode": "rw"}})
    config.write_text(dump_toml(data))
    result = await run_runnerd("check-config", "--config", str(config))
    assert result.returncode == 2
    assert result.stdout == b""
    assert "server.socket_mode" in result.stderr.decode()


@pytest.mark.parametrize("command", ["serve", "check-config"])
@pytest.mark.parametrize("where", ["main", "drop-in"])
async def test_a_non_utf8_config_file_exits_2_naming_the_file(
    tmp_path: Path, command: str, where: str
) -> None:
    config = tmp_path / "runnerd.toml"
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", None)))
    bad = config if where == "main" else tmp_path / "apps.d" / "bad.toml"
    bad.parent.mkdir(exist_ok=True)
    bad.write_bytes(bad.read_bytes() if bad.exists() else b"")
    with bad.open("ab") as f:
        f.write(b"\n# caf\xe9\n")
    result = await run_runnerd(command, "--config", str(config))
    assert result.returncode == 2
    assert bad.name in result.stderr.decode(errors="replace")
    assert "runnerd.sock" not in listing(tmp_path)


async def test_check_config_warns_for_each_runtime_it_cannot_find(tmp_path: Path) -> None:
    config = tmp_path / "runnerd.toml"
    runtimes = {
        "telo": {"command": ["telo-not-installed-here", "run", "{entry}"]},
        "gone": {"command": [str(tmp_path / "no-such-binary"), "{entry}"]},
    }
    data = build_config(tmp_path, tmp_path / "runnerd.sock", {"local": {"runtimes": runtimes}})
    config.write_text(dump_toml(data))
    result = await run_runnerd("check-config", "--config", str(config))
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr  # valid: the programs may be installed later
    warnings = [line for line in stderr.splitlines() if line.startswith("runnerd: warning: ")]
    assert len(warnings) == 2, stderr
    assert "local.runtimes.telo.command: executable 'telo-not-installed-here' not found" in stderr
    assert f"local.runtimes.gone.command: '{tmp_path}/no-such-binary' does not exist" in stderr
    assert "local.runtimes.sh" not in stderr


async def test_a_toml_syntax_error_names_the_file_once_with_the_line(tmp_path: Path) -> None:
    config = tmp_path / "runnerd.toml"
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock")) + "oops\n")
    result = await run_runnerd("check-config", "--config", str(config))
    stderr = result.stderr.decode()
    assert result.returncode == 2
    assert stderr.count(str(config)) == 1, stderr
    assert "is not valid TOML" in stderr and "at line" in stderr


def nested(depth: int, *, inline_tables: bool = False) -> str:
    """A TOML value `depth` levels deep: arrays, or inline tables."""
    if inline_tables:
        return "{a = " * depth + "1" + "}" * depth
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        ("main", nested(5000), "values nest deeper than the limit of 32 levels"),
        ("drop-in", nested(5000), "values nest deeper than the limit of 32 levels"),
        ("main", nested(40, inline_tables=True), "apps.deep.title: nests deeper than the limit"),
    ],
    ids=["arrays-5000-deep", "drop-in-5000-deep", "inline-tables-40-deep"],
)
async def test_check_config_refuses_a_deeply_nested_value_naming_the_file(
    tmp_path: Path, where: str, value: str, expected: str
) -> None:
    config = tmp_path / "runnerd.toml"
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock")))
    bad = config if where == "main" else tmp_path / "apps.d" / "deep.toml"
    bad.parent.mkdir(exist_ok=True)
    with bad.open("a") as f:
        f.write(f'\n[apps.deep]\nimage = "sh"\ntitle = {value}\n')
    result = await run_runnerd("check-config", "--config", str(config))
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr and "RecursionError" not in stderr
    assert expected in stderr and str(bad) in stderr, stderr
    assert result.stdout == b""


async def test_check_config_refuses_a_remote_tcp_bind_and_warns_on_any_origin(
    tmp_path: Path,
) -> None:
    config = tmp_path / "runnerd.toml"
    remote = {"server": {"listen": ["tcp:0.0.0.0:8062"]}}
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", remote)))
    refused = await run_runnerd("check-config", "--config", str(config))
    assert refused.returncode == 2 and refused.stdout == b""
    assert "server.listen[0]" in refused.stderr.decode()
    assert "allow_remote = true" in refused.stderr.decode()
    wide = {"server": {"listen": ["tcp:127.0.0.1:8062"], "cors_origins": "*"}}
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", wide)))
    warned = await run_runnerd("check-config", "--config", str(config))
    assert warned.returncode == 0, warned.stderr.decode()
    assert "warning: server.cors_origins" in warned.stderr.decode()


async def test_a_world_writable_socket_mode_is_warned_about_by_check_config_and_serve(
    tmp_path: Path,
) -> None:
    config = tmp_path / "runnerd.toml"
    world = {"server": {"socket_mode": "0777"}}
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", world)))
    checked = await run_runnerd("check-config", "--config", str(config))
    assert checked.returncode == 0, checked.stderr.decode()
    (warning,) = checked.stderr.decode().splitlines()
    assert warning.startswith('runnerd: warning: server.socket_mode: "0777" lets every local')
    async with start_daemon(tmp_path, world) as daemon:
        mode = daemon.socket_path.stat().st_mode & 0o777
        logged = [line for line in daemon.stderr_text().splitlines() if "socket_mode" in line]
    assert mode == 0o777  # what the warning is about: anyone may connect
    assert len(logged) == 1 and "WARNING" in logged[0] and '"0660"' in logged[0], logged
    group = {"server": {"socket_mode": "0660"}}  # group write is the intended access
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", group)))
    quiet = await run_runnerd("check-config", "--config", str(config))
    assert b"socket_mode" not in quiet.stderr
