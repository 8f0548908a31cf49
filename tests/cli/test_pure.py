"""The CLI's pure parts: exit codes, env and port arguments, endpoints, ages."""

from __future__ import annotations

from pathlib import Path

import pytest

from runnerd.client.outcome import exit_code
from runnerd.client.run import parse_env, parse_ports
from runnerd.client.table import age, status_text
from runnerd.client.transport import ClientError, Endpoint, resolve_endpoint


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ({"kind": "exited", "code": 0}, 0),
        ({"kind": "exited", "code": 42}, 42),
        ({"kind": "failed", "message": "spawn: no such file"}, 125),
        ({"kind": "stopped"}, 130),
        ({"kind": "running"}, 1),
    ],
)
def test_a_terminal_status_is_the_exit_code_docker_run_would_give(status, code) -> None:
    assert exit_code(status)[0] == code


def test_a_failure_carries_its_message() -> None:
    assert exit_code({"kind": "failed", "message": "boot: x"}) == (125, "failed: boot: x")


def test_env_file_then_env_flags_later_wins(tmp_path: Path) -> None:
    env_file = tmp_path / "vars.env"
    env_file.write_text("# comment\n\nA=1\nexport B=two=2\nC=\n")
    assert parse_env(["A=override", "D=4"], env_file) == {
        "A": "override",
        "B": "two=2",
        "C": "",
        "D": "4",
    }
    with pytest.raises(ClientError, match="--env: expected K=V, got 'novalue'"):
        parse_env(["novalue"], None)
    env_file.write_text("BROKEN\n")
    with pytest.raises(ClientError, match=r"vars\.env:1: expected K=V"):
        parse_env([], env_file)


def test_ports_default_to_tcp_and_refuse_nonsense() -> None:
    assert parse_ports(["8080", "53/udp"]) == [
        {"port": 8080, "protocol": "tcp"},
        {"port": 53, "protocol": "udp"},
    ]
    for bad in ("0", "70000", "80/sctp", "http"):
        with pytest.raises(ClientError, match="--port must be N or N/udp"):
            parse_ports([bad])


def test_the_endpoint_is_url_then_socket_then_environment_then_default() -> None:
    env = {"RUNNERD_SOCKET": "/env.sock"}
    assert resolve_endpoint(None, "http://127.0.0.1:8062/", env) == Endpoint(
        url="http://127.0.0.1:8062"
    )
    assert resolve_endpoint(Path("/flag.sock"), None, env).socket_path == Path("/flag.sock")
    assert resolve_endpoint(None, None, env).socket_path == Path("/env.sock")
    assert resolve_endpoint(None, None, {}).socket_path == Path("/run/runnerd/runnerd.sock")
    with pytest.raises(ClientError, match="--url must be http"):
        resolve_endpoint(None, "ftp://x", env)


def test_ages_and_statuses_read_as_a_user_expects() -> None:
    now = 1_764_547_200.0  # 2025-12-01T00:00:00Z
    assert age("2025-11-30T23:59:18.000Z", now) == "42s"
    assert age("2025-11-30T23:55:00.000Z", now) == "5m"
    assert age("2025-11-28T00:00:00.000Z", now) == "3d"
    assert age("not a time", now) == "?"
    assert status_text({"kind": "failed", "message": "x" * 100}, 20) == "failed: " + "x" * 11 + "…"
