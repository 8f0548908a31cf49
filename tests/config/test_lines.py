"""Config errors carry the line of the key they name; warnings for runtimes
this host cannot start. Pure: files only in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from runnerd.backends import load_config
from runnerd.config import ConfigError
from runnerd.config.lines import find_key_line, split_key
from runnerd.local.runtimes import runtime_problems
from runnerd.local.settings import LocalConfig, RuntimeConfig

TEXT = '''\
# a comment with key = value in it
[server]
listen = [
  "unix:/run/x.sock",   # max_body_bytes = 1 in a comment
  "tcp:127.0.0.1:1",
]
log_level = "info"

[runner]
display_name = """
default_image = "inside a string"
"""
default_image = "sh"

[apps."a.b"]
image = "hello"
env = { TOKEN = "x", OTHER = "y" }

[local.runtimes.sh]
command = ["/bin/sh", "{entry}"]
local.x = 1
'''


@pytest.mark.parametrize(
    ("key", "line"),
    [
        ("server.listen[1]", 3),
        ("server.log_level", 7),
        ("runner.default_image", 13),  # not the one inside the multi-line string
        ('apps."a.b".image', 16),
        ('apps."a.b".env.TOKEN', 17),  # inside an inline table: its key's line
        ('apps."a.b".title', 15),  # missing: the table's header
        ("local.runtimes.sh.command[0]", 20),
        ("local.runtimes.sh.local.x", 21),  # a dotted key
        ("server.max_body_bytes", 2),  # only mentioned in a comment
        ("terms.file", None),
    ],
)
def test_find_key_line(key: str, line: int | None) -> None:
    assert find_key_line(TEXT, key) == line


def test_split_key_reads_quoted_parts_and_drops_indexes() -> None:
    assert split_key('apps."a b".env[0].X') == ["apps", "a b", "env", "X"]
    assert split_key('apps."open') is None


def error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "runnerd.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


BASE = '[runner]\ndefault_image = "sh"\n[local.runtimes.sh]\ncommand = ["/bin/sh", "{entry}"]\n'


def test_unknown_key_error_carries_its_line(tmp_path: Path) -> None:
    message = error(tmp_path, BASE + "\n[server]\nlog_level = 'info'\nlisen = []\n")
    assert message == "line 8: server.lisen: unknown key (did you mean 'listen'?)"


def test_wrong_type_error_carries_its_line(tmp_path: Path) -> None:
    message = error(tmp_path, "[runner]\nmax_sessions = 'x'\n" + BASE.replace("[runner]\n", ""))
    assert message == "line 2: runner.max_sessions: must be a positive integer, got 'x'"


def test_toml_syntax_error_is_reported_once_with_its_position(tmp_path: Path) -> None:
    message = error(tmp_path, BASE + "oops\n")
    assert str(tmp_path) not in message  # the caller names the file
    assert message.startswith("is not valid TOML: ") and "(at line 5, column 5)" in message


def local(*commands: tuple[str, ...]) -> LocalConfig:
    runtimes = {f"r{i}": RuntimeConfig(name=f"r{i}", command=c) for i, c in enumerate(commands)}
    return LocalConfig(runtimes=runtimes)


def fake_find(installed: dict[str, str]) -> object:
    def find(program: str, path: str) -> str | None:
        where = installed.get(program)
        return where if where is not None and where.rsplit("/", 1)[0] in path.split(":") else None

    return find


def test_runtime_problems_warn_for_each_missing_executable() -> None:
    find = fake_find({"sh": "/bin/sh"})
    warnings = runtime_problems(
        local(("telo", "run", "{entry}"), ("sh", "{entry}"), ("nope", "x")),
        find=find,  # type: ignore[arg-type]
        path="/usr/bin:/bin",
        service_path="/usr/bin:/bin",
    )
    assert len(warnings) == 2
    assert warnings[0].startswith("local.runtimes.r0.command: executable 'telo' not found on PATH")
    assert "npm install -g @telorun/cli" in warnings[0]
    assert warnings[1].startswith("local.runtimes.r2.command: executable 'nope' not found")


def test_runtime_problems_warn_when_only_a_login_path_finds_it() -> None:
    find = fake_find({"telo": "/home/op/.nvm/bin/telo"})
    [warning] = runtime_problems(
        local(("telo", "run", "{entry}")),
        find=find,  # type: ignore[arg-type]
        path="/home/op/.nvm/bin:/usr/bin",
        service_path="/usr/bin:/bin",
    )
    assert "/home/op/.nvm/bin/telo, which is not on a systemd service's PATH" in warning


def test_local_containment_is_auto_or_process_group(tmp_path: Path) -> None:
    def with_containment(value: str) -> str:
        table = f"[local]\ncontainment = {value}\n[local.runtimes.sh]"
        return BASE.replace("[local.runtimes.sh]", table)

    path = tmp_path / "runnerd.toml"
    path.write_text(BASE)
    assert load_config(path).settings.containment == "auto"
    path.write_text(with_containment('"process-group"'))
    assert load_config(path).settings.containment == "process-group"
    message = error(tmp_path, with_containment('"none"'))
    assert message == "line 4: local.containment: must be one of auto, process-group, got 'none'"
