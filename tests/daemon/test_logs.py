"""Log lines: `LEVEL logger [session-id] message key=value`, never a secret."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from runnerd.daemon.logs import WARNING_ONLY, LineFormatter, set_log_level
from tests.harness import read_pty_until, session_body, start_daemon
from tests.shared_daemon import OnBackend

SECRET = "log-secret-7d0e"
CHATTY = 'i=1; while [ $i -le 20 ]; do echo "line $i"; i=$((i+1)); done; exec sleep 30'
LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+ ")


def format_record(message: str, *args: object, **extra: object) -> str:
    record = logging.LogRecord("runnerd.test", logging.INFO, __file__, 1, message, args, None)
    record.__dict__.update(extra)
    return LineFormatter().format(record)


def test_line_has_level_logger_session_message_and_fields() -> None:
    line = format_record("session %s", "started", session_id="abc234", image="sh", code=3)
    assert line == "INFO runnerd.test [abc234] session started image=sh code=3"


def test_line_quotes_values_with_spaces_and_stays_one_line() -> None:
    line = format_record("two\nlines", reason='has "quotes" and spaces')
    assert line == r'INFO runnerd.test two\nlines reason="has \"quotes\" and spaces"'


def test_line_masks_fields_that_look_secret() -> None:
    line = format_record("start", env={"TOKEN": SECRET}, api_token=SECRET, password=SECRET)
    assert SECRET not in line
    assert "env=*** api_token=*** password=***" in line


async def test_daemon_logs_never_contain_a_catalog_secret(tmp_path: Path) -> None:
    overrides = {
        "server": {"log_level": "debug"},
        "local": {
            "runtimes": {
                "greet": {
                    "command": ["/bin/sh", "-c", 'echo "token-length=${#TOKEN}"; exec cat'],
                }
            }
        },
        "apps": {"greeter": {"image": "greet", "env": {"TOKEN": SECRET}}},
    }
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        response = await client.post("/v1/apps/greeter/sessions", json={"env": {}})
        assert response.status_code == 201, response.text
        session_id = response.json()["sessionId"]
        output = await read_pty_until(daemon.socket_path, session_id, rb"token-length=\d+\r?\n")
        # The workload did get the secret; the daemon never wrote it down.
        assert f"token-length={len(SECRET)}".encode() in output
        assert (await client.delete(f"/v1/sessions/{session_id}")).status_code == 204
    text = daemon.stderr_text()
    assert SECRET not in text
    assert all(LINE.match(line) for line in text.splitlines()), text


async def test_debug_level_is_runnerds_own_and_libraries_stay_at_info(
    tmp_path: Path, on_backend: OnBackend
) -> None:
    # On kubernetes the attach is trio-websocket's (every frame a DEBUG line
    # of its own) and the apiserver's HTTP/2 is hpack's; locally, the
    # daemon's own WebSocket and HTTP stacks.
    overrides = on_backend.overrides({"server": {"log_level": "debug"}})
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        response = await client.post("/v1/sessions", json=session_body(CHATTY))
        session_id = response.json()["sessionId"]
        await read_pty_until(daemon.socket_path, session_id, rb"line 20\r?\n")
        await client.delete(f"/v1/sessions/{session_id}")
    debug = [line for line in daemon.stderr_text().splitlines() if line.startswith("DEBUG ")]
    foreign = [line for line in debug if not re.match(r"DEBUG runnerd[\s.]", line)]
    assert foreign == [], foreign[:5]


def test_debug_is_set_on_runnerds_loggers_only() -> None:
    names = ["", "runnerd", *WARNING_ONLY]
    saved = {name: logging.getLogger(name).level for name in names}
    try:
        set_log_level("debug")
        assert logging.getLogger("runnerd.local.backend").isEnabledFor(logging.DEBUG)
        for library in ("trio-websocket", "hpack.hpack", "h2.connection", "wsproto"):
            assert not logging.getLogger(library).isEnabledFor(logging.DEBUG), library
            assert logging.getLogger(library).isEnabledFor(logging.INFO), library
        set_log_level("warning")
        assert not logging.getLogger("runnerd.daemon").isEnabledFor(logging.INFO)
        assert not logging.getLogger("trio-websocket").isEnabledFor(logging.INFO)
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
