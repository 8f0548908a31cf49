"""Log lines: `LEVEL logger [session-id] message key=value`, never a secret."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from runnerd.daemon.logs import LineFormatter
from tests.harness import read_pty_until, start_daemon

SECRET = "log-secret-7d0e"
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
