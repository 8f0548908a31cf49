"""`[watch]` and the catalog's agent keys: every key, default and rule of the
contract's table; `enabled = true` accepted on the local backend (its
provider offers watch io) and refused (with its line) by parsing,
`check-config` and `serve` on the kubernetes backend, which has none yet."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from runnerd.backends import parse_config
from runnerd.config import ConfigError, WatchConfig
from runnerd.config.watch import check_watch_offered
from tests.config.test_config import error_of, minimal, no_files, parse, render_config
from tests.harness import build_config, dump_toml, run_runnerd

INTEGER_KEYS = (
    "max_sessions", "idle_seconds", "checkpoint_seconds", "suspended_ttl_seconds",
    "reload_limit", "max_ttl_seconds",
)  # fmt: skip


def test_watch_defaults_are_the_contracts() -> None:
    assert parse(minimal()).watch == WatchConfig(
        enabled=False,
        max_sessions=8,
        idle_seconds=300,
        checkpoint_seconds=30,
        suspended_ttl_seconds=86400,
        reload_limit=30,
        max_ttl_seconds=21600,
    )


def test_watch_every_integer_key_is_read() -> None:
    values = {key: 100 + i for i, key in enumerate(INTEGER_KEYS)}
    watch = parse(minimal(watch={**values, "enabled": False})).watch
    assert {key: getattr(watch, key) for key in INTEGER_KEYS} == values
    assert watch.enabled is False


@pytest.mark.parametrize("key", INTEGER_KEYS)
@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True])
def test_watch_integers_must_be_at_least_1(key: str, value: object) -> None:
    message = error_of(minimal(watch={key: value}))
    assert message.startswith(f"watch.{key}: must be an integer of at least 1")


def test_watch_unknown_key_is_refused_naming_it() -> None:
    assert error_of(minimal(watch={"reload_limits": 3})) == (
        "watch.reload_limits: unknown key (did you mean 'reload_limit'?)"
    )


def test_watch_enabled_must_be_a_boolean() -> None:
    assert error_of(minimal(watch={"enabled": "yes"})) == (
        "watch.enabled: must be true or false, got 'yes'"
    )


KUBE = {"runner": {"backend": "kubernetes"}, "kubernetes": {"self_url": "http://10.0.0.1:8063"}}


def test_watch_enabled_is_accepted_on_the_local_backend() -> None:
    assert parse(minimal(watch={"enabled": True})).watch.enabled is True


def test_watch_enabled_is_accepted_on_the_kubernetes_backend() -> None:
    # Issue 20: watch sessions run as pods; both backends offer them.
    assert parse({**KUBE, "watch": {"enabled": True}}).watch.enabled is True


def test_watch_on_a_backend_without_watch_io_is_refused_naming_the_key() -> None:
    # No built backend is without watch sessions now; the check stays for
    # one that would be (a provider whose WATCH_IO is empty).
    config = parse(minimal(watch={"enabled": True}))
    with pytest.raises(ConfigError) as info:
        check_watch_offered(config.watch, "elsewhere", ())
    assert info.value.key == "watch.enabled"
    assert "not available on the elsewhere backend yet" in info.value.problem
    check_watch_offered(config.watch, "kubernetes", ("tty", "streams"))


def test_watch_is_rendered_and_parses_back() -> None:
    config = parse(minimal(watch={"reload_limit": 7, "enabled": False}))
    text = render_config(config)
    assert "[watch]\nenabled = false\nmax_sessions = 8\n" in text
    assert "reload_limit = 7\n" in text
    again = parse_config(tomllib.loads(text), base_dir=Path("/elsewhere"), read_text=no_files)
    assert again.watch == config.watch


# --- the catalog's agent keys


def test_catalog_entry_port_and_token_env_are_read_and_rendered() -> None:
    app = {"image": "hello", "port": 8123, "token_env": "AGENT_TOKEN"}
    config = parse(minimal(apps={"agent1": app, "plain": {"image": "hello"}}))
    assert (config.apps["agent1"].port, config.apps["agent1"].token_env) == (8123, "AGENT_TOKEN")
    assert (config.apps["plain"].port, config.apps["plain"].token_env) == (None, None)
    assert 'port = 8123\ntoken_env = "AGENT_TOKEN"\n' in render_config(config)


@pytest.mark.parametrize("port", [0, 65536, -3, "80", 80.0, True])
def test_catalog_entry_port_must_be_a_port_number(port: Any) -> None:
    message = error_of(minimal(apps={"a": {"image": "hello", "port": port}}))
    assert message.startswith("apps.a.port: must be a port number 1..65535")


@pytest.mark.parametrize("name", ["", "1TOKEN", "A-B", "A B", 5])
def test_catalog_entry_token_env_follows_the_env_name_rule(name: Any) -> None:
    message = error_of(minimal(apps={"a": {"image": "hello", "token_env": name}}))
    assert message.startswith("apps.a.token_env: must be an environment variable name")


def test_shipped_config_documents_every_watch_key() -> None:
    text = (Path(__file__).parents[2] / "config" / "runnerd.toml").read_text()
    section = text[text.index("\n# [watch]") :]
    for key in ("enabled", *INTEGER_KEYS):
        assert f"\n# {key} = " in section, key
    for key in ("port", "token_env"):
        assert f"#   {key} " in text, key


# --- through the real command line


def _config_file(tmp_path: Path, overrides: dict[str, Any]) -> Path:
    path = tmp_path / "runnerd.toml"
    path.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", overrides)))
    return path


async def test_check_config_renders_watch(tmp_path: Path) -> None:
    path = _config_file(tmp_path, {"watch": {"idle_seconds": 60}})
    result = await run_runnerd("check-config", "--config", str(path))
    assert result.returncode == 0, result.stderr.decode()
    assert "[watch]\nenabled = false\n" in result.stdout.decode()
    assert "idle_seconds = 60\n" in result.stdout.decode()


async def test_check_config_accepts_watch_enabled_on_local(tmp_path: Path) -> None:
    path = _config_file(tmp_path, {"watch": {"enabled": True}})
    result = await run_runnerd("check-config", "--config", str(path))
    assert result.returncode == 0, result.stderr.decode()
    assert "[watch]\nenabled = true\n" in result.stdout.decode()


async def test_check_config_accepts_watch_on_kubernetes_and_prints_it(tmp_path: Path) -> None:
    path = tmp_path / "runnerd.toml"
    path.write_text(dump_toml({**KUBE, "watch": {"enabled": True}}))
    result = await run_runnerd("check-config", "--config", str(path))
    assert result.returncode == 0, result.stderr.decode()
    assert "[watch]\nenabled = true\n" in result.stdout.decode()
