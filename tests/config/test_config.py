"""Unit tests for runnerd.config: strict parsing, drop-ins, terms, rendering."""

from __future__ import annotations

import copy
import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from runnerd.backends import check_config, load_config, parse_config
from runnerd.backends import render_config as render_config
from runnerd.config import (
    DEFAULT_APP_LIMITS,
    DEFAULT_SESSION_LIMITS,
    Config,
    ConfigError,
    ListenAddress,
    parse_listen,
)

BASE = Path("/etc/runnerd")
REPO = Path(__file__).resolve().parents[2]


def no_files(path: Path) -> str:
    raise FileNotFoundError(2, "No such file or directory", str(path))


def minimal(**sections: Any) -> dict[str, Any]:
    """The smallest valid local config (a bundle runtime as default image),
    with `sections` merged in one level deep."""
    data: dict[str, Any] = {
        "runner": {"default_image": "sh"},
        "local": {
            "runtimes": {
                "sh": {"command": ["/bin/sh", "{entry}"]},
                "py": {"command": ["python3", "-u", "{entry}"]},
                "hello": {"command": ["/bin/sh", "-c", "echo hello"]},
            }
        },
    }
    for name, table in sections.items():
        if isinstance(table, dict) and isinstance(data.get(name), dict):
            data[name] = {**data[name], **table}
        else:
            data[name] = table
    return data


def parse(data: dict[str, Any], read_text: Any = no_files) -> Config:
    """Parsed, then checked by the configured backend, as the daemon loads it."""
    return check_config(parse_config(copy.deepcopy(data), base_dir=BASE, read_text=read_text))


def error_of(data: dict[str, Any], read_text: Any = no_files) -> str:
    with pytest.raises(ConfigError) as info:
        parse(data, read_text)
    return str(info.value)


# --------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------


def test_config_defaults_are_the_documented_ones() -> None:
    config = parse(minimal())
    assert config.server.listen == ("unix:/run/runnerd/runnerd.sock",)
    assert config.server.socket_mode == 0o660
    assert config.server.cors_origins == ()
    assert config.server.allowed_hosts == () and config.server.allow_remote is False
    assert config.server.idle_timeout_s == 5.0 and config.server.request_timeout_s == 10.0
    assert config.server.max_connections == 1000
    assert config.server.max_body_bytes == 16 * 1024 * 1024
    assert config.server.log_level == "info"
    assert config.runner.backend == "local"
    assert config.runner.display_name == "Telo Runner"
    assert config.runner.allowed_images is None
    assert config.runner.registry_url is None
    assert config.runner.max_sessions == 32
    assert config.runner.exit_ttl_s == 14400
    assert config.runner.replay_buffer_bytes == 5_000_000
    assert config.session_limits == DEFAULT_SESSION_LIMITS
    assert config.session_limits.cpu == "50m" and config.session_limits.ttl_s == 3600
    assert config.app_limits == DEFAULT_APP_LIMITS
    assert config.app_limits.memory == "512Mi" and config.app_limits.ttl_s == 21600
    assert config.terms is None
    assert dict(config.apps) == {}
    assert config.settings.workdir == Path("/var/lib/runnerd/sessions")
    assert config.runner.state_dir == Path("/var/lib/runnerd/state")
    assert config.settings.stop_grace_s == 2.0


def test_config_empty_file_on_local_backend_says_what_to_write() -> None:
    assert error_of({}) == (
        "runner.default_image: the default 'telorun/node:latest-slim' is a container image,"
        " which the local backend cannot run; name a [local.runtimes] entry (defined: none),"
        ' e.g. default_image = "telo" with [local.runtimes.telo]'
        ' command = ["telo", "run", "{entry}"]'
    )


def test_config_kubernetes_backend_needs_self_url() -> None:
    assert error_of({"runner": {"backend": "kubernetes"}}) == (
        'kubernetes.self_url: is required with backend = "kubernetes": the URL session pods'
        " use to reach bundle_listen (e.g. http://10.0.0.5:8063)"
    )


def test_config_kubernetes_backend_needs_no_runtimes() -> None:
    # The parser asks nothing of a backend; the local one's runtime rule is its own.
    config = parse_config({"runner": {"backend": "kubernetes"}}, base_dir=BASE, read_text=no_files)
    assert config.runner.default_image == "telorun/node:latest-slim"


