"""A runtime that is a script (`telo` is `#!/usr/bin/env node`) runs the
interpreter the *workload's* PATH finds: `check-config` says when that is not
the one the operator's PATH finds (or none), and `[local.runtimes.X] path`
makes it the right one, at check-config and in a real session alike."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runnerd.local.runtimes import env_program, runtime_problems, workload_path
from runnerd.local.settings import LocalConfig, RuntimeConfig
from tests.harness import (
    build_config,
    dump_toml,
    read_pty_until,
    run_runnerd,
    session_body,
    start_daemon,
)

# -- pure ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "program"),
    [
        (("/usr/bin/env", "node"), "node"),
        (("/usr/bin/env", "-S", "node", "--no-warnings"), "node"),
        (("/usr/bin/env", "NODE_ENV=production", "node"), "node"),
        (("/usr/bin/env", "/opt/node/bin/node"), None),
        (("/usr/bin/node",), None),
        (("/bin/sh", "-e"), None),
    ],
)
def test_env_program_is_what_a_shebang_looks_up_on_path(
    line: tuple[str, ...], program: str | None
) -> None:
    assert env_program(line) == program


def telo_on(path: tuple[str, ...] = ()) -> LocalConfig:
    telo = RuntimeConfig("telo", ("telo", "run", "{entry}"), path=path)
    return LocalConfig(runtimes={"telo": telo})


INSTALLED = {
    "telo": ["/usr/local/bin/telo"],
    "node": ["/opt/node24/bin/node", "/usr/bin/node"],  # Node.js 24, and Debian's 20
}


def problems(
    local: LocalConfig, operator_path: str, installed: dict[str, list[str]] = INSTALLED
) -> list[str]:
    def find(program: str, path: str) -> str | None:  # the first on `path`, as `which`
        dirs = path.split(":")
        found = [p for p in installed.get(program, []) if p.rsplit("/", 1)[0] in dirs]
        return min(found, key=lambda p: dirs.index(p.rsplit("/", 1)[0]), default=None)

    return runtime_problems(
        local,
        find=find,
        path=operator_path,
        service_path=operator_path,
        interpreter=lambda script: ("/usr/bin/env", "node") if script.endswith("telo") else None,
    )


def test_a_script_whose_interpreter_differs_on_the_workloads_path_is_named() -> None:
    operator = "/opt/node24/bin:/usr/local/bin:/usr/bin:/bin"
    [warning] = problems(telo_on(), operator)
    assert warning == (
        "local.runtimes.telo.command: /usr/local/bin/telo starts with '#!/usr/bin/env node':"
        " sessions run /usr/bin/node (the workload's PATH is /usr/local/bin:/usr/bin:/bin),"
        f" not /opt/node24/bin/node, which PATH ({operator}) finds;"
        ' set local.runtimes.telo.path = ["/opt/node24/bin"] to run /opt/node24/bin/node'
    )
    assert problems(telo_on(("/opt/node24/bin",)), operator) == []
    assert workload_path(telo_on(("/opt/node24/bin",)).runtimes["telo"]) == (
        "/opt/node24/bin:/usr/local/bin:/usr/bin:/bin"
    )


def test_a_script_whose_interpreter_is_not_on_the_workloads_path_is_named() -> None:
    operator = "/opt/node24/bin:/usr/local/bin:/usr/bin:/bin"
    only_opt = {**INSTALLED, "node": ["/opt/node24/bin/node"]}  # no Debian node
    [warning] = problems(telo_on(), operator, only_opt)
    assert "'node' is not on the workload's PATH (/usr/local/bin:/usr/bin:/bin)" in warning
    assert "every session on runtime 'telo' will fail to start" in warning
    assert 'set local.runtimes.telo.path = ["/opt/node24/bin"]' in warning


# -- check-config and a real session ---------------------------------------


@pytest.fixture
def tools() -> Iterator[Path]:
    # Outside tmp_path (the config's directory is hidden from sessions) and
    # outside /tmp (each session has a private one): /run where we may write.
    parent = "/run" if os.access("/run", os.W_OK) else str(Path.home())
    root = Path(tempfile.mkdtemp(prefix="rd-tools-", dir=parent))
    root.chmod(0o755)  # mkdtemp makes it 0700: a session uid must reach it
    (root / "bin").mkdir()
    write_exec(root / "bin" / "sh", '#!/bin/sh\necho "the operator\'s sh"\nexec /bin/sh "$@"\n')
    # The runtime: a script run by whatever `sh` the PATH finds, as `telo` is by `node`.
    write_exec(root / "tool", '#!/usr/bin/env sh\necho "PATH=$PATH"\nexec /bin/sh "$1"\n')
    yield root
    shutil.rmtree(root, ignore_errors=True)


def write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def runtime(tools: Path, **extra: Any) -> dict[str, Any]:
    return {"local": {"runtimes": {"tool": {"command": [str(tools / "tool"), "{entry}"], **extra}}}}


async def check_config(tmp_path: Path, overrides: dict[str, Any], path: str) -> str:
    config = tmp_path / "runnerd.toml"
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "api.sock", overrides)))
    result = await run_runnerd("check-config", "--config", str(config), env={"PATH": path})
    assert result.returncode == 0, result.stderr
    return result.stderr.decode()


async def test_check_config_names_the_interpreter_a_session_would_run(
    tmp_path: Path, tools: Path
) -> None:
    operator = f"{tools}/bin:/usr/bin:/bin"
    stderr = await check_config(tmp_path, runtime(tools), operator)
    warning = re.search(r"runnerd: warning: local\.runtimes\.tool\.command: .*", stderr)
    assert warning is not None, stderr
    assert f"{tools}/tool starts with '#!/usr/bin/env sh'" in warning[0]
    assert re.search(r"sessions run (/usr)?/bin/sh ", warning[0]), warning[0]
    assert f"not {tools}/bin/sh, which PATH ({operator}" in warning[0]
    assert f'set local.runtimes.tool.path = ["{tools}/bin"]' in warning[0]

    fixed = await check_config(tmp_path, runtime(tools, path=[f"{tools}/bin"]), operator)
    assert "local.runtimes.tool" not in fixed, fixed


async def test_a_runtimes_path_comes_first_on_the_sessions_path(
    tmp_path: Path, tools: Path
) -> None:
    overrides = runtime(tools, path=[f"{tools}/bin"])
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        response = await client.post("/v1/sessions", json=session_body("echo bundle", image="tool"))
        assert response.status_code == 201, response.text
        output = await read_pty_until(
            daemon.socket_path, response.json()["sessionId"], rb"bundle\r\n"
        )
    assert b"the operator's sh" in output  # the interpreter its `path` names
    assert f"PATH={tools}/bin:/usr/local/bin:/usr/bin:/bin".encode() in output


@pytest.mark.parametrize("bad", ["relative/bin", "/a:/b"])
async def test_a_runtime_path_must_be_absolute_directories(
    tmp_path: Path, tools: Path, bad: str
) -> None:
    config = tmp_path / "runnerd.toml"
    config.write_text(
        dump_toml(build_config(tmp_path, tmp_path / "api.sock", runtime(tools, path=["/ok", bad])))
    )
    result = await run_runnerd(
        "check-config", "--config", str(config), env={"PATH": os.environ["PATH"]}
    )
    assert result.returncode == 2
    assert (
        b"local.runtimes.tool.path[1]: must be an absolute directory without ':'" in result.stderr
    )
