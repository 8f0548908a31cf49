"""The argv and environment a local session runs with (pure, plus a PATH lookup)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runnerd.local.launch import (
    MINIMAL_PATH,
    Unresolved,
    build_argv,
    build_env,
    resolve_executable,
    resolve_runtime,
    search_path,
)
from runnerd.local.settings import RuntimeConfig

NODE = RuntimeConfig(
    name="node",
    command=("node", "--file={entry}", "{entry}"),
    inspect_args=("--inspect", "127.0.0.1:{inspect_port}"),
)


def test_build_argv_substitutes_entry_everywhere_and_appends_inspect_args() -> None:
    argv = build_argv(NODE, "/usr/bin/node", entry=Path("/w/s/app/main.js"), inspect_port=9229)
    assert argv == [
        "/usr/bin/node",
        "--file=/w/s/app/main.js",
        "/w/s/app/main.js",
        "--inspect",
        "127.0.0.1:9229",
    ]


def test_build_argv_without_inspect_leaves_inspect_args_out() -> None:
    argv = build_argv(NODE, "/usr/bin/node", entry=Path("/e"), inspect_port=None)
    assert argv == ["/usr/bin/node", "--file=/e", "/e"]


def test_build_argv_of_a_self_watching_app_appends_watch_args_after_inspect_args() -> None:
    telo = RuntimeConfig(
        name="telo",
        command=("telo", "run", "{entry}"),
        inspect_args=("--inspect", "127.0.0.1:{inspect_port}"),
        watch="self",
        watch_args=("--watch",),
    )
    argv = build_argv(telo, "/bin/telo", entry=Path("/w/a.yaml"), inspect_port=9300, watch=True)
    assert argv == ["/bin/telo", "run", "/w/a.yaml", "--inspect", "127.0.0.1:9300", "--watch"]
    # A run session on the same runtime does not watch.
    assert "--watch" not in build_argv(telo, "/bin/telo", entry=Path("/e"), inspect_port=None)


def test_build_argv_refuses_an_entry_runtime_without_a_bundle() -> None:
    with pytest.raises(ValueError, match="runtime 'node' runs a bundle entry"):
        build_argv(NODE, "/usr/bin/node", entry=None, inspect_port=None)


def test_build_argv_app_runtime_runs_as_is() -> None:
    app = RuntimeConfig(name="app", command=("/bin/app", "--serve"))
    assert build_argv(app, "/bin/app", entry=None, inspect_port=None) == ["/bin/app", "--serve"]


def test_build_env_is_plumbing_under_the_session_env() -> None:
    env = build_env({"A": "1", "TERM": "dumb"}, home=Path("/w/s/work"))
    assert env == {
        "PATH": MINIMAL_PATH,
        "HOME": "/w/s/work",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "A": "1",
    }


def test_search_path_puts_the_daemon_path_first() -> None:
    assert search_path("/opt/bin") == f"/opt/bin:{MINIMAL_PATH}"
    assert search_path(None) == MINIMAL_PATH


def test_resolve_executable_finds_programs_on_the_path_and_checks_absolute_ones(
    tmp_path: Path,
) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("")
    assert resolve_executable("tool", f"/nonexistent:{tmp_path}") == str(tool)
    assert resolve_executable(str(tool), "") == str(tool)
    assert resolve_executable(str(plain), "") is None
    assert resolve_executable("tool", MINIMAL_PATH) is None
    assert resolve_executable("sh", MINIMAL_PATH) in ("/usr/bin/sh", "/bin/sh")


def test_resolve_runtime_explains_what_is_missing() -> None:
    runtimes = {"node": NODE, "empty": RuntimeConfig(name="empty", command=())}
    unknown = resolve_runtime(runtimes, "ruby", MINIMAL_PATH)
    assert isinstance(unknown, Unresolved)
    assert unknown.message == "no local runtime named 'ruby'"
    # Other runtimes (a catalog app's among them) are never listed to a client.
    assert "node" not in unknown.message + unknown.remediation
    empty = resolve_runtime(runtimes, "empty", MINIMAL_PATH)
    assert isinstance(empty, Unresolved) and "empty command" in empty.message
    missing = resolve_runtime(runtimes, "node", "/nonexistent")
    assert isinstance(missing, Unresolved)
    assert missing.message == "local runtime 'node': executable 'node' not found"
    assert os.pathsep not in missing.remediation  # no PATH leaked to the client


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"": "x"}, "env key '' is not a valid environment variable name"),
        ({"A=B": "x"}, "env key 'A=B' is not a valid environment variable name"),
        ({"TOKEN": "se\0cret"}, "env TOKEN contains a NUL character"),
    ],
)
def test_build_env_refuses_what_no_environment_can_hold_without_echoing_values(
    env: dict[str, str], problem: str
) -> None:
    with pytest.raises(ValueError) as caught:
        build_env(env, home=Path("/h"))
    assert str(caught.value) == problem


def test_a_missing_telo_says_how_to_install_it() -> None:
    telo = RuntimeConfig(name="telo", command=("telo", "run", "{entry}"))
    missing = resolve_runtime({"telo": telo}, "telo", "/nonexistent")
    assert isinstance(missing, Unresolved)
    assert missing.message == "local runtime 'telo': executable 'telo' not found"
    assert "npm install -g @telorun/cli" in missing.remediation