# --------------------------------------------------------------------------
# Every error names the key path and the problem
# --------------------------------------------------------------------------

ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("typo", minimal(server={"lisen": []}), "server.lisen: unknown key (did you mean 'listen'?)"),
    ("unknown section", minimal(bogus={}), "bogus: unknown key"),
    ("section not a table", minimal(server=3), "server: must be a table, got 3"),
    (
        "max_sessions string",
        minimal(runner={"max_sessions": "x"}),
        "runner.max_sessions: must be a positive integer, got 'x'",
    ),
    (
        "max_sessions zero",
        minimal(runner={"max_sessions": 0}),
        "runner.max_sessions: must be a positive integer, got 0",
    ),
    (
        "max_sessions bool",
        minimal(runner={"max_sessions": True}),
        "runner.max_sessions: must be a positive integer, got true",
    ),
    (
        "max_body_bytes float",
        minimal(server={"max_body_bytes": 1.5}),
        "server.max_body_bytes: must be a positive integer, got 1.5",
    ),
    (
        "replay buffer negative",
        minimal(runner={"replay_buffer_bytes": -1}),
        "runner.replay_buffer_bytes: must be a positive integer, got -1",
    ),
    (
        "state dir empty",
        minimal(runner={"state_dir": ""}),
        "runner.state_dir: must be a non-empty string, got ''",
    ),
    (
        "exit ttl string",
        minimal(runner={"exit_ttl_seconds": "4h"}),
        "runner.exit_ttl_seconds: must be a positive number of seconds, got '4h'",
    ),
    (
        "exit ttl infinite",
        minimal(runner={"exit_ttl_seconds": float("inf")}),
        "runner.exit_ttl_seconds: must be a positive number of seconds, got inf",
    ),
    (
        "stop grace negative",
        minimal(local={"stop_grace_seconds": -1}),
        "local.stop_grace_seconds: must be a non-negative number of seconds, got -1",
    ),
    (
        "listen not a list",
        minimal(server={"listen": "unix:/x"}),
        "server.listen: must be a list of strings, got 'unix:/x'",
    ),
    (
        "listen empty",
        minimal(server={"listen": []}),
        "server.listen: must be a list of strings, got []",
    ),
    (
        "listen item not a string",
        minimal(server={"listen": [8062]}),
        "server.listen[0]: must be a non-empty string, got 8062",
    ),
    (
        "tcp without port",
        minimal(server={"listen": ["unix:/a", "tcp:1.2.3.4"]}),
        "server.listen[1]: must be unix:/path, tcp:HOST:PORT (port 0-65535), fd:N or systemd, "
        "got 'tcp:1.2.3.4'",
    ),
    (
        "tcp port too large",
        minimal(server={"listen": ["tcp:127.0.0.1:70000"]}),
        "server.listen[0]: must be unix:/path, tcp:HOST:PORT (port 0-65535), fd:N or systemd, "
        "got 'tcp:127.0.0.1:70000'",
    ),
    (
        "bare ipv6",
        minimal(server={"listen": ["tcp:::1:80"]}),
        "server.listen[0]: an IPv6 host goes in brackets (tcp:[::1]:8062), got 'tcp:::1:80'",
    ),
    (
        "unknown scheme",
        minimal(server={"listen": ["http://localhost"]}),
        "server.listen[0]: must be unix:/path, tcp:HOST:PORT (port 0-65535), fd:N or systemd, "
        "got 'http://localhost'",
    ),
    (
        "fd not a number",
        minimal(server={"listen": ["fd:x"]}),
        "server.listen[0]: must be unix:/path, tcp:HOST:PORT (port 0-65535), fd:N or systemd, "
        "got 'fd:x'",
    ),
    (
        "listen duplicate after resolving",
        minimal(server={"listen": ["unix:/etc/runnerd/s.sock", "unix:s.sock"]}),
        "server.listen[1]: 'unix:s.sock' is listed twice",
    ),
    (
        "socket mode as decimal int",
        minimal(server={"socket_mode": 660}),
        "server.socket_mode: must be a non-empty string, got 660",
    ),
    (
        "socket mode not octal",
        minimal(server={"socket_mode": "0968"}),
        "server.socket_mode: must be an octal string like \"0660\", got '0968'",
    ),
    (
        "cors origin with path",
        minimal(server={"cors_origins": ["https://a.example/"]}),
        "server.cors_origins[0]: must be an origin like https://editor.example.com, "
        "got 'https://a.example/'",
    ),
    (
        "cors star inside a list",
        minimal(server={"cors_origins": ["*"]}),
        "server.cors_origins[0]: must be an origin like https://editor.example.com, got '*' "
        '(for any origin write cors_origins = "*")',
    ),
    (
        "cors neither star nor list",
        minimal(server={"cors_origins": "https://a.example"}),
        "server.cors_origins: must be a list of strings, got 'https://a.example'",
    ),
    (
        "log level",
        minimal(server={"log_level": "verbose"}),
        "server.log_level: must be one of debug, info, warning, error, got 'verbose'",
    ),
    (
        "backend",
        minimal(runner={"backend": "docker"}),
        "runner.backend: must be one of local, kubernetes, got 'docker'",
    ),
    (
        "display name empty",
        minimal(runner={"display_name": " "}),
        "runner.display_name: must be a non-empty string, got ' '",
    ),
    (
        "allowed images without the default",
        minimal(runner={"allowed_images": ["py"]}),
        "runner.allowed_images: must include default_image 'sh'",
    ),
    (
        "allowed image empty string",
        minimal(runner={"allowed_images": ["sh", ""]}),
        "runner.allowed_images[1]: must be a non-empty string, got ''",
    ),
    (
        "allowed image twice",
        minimal(runner={"allowed_images": ["sh", "py", "py"]}),
        "runner.allowed_images[2]: 'py' is listed twice",
    ),
    (
        "allowed image not a runtime",
        minimal(runner={"allowed_images": ["sh", "node"]}),
        "runner.allowed_images[1]: 'node' is not a [local.runtimes] entry (defined: sh, py, hello)",
    ),
    (
        "default image is an app runtime",
        minimal(runner={"default_image": "hello"}),
        "runner.default_image: runtime 'hello' is used by a bundle session: "
        "its command must contain {entry}",
    ),
    (
        "cpu not a quantity",
        minimal(limits={"session": {"cpu": "lots"}}),
        "limits.session.cpu: must be a positive Kubernetes quantity (e.g. 500m, 1Gi), got 'lots'",
    ),
    (
        "memory zero",
        minimal(limits={"app": {"memory": "0"}}),
        "limits.app.memory: must be a positive Kubernetes quantity (e.g. 500m, 1Gi), got '0'",
    ),
    (
        "storage negative",
        minimal(limits={"app": {"ephemeral_storage": "-1Gi"}}),
        "limits.app.ephemeral_storage: must be a positive Kubernetes quantity (e.g. 500m, 1Gi), "
        "got '-1Gi'",
    ),
    (
        "ttl zero",
        minimal(limits={"session": {"ttl_seconds": 0}}),
        "limits.session.ttl_seconds: must be a positive number of seconds, got 0",
    ),
    (
        "unknown tier",
        minimal(limits={"admin": {}}),
        "limits.admin: unknown key",
    ),
    ("app without image", minimal(apps={"foo": {}}), "apps.foo.image: is required"),
    ("app not a table", minimal(apps={"foo": "hello"}), "apps.foo: must be a table, got 'hello'"),
    (
        "app typo",
        minimal(apps={"foo": {"image": "hello", "enviroment": {}}}),
        "apps.foo.enviroment: unknown key",
    ),
    (
        "app name unsafe in a URL",
        minimal(apps={"a b": {"image": "hello"}}),
        "apps.\"a b\": an app name is 1-63 letters, digits, '-' or '_', "
        "starting with a letter or digit",
    ),
    (
        "app pull policy",
        minimal(apps={"foo": {"image": "hello", "pull_policy": "sometimes"}}),
        "apps.foo.pull_policy: must be one of missing, always, never, got 'sometimes'",
    ),
    (
        "app env name",
        minimal(apps={"foo": {"image": "hello", "env": {"1X": "v"}}}),
        "apps.foo.env.1X: is not a valid environment variable name",
    ),
    (
        "app env not a table",
        minimal(apps={"foo": {"image": "hello", "env": ["A=1"]}}),
        "apps.foo.env: must be a table, got ['A=1']",
    ),
    (
        "app image not a runtime",
        minimal(apps={"foo": {"image": "acme/tool:1"}}),
        "apps.foo.image: 'acme/tool:1' is not a [local.runtimes] entry (defined: sh, py, hello)",
    ),
    (
        "app image is a bundle runtime",
        minimal(apps={"foo": {"image": "py"}}),
        "apps.foo.image: runtime 'py' is used by an app session, which has no bundle: "
        "its command must not contain {entry}",
    ),
    (
        "runtime without command",
        minimal(local={"runtimes": {"sh": {"command": ["/bin/sh", "{entry}"]}, "x": {}}}),
        "local.runtimes.x.command: is required",
    ),
    (
        "runtime empty command",
        minimal(local={"runtimes": {"sh": {"command": []}}}),
        "local.runtimes.sh.command: must be a list of strings, got []",
    ),
    (
        "runtime command item",
        minimal(local={"runtimes": {"sh": {"command": ["/bin/sh", 1]}}}),
        "local.runtimes.sh.command[1]: must be a non-empty string, got 1",
    ),
    (
        "runtime typo",
        minimal(local={"runtimes": {"sh": {"command": ["/bin/sh", "{entry}"], "args": []}}}),
        "local.runtimes.sh.args: unknown key",
    ),
    (
        "terms both",
        minimal(terms={"file": "t.md", "body": "x"}),
        "terms: give either file or body, not both",
    ),
    (
        "terms neither",
        minimal(terms={"title": "T"}),
        "terms: needs file or body (remove [terms] to run without terms)",
    ),
    (
        "terms unreadable",
        minimal(terms={"file": "terms.md"}),
        "terms.file: cannot read '/etc/runnerd/terms.md': No such file or directory",
    ),
    (
        "terms typo",
        minimal(terms={"body": "x", "titel": "T"}),
        "terms.titel: unknown key (did you mean 'title'?)",
    ),
]


