"""`[local]`: parsed by the local backend's provider (`runnerd.local.settings`),
through the path the daemon loads a config by (`runnerd.backends`), errors
naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from runnerd.backends import load_config
from runnerd.config import ConfigError
from runnerd.local.settings import render
from tests.config.test_config import error_of, minimal, parse


def test_config_stop_grace_zero_is_allowed() -> None:
    assert parse(minimal(local={"stop_grace_seconds": 0})).settings.stop_grace_s == 0


def test_config_stop_grace_is_capped_so_sigterm_ends_within_10_s() -> None:
    assert parse(minimal(local={"stop_grace_seconds": 5})).settings.stop_grace_s == 5
    assert error_of(minimal(local={"stop_grace_seconds": 5.5})) == (
        "local.stop_grace_seconds: must be at most 5 seconds (SIGTERM must stop runnerd"
        " within 10 s), got 5.5"
    )


def test_config_session_uids_and_init_python() -> None:
    local = parse(minimal()).settings
    assert (local.session_uid_base, local.session_uid_count) == (0x70000000, 65536)
    assert local.init_python is None
    chosen = parse(
        minimal(
            local={
                "session_uid_base": 200000,
                "session_uid_count": 10,
                "init_python": "/usr/bin/python3",
            }
        )
    ).settings
    assert (chosen.session_uid_base, chosen.session_uid_count) == (200000, 10)
    assert chosen.init_python == "/usr/bin/python3"
    assert error_of(minimal(local={"session_uid_base": 0})) == (
        "local.session_uid_base: must be a positive integer, got 0"
    )
    assert error_of(minimal(local={"session_uid_base": 2**32 - 10})) == (
        "local.session_uid_count: session_uid_base + session_uid_count - 1 must be at most"
        f" {2**32 - 2}, got {2**32 - 10 + 65535}"
    )
    assert error_of(minimal(local={"session_uid_base": 60000, "session_uid_count": 6000})) == (
        "local.session_uid_base: the range 60000-65999 holds 65534 (nobody)"
    )
    assert error_of(minimal(local={"init_python": "python3"})) == (
        "local.init_python: must be an absolute path, got 'python3'"
    )


def test_config_warm_sandboxes_from_0_to_16() -> None:
    assert parse(minimal()).settings.warm_sandboxes == 2
    assert parse(minimal(local={"warm_sandboxes": 0})).settings.warm_sandboxes == 0
    assert (
        dict(render(parse(minimal(local={"warm_sandboxes": 16})).settings))["local"][
            "warm_sandboxes"
        ]
        == 16
    )
    for bad in (17, -1, True, "2"):
        assert error_of(minimal(local={"warm_sandboxes": bad})).startswith(
            "local.warm_sandboxes: must be an integer from 0 to 16, got"
        )


def test_config_runtime_inspect_args_and_names_that_need_quoting() -> None:
    runtimes = {
        "telorun/node:latest-slim": {
            "command": ["telo", "run", "{entry}"],
            "inspect_args": ["--inspect", "127.0.0.1:{inspect_port}"],
        }
    }
    config = parse(
        {"runner": {"default_image": "telorun/node:latest-slim"}, "local": {"runtimes": runtimes}}
    )
    rt = config.settings.runtimes["telorun/node:latest-slim"]
    assert rt.command == ("telo", "run", "{entry}")
    assert rt.inspect_args == ("--inspect", "127.0.0.1:{inspect_port}")


def test_an_unknown_key_in_local_is_refused_naming_it_and_its_line(tmp_path: Path) -> None:
    path = tmp_path / "runnerd.toml"
    path.write_text(
        '[runner]\ndefault_image = "sh"\n\n[local]\nworkdri = "w"\n\n'
        '[local.runtimes.sh]\ncommand = ["/bin/sh", "{entry}"]\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == "line 5: local.workdri: unknown key (did you mean 'workdir'?)"


def test_a_runtime_error_carries_its_line(tmp_path: Path) -> None:
    path = tmp_path / "runnerd.toml"
    path.write_text('[runner]\ndefault_image = "sh"\n\n[local.runtimes.sh]\ncommand = []\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == "line 5: local.runtimes.sh.command: must be a list of strings, got []"


def test_config_runtime_watch_self_with_its_watch_args() -> None:
    runtimes = {
        "sh": {"command": ["/bin/sh", "{entry}"]},
        "telo": {
            "command": ["telo", "run", "{entry}"],
            "watch": "self",
            "watch_args": ["--watch"],
        },
    }
    config = parse({"runner": {"default_image": "sh"}, "local": {"runtimes": runtimes}})
    telo, sh = config.settings.runtimes["telo"], config.settings.runtimes["sh"]
    assert (telo.watch, telo.watch_args, telo.self_watching) == ("self", ("--watch",), True)
    assert (sh.watch, sh.watch_args, sh.self_watching) == ("restart", (), False)
    sections = dict(render(config.settings))
    assert sections["local.runtimes.telo"]["watch"] == "self"
    assert sections["local.runtimes.telo"]["watch_args"] == ("--watch",)


def test_config_runtime_watch_errors_name_the_key_and_line(tmp_path: Path) -> None:
    def error(runtime: str) -> str:
        path = tmp_path / "runnerd.toml"
        path.write_text(
            '[runner]\ndefault_image = "sh"\n\n[local.runtimes.sh]\n'
            f'command = ["/bin/sh", "{{entry}}"]\n{runtime}\n'
        )
        with pytest.raises(ConfigError) as info:
            load_config(path)
        return str(info.value)

    assert error('watch = "always"') == (
        "line 6: local.runtimes.sh.watch: must be one of restart, self, got 'always'"
    )
    assert error('watch_args = ["--watch"]') == (
        'line 6: local.runtimes.sh.watch_args: is used only with watch = "self"'
    )
    assert error('watch = "self"\nwatch_args = [""]') == (
        "line 7: local.runtimes.sh.watch_args[0]: must be a non-empty string, got ''"
    )