@pytest.mark.parametrize(("data", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_config_error_names_key_and_problem(data: dict[str, Any], message: str) -> None:
    assert error_of(data) == message


def test_config_error_carries_key_and_problem_apart() -> None:
    with pytest.raises(ConfigError) as info:
        parse(minimal(runner={"max_sessions": "x"}))
    assert info.value.key == "runner.max_sessions"
    assert info.value.problem == "must be a positive integer, got 'x'"


def test_config_env_value_error_never_echoes_the_value() -> None:
    message = error_of(minimal(apps={"foo": {"image": "hello", "env": {"TOKEN": 12345678}}}))
    assert message == "apps.foo.env.TOKEN: must be a string (without NUL bytes)"
    assert "12345678" not in message


def test_config_terms_decode_error_is_a_config_error() -> None:
    def undecodable(path: Path) -> str:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    message = error_of(minimal(terms={"file": "t.md"}), undecodable)
    assert message.startswith("terms.file: cannot read '/etc/runnerd/t.md': 'utf-8' codec")


# --------------------------------------------------------------------------
# Values that parse
# --------------------------------------------------------------------------


def test_config_relative_paths_resolve_against_the_config_directory() -> None:
    read: list[Path] = []

    def read_text(path: Path) -> str:
        read.append(path)
        return "Be nice."

    config = parse(
        minimal(
            server={"listen": ["unix:run/a.sock", "unix:../run/b.sock", "unix:/abs/c.sock"]},
            local={"workdir": "../state/sessions"},
            runner={"default_image": "sh", "state_dir": "../state/adopt"},
            terms={"file": "terms/../terms.md"},
        ),
        read_text,
    )
    assert config.server.listen == (
        "unix:/etc/runnerd/run/a.sock",
        "unix:/etc/run/b.sock",
        "unix:/abs/c.sock",
    )
    assert config.settings.workdir == Path("/etc/state/sessions")
    assert config.runner.state_dir == Path("/etc/state/adopt")
    assert read == [Path("/etc/runnerd/terms.md")]


@pytest.mark.parametrize(
    ("entry", "expected", "canonical"),
    [
        ("unix:/run/x.sock", ListenAddress("unix", path=Path("/run/x.sock")), "unix:/run/x.sock"),
        ("tcp:127.0.0.1:8062", ListenAddress("tcp", host="127.0.0.1", port=8062), None),
        ("tcp:[::1]:8062", ListenAddress("tcp", host="::1", port=8062), None),
        ("tcp:localhost:0", ListenAddress("tcp", host="localhost", port=0), None),
        ("fd:3", ListenAddress("fd", fd=3), None),
        ("systemd", ListenAddress("systemd"), None),
    ],
)
def test_config_listen_entries_parse(
    entry: str, expected: ListenAddress, canonical: str | None
) -> None:
    assert parse_listen(entry) == expected
    config = parse(minimal(server={"listen": [entry]}))
    assert config.server.listen == (canonical or entry,)


def test_config_listen_relative_unix_needs_a_base() -> None:
    with pytest.raises(ValueError, match="unix socket path must be absolute"):
        parse_listen("unix:run/x.sock")


@pytest.mark.parametrize(("text", "mode"), [("0660", 0o660), ("600", 0o600), ("0700", 0o700)])
def test_config_socket_mode_is_octal(text: str, mode: int) -> None:
    assert parse(minimal(server={"socket_mode": text})).server.socket_mode == mode


def test_config_cors_origins_list() -> None:
    origins = ["https://editor.telo.run", "http://localhost:5173"]
    config = parse(minimal(server={"cors_origins": origins}))
    assert config.server.cors_origins == tuple(origins)
    assert parse(minimal(server={"cors_origins": []})).server.cors_origins == ()


@pytest.mark.parametrize(
    ("given", "expected"), [("", None), ("  ", None), (" http://r ", "http://r")]
)
def test_config_registry_url_is_trimmed_and_blank_is_unset(
    given: str, expected: str | None
) -> None:
    assert parse(minimal(runner={"registry_url": given})).runner.registry_url == expected


def test_config_allowed_images_empty_list_means_not_configured() -> None:
    assert parse(minimal(runner={"allowed_images": []})).runner.allowed_images is None
    config = parse(minimal(runner={"allowed_images": ["sh", "py"]}))
    assert config.runner.allowed_images == ("sh", "py")


def test_config_quantities_accept_numbers_and_keep_the_operator_spelling() -> None:
    config = parse(minimal(limits={"app": {"cpu": 2, "memory": "1Gi", "ttl_seconds": 90.5}}))
    assert config.app_limits.cpu == "2"
    assert config.app_limits.memory == "1Gi"
    assert config.app_limits.ttl_s == 90.5
    assert config.app_limits.ephemeral_storage == DEFAULT_APP_LIMITS.ephemeral_storage


def test_config_app_entry_fields_and_catalog_order() -> None:
    apps = {
        "zeta": {"image": "hello"},
        "alpha": {
            "image": "hello",
            "pull_policy": "always",
            "title": "Alpha",
            "description": "The first",
            "env": {"TOKEN": "s3cret"},
        },
    }
    config = parse(minimal(apps=apps))
    assert list(config.apps) == ["zeta", "alpha"]
    alpha = config.apps["alpha"]
    assert (alpha.name, alpha.image, alpha.pull_policy) == ("alpha", "hello", "always")
    assert (alpha.title, alpha.description) == ("Alpha", "The first")
    assert dict(alpha.env) == {"TOKEN": "s3cret"}
    zeta = config.apps["zeta"]
    assert (zeta.pull_policy, zeta.title, zeta.description, dict(zeta.env)) == (
        "missing",
        None,
        None,
        {},
    )


# --------------------------------------------------------------------------
# Terms
# --------------------------------------------------------------------------


def test_config_terms_version_defaults_to_the_body_hash() -> None:
    body = "Sessions are logged.\n"
    terms = parse(minimal(terms={"body": body})).terms
    assert terms is not None
    assert terms.version == hashlib.sha256(body.encode()).hexdigest()[:12]
    assert len(terms.version) == 12
    assert terms.title == "Usage agreement"
    assert terms.body == body


def test_config_terms_edit_changes_the_version() -> None:
    one = parse(minimal(terms={"body": "v1"})).terms
    two = parse(minimal(terms={"body": "v2"})).terms
    assert one is not None and two is not None and one.version != two.version


def test_config_terms_operator_version_and_title_win() -> None:
    terms = parse(minimal(terms={"body": "x", "version": "2024-01", "title": "Rules"})).terms
    assert terms is not None and (terms.version, terms.title) == ("2024-01", "Rules")


def test_config_terms_from_file() -> None:
    config = parse(minimal(terms={"file": "/srv/terms.md"}), lambda path: f"read {path}")
    assert config.terms is not None and config.terms.body == "read /srv/terms.md"


@pytest.mark.parametrize("body", ["", "  \n"])
def test_config_terms_empty_body_means_no_terms(body: str) -> None:
    assert parse(minimal(terms={"body": body})).terms is None
    assert parse(minimal(terms={"file": "t.md"}), lambda _: body).terms is None


# --------------------------------------------------------------------------
# Files: load_config and apps.d drop-ins
# --------------------------------------------------------------------------

MAIN = """
[runner]
default_image = "sh"
[local]
workdir = "sessions"
[local.runtimes.sh]
command = ["/bin/sh", "{entry}"]
[local.runtimes.hello]
command = ["/bin/sh", "-c", "echo hi"]
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_load_config_reads_drop_ins_in_sorted_order(tmp_path: Path) -> None:
    main = write(tmp_path / "runnerd.toml", MAIN + '[apps.main]\nimage = "hello"\n')
    write(tmp_path / "apps.d/b.toml", '[apps.bee]\nimage = "hello"\n')
    write(tmp_path / "apps.d/a.toml", '[apps.ant]\nimage = "hello"\nenv = { K = "v" }\n')
    write(tmp_path / "apps.d/.swap.toml", '[apps.ghost]\nimage = "hello"\n')
    write(tmp_path / "apps.d/notes.txt", "not toml")
    config = load_config(main)
    assert list(config.apps) == ["main", "ant", "bee"]
    assert dict(config.apps["ant"].env) == {"K": "v"}
    assert config.source == main
    assert config.settings.workdir == tmp_path / "sessions"


def test_load_config_without_drop_in_dir(tmp_path: Path) -> None:
    assert dict(load_config(write(tmp_path / "r.toml", MAIN)).apps) == {}


def test_load_config_duplicate_app_names_both_files(tmp_path: Path) -> None:
    main = write(tmp_path / "runnerd.toml", MAIN)
    a = write(tmp_path / "apps.d/10-a.toml", '[apps.dup]\nimage = "hello"\n')
    b = write(tmp_path / "apps.d/20-b.toml", '[apps.dup]\nimage = "hello"\n')
    with pytest.raises(ConfigError) as info:
        load_config(main)
    assert str(info.value) == f"apps.dup: defined in both {a} and {b}"


def test_load_config_app_in_main_file_and_drop_in(tmp_path: Path) -> None:
    main = write(tmp_path / "runnerd.toml", MAIN + '[apps.dup]\nimage = "hello"\n')
    b = write(tmp_path / "apps.d/b.toml", '[apps.dup]\nimage = "hello"\n')
    with pytest.raises(ConfigError, match=f"apps.dup: defined in both {main} and {b}"):
        load_config(main)


def test_load_config_drop_in_holds_only_apps(tmp_path: Path) -> None:
    main = write(tmp_path / "runnerd.toml", MAIN)
    bad = write(tmp_path / "apps.d/x.toml", '[server]\nlog_level = "debug"\n')
    with pytest.raises(ConfigError) as info:
        load_config(main)
    assert str(info.value) == (
        f"server: not allowed in {bad}: a drop-in holds only [apps.NAME] tables"
    )


def test_load_config_error_in_drop_in_app_names_the_file(tmp_path: Path) -> None:
    main = write(tmp_path / "runnerd.toml", MAIN)
    bad = write(tmp_path / "apps.d/x.toml", '[apps.broken]\ntitle = "no image"\n')
    with pytest.raises(ConfigError) as info:
        load_config(main)
    # No `image` line: the error points at the app's table header.
    assert str(info.value) == f"apps.broken.image: is required (in {bad}, line 1)"


def test_load_config_bad_app_name_in_drop_in_names_the_file(tmp_path: Path) -> None:
    main = write(tmp_path / "runnerd.toml", MAIN)
    bad = write(tmp_path / "apps.d/x.toml", '[apps."a b"]\nimage = "hello"\n')
    with pytest.raises(ConfigError) as info:
        load_config(main)
    assert str(info.value).endswith(f"starting with a letter or digit (in {bad}, line 1)")


def test_load_config_invalid_toml_names_the_file(tmp_path: Path) -> None:
    # The main file is not named: every caller puts its path in front.
    main = write(tmp_path / "runnerd.toml", "[server\n")
    with pytest.raises(ConfigError, match=r"^is not valid TOML: .*\(at line 1, column 8\)$"):
        load_config(main)
    write(tmp_path / "runnerd.toml", MAIN)
    bad = write(tmp_path / "apps.d/x.toml", "[apps.x\n")
    with pytest.raises(ConfigError, match=f"^'{bad}' is not valid TOML: "):
        load_config(main)


def test_load_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.toml")
    assert str(info.value) == "cannot read: No such file or directory"


def test_load_config_unreadable_terms_file_is_an_error(tmp_path: Path) -> None:
    main = write(tmp_path / "runnerd.toml", MAIN + '[terms]\nfile = "terms.md"\n')
    with pytest.raises(ConfigError) as info:
        load_config(main)
    assert str(info.value) == (
        f"line 11: terms.file: cannot read '{tmp_path / 'terms.md'}': No such file or directory"
    )
    write(tmp_path / "terms.md", "Be nice.")
    terms = load_config(main).terms
    assert terms is not None and terms.body == "Be nice."


def test_load_config_shipped_dev_config(tmp_path: Path) -> None:
    config = load_config(REPO / "config/dev.toml")
    assert config.server.listen == (f"unix:{REPO / 'run/runnerd.sock'}", "tcp:127.0.0.1:8062")
    assert config.settings.workdir == REPO / "run/sessions"
    assert config.runner.backend == "local" and config.runner.default_image == "sh"
    assert config.settings.runtimes["sh"].command == ("/bin/sh", "{entry}")
    assert config.settings.runtimes["python"].command == ("python3", "-u", "{entry}")
    assert config.apps["hello"].image == "hello"
    # The dev TCP port is loopback, for the Telo editor's local origins only.
    assert "tcp:127.0.0.1:8062" in config.server.listen
    origins = config.server.cors_origins
    assert origins != "*" and "http://localhost:5173" in origins


def test_load_config_shipped_production_example() -> None:
    config = load_config(REPO / "config/runnerd.toml")
    # UNIX only, as its comment promises; no browser origin by default.
    assert config.server.listen == ("unix:/run/runnerd/runnerd.sock",)
    assert config.server.cors_origins == () and config.server.allow_remote is False
    assert config.runner.max_sessions == 32


def test_the_shipped_example_renders_its_local_tables_and_marks_kubernetes_unread() -> None:
    # Changed on purpose: check-config printed the [kubernetes] defaults for a
    # local config; a backend's table is now read only by its own provider,
    # imported only when it is the configured one, so the table the example
    # documents is marked instead of printed (and no longer checked).
    config = check_config(load_config(REPO / "config/runnerd.toml"))
    assert config.unread == ("kubernetes",)
    text = render_config(config)
    assert "\n[local]\n" in text and "\n[local.runtimes.telo]\n" in text
    assert "\n[kubernetes]\n" not in text
    assert text.endswith('\n# [kubernetes] not read: runner.backend = "local"\n')
    again = parse_config(tomllib.loads(text), base_dir=Path("/elsewhere"), read_text=no_files)
    assert again.settings == config.settings and again.unread == ()


def test_another_backends_table_is_neither_checked_nor_printed() -> None:
    # What a typo there would have been refused for, before: the local
    # backend's provider is not imported to read it.
    config = check_config(
        parse_config(
            {
                "runner": {"backend": "kubernetes"},
                "kubernetes": {"self_url": "http://10.0.0.5:8063"},
                "local": {"workdir": 7, "no_such_key": True},
            },
            base_dir=BASE,
            read_text=no_files,
        )
    )
    assert config.unread == ("local",)
    assert "\n[local]\n" not in render_config(config)
    assert '# [local] not read: runner.backend = "kubernetes"' in render_config(config)


def test_an_unknown_backend_is_refused_naming_the_built_ones() -> None:
    assert error_of(minimal(runner={"backend": "docker"})) == (
        "runner.backend: must be one of local, kubernetes, got 'docker'"
    )


# --------------------------------------------------------------------------
# render_config
# --------------------------------------------------------------------------

SECRETS = minimal(
    apps={"svc": {"image": "hello", "env": {"TOKEN": "tok-operator-secret"}}},
    terms={"body": "the-terms-body-text", "version": "7"},
    runner={"registry_url": "http://registry", "allowed_images": ["sh", "py"]},
    server={"cors_origins": ["https://a.example"], "listen": ["tcp:[::1]:0", "unix:x.sock"]},
)


def test_render_config_masks_catalog_env_values_and_terms_body() -> None:
    text = render_config(parse(SECRETS))
    assert "tok-operator-secret" not in text
    assert "the-terms-body-text" not in text
    assert 'env = { TOKEN = "***" }' in text
    assert 'body = "***"' in text


def test_render_config_shows_the_effective_allowlist_when_unset() -> None:
    text = render_config(parse(minimal()))
    assert "# allowed_images not set; accepted images: sh, py\n" in text
    assert "allowed_images = " not in text


def test_config_repr_never_shows_catalog_env_values() -> None:
    config = parse(SECRETS)
    assert "tok-operator-secret" not in repr(config)
    assert "tok-operator-secret" not in repr(config.apps["svc"])


def test_render_config_parses_back_to_the_same_config() -> None:
    config = parse(SECRETS)
    text = render_config(config)
    again = parse_config(tomllib.loads(text), base_dir=Path("/elsewhere"), read_text=no_files)
    assert render_config(again) == text
    assert again.server == config.server
    assert again.runner == config.runner
    assert again.settings == config.settings
    assert (again.session_limits, again.app_limits) == (config.session_limits, config.app_limits)


def test_load_config_non_utf8_drop_in_is_a_config_error_naming_it(tmp_path: Path) -> None:
    main = tmp_path / "runnerd.toml"
    main.write_text(
        '[runner]\ndefault_image = "sh"\n[local.runtimes.sh]\ncommand = ["sh", "{entry}"]\n'
    )
    (tmp_path / "apps.d").mkdir()
    bad = tmp_path / "apps.d" / "bad.toml"
    bad.write_bytes(b'[apps.x]\nimage = "sh"\ntitle = "caf\xe9"\n')
    with pytest.raises(ConfigError) as info:
        load_config(main)
    assert str(bad) in str(info.value) and "UTF-8" in str(info.value)


# ---------------------------------------------------------------- [server] edge


@pytest.mark.parametrize(
    "entry", ["tcp:0.0.0.0:8062", "tcp:[::]:8062", "tcp:192.168.1.5:8062", "tcp:example.com:80"]
)
def test_config_refuses_a_non_loopback_tcp_bind_without_allow_remote(entry: str) -> None:
    data = minimal(server={"listen": ["unix:/run/x.sock", entry]})
    message = error_of(data)
    assert message.startswith("server.listen[1]:") and "allow_remote = true" in message
    data["server"]["allow_remote"] = True
    assert parse(data).server.allow_remote is True


@pytest.mark.parametrize(
    "entry", ["tcp:127.0.0.1:8062", "tcp:127.0.0.2:0", "tcp:[::1]:8062", "tcp:localhost:8062"]
)
def test_config_accepts_loopback_tcp_binds(entry: str) -> None:
    assert parse(minimal(server={"listen": [entry]})).server.listen == (entry,)


def test_config_allow_remote_must_be_a_boolean() -> None:
    message = error_of(minimal(server={"allow_remote": "yes"}))
    assert message.startswith("server.allow_remote:")


def test_config_allowed_hosts_are_bare_lowercase_names() -> None:
    server = parse(minimal(server={"allowed_hosts": ["Runner.Example.com", "box."]})).server
    assert server.allowed_hosts == ("runner.example.com", "box")
    for bad in ("http://runner.example", "runner.example:8062", "a b", ""):
        message = error_of(minimal(server={"allowed_hosts": [bad]}))
        assert message.startswith("server.allowed_hosts[0]:"), message


def test_config_connection_bounds_are_positive() -> None:
    for key in ("idle_timeout_seconds", "request_timeout_seconds", "max_connections"):
        assert error_of(minimal(server={key: 0})).startswith(f"server.{key}:")
    server = parse(minimal(server={"idle_timeout_seconds": 0.5, "max_connections": 7})).server
    assert server.idle_timeout_s == 0.5 and server.max_connections == 7


def test_config_subscribers_per_session_default_to_64_and_must_be_positive() -> None:
    assert parse(minimal()).runner.max_subscribers_per_session == 64
    runner = parse(minimal(runner={"max_subscribers_per_session": 2})).runner
    assert runner.max_subscribers_per_session == 2
    for bad in (0, "x", True):
        message = error_of(minimal(runner={"max_subscribers_per_session": bad}))
        assert message.startswith("runner.max_subscribers_per_session: must be a positive")


def test_config_warns_about_any_origin_with_a_tcp_listener() -> None:
    from runnerd.config.server import server_warnings

    tcp_any = parse(minimal(server={"listen": ["tcp:127.0.0.1:0"], "cors_origins": "*"})).server
    (warning,) = server_warnings(tcp_any)
    assert warning.startswith("server.cors_origins:") and "every web page" in warning
    unix_any = parse(minimal(server={"cors_origins": "*"})).server
    tcp_listed = parse(
        minimal(server={"listen": ["tcp:127.0.0.1:0"], "cors_origins": ["https://e.example"]})
    ).server
    assert server_warnings(unix_any) == [] and server_warnings(tcp_listed) == []


def test_config_warns_about_a_socket_other_users_may_write() -> None:
    from runnerd.config.server import server_warnings

    for mode in ("0777", "0666", "0662"):
        (warning,) = server_warnings(parse(minimal(server={"socket_mode": mode})).server)
        assert warning.startswith(f'server.socket_mode: "{mode}" lets every local user')
    # Group write is the intended access (the runnerd group); no unix
    # listener, no socket for the mode to apply to.
    assert server_warnings(parse(minimal(server={"socket_mode": "0770"})).server) == []
    tcp_only = minimal(server={"socket_mode": "0777", "listen": ["tcp:127.0.0.1:0"]})
    assert server_warnings(parse(tcp_only).server) == []


@pytest.mark.parametrize(
    ("backend", "imported", "not_imported"),
    [
        ("local", "runnerd.local", "runnerd.kube"),
        ("kubernetes", "runnerd.kube.provider", "runnerd.local"),
    ],
)
def test_only_the_configured_backends_package_is_imported_to_read_a_config(
    tmp_path: Path, backend: str, imported: str, not_imported: str
) -> None:
    # Both tables in the file, as the shipped example has them.
    path = tmp_path / "runnerd.toml"
    path.write_text(
        f'[runner]\nbackend = "{backend}"\ndefault_image = "sh"\n'
        '[local.runtimes.sh]\ncommand = ["sh", "{entry}"]\n'
        '[kubernetes]\nself_url = "http://10.0.0.5:8063"\n'
    )
    script = (
        "import sys\nfrom pathlib import Path\nfrom runnerd.backends import check_config,"
        f" load_config\ncheck_config(load_config(Path({str(path)!r})))\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('runnerd.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert imported in out
    assert [m for m in out if m == not_imported or m.startswith(f"{not_imported}.")] == []
