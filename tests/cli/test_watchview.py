"""What `runnerd watch` prints (pure): prefixed output, run lines, its arguments."""

from __future__ import annotations

import argparse
import io

import pytest

from runnerd.client.table import apps_text
from runnerd.client.transport import UsageError
from runnerd.client.watch import parse_app
from runnerd.client.watchview import Screen, duration_text, endpoints_text, run_text


def screen(colour: bool = False) -> tuple[Screen, io.BytesIO, io.BytesIO]:
    out, err = io.BytesIO(), io.BytesIO()
    return Screen(["web", "api2"], out, err, colour=colour), out, err


def test_watchview_every_line_carries_its_app_name_padded_to_the_longest() -> None:
    view, out, err = screen()
    view.output("web", 0, b"hello\r\nwor")
    view.output("web", 0, b"ld\r\n")
    view.output("api2", 1, b"up\n")
    assert out.getvalue() == b"web  | hello\r\nweb  | world\r\napi2 | up\n"
    assert err.getvalue() == b""


def test_watchview_a_partial_line_is_shown_and_ended_when_another_app_speaks() -> None:
    view, out, _ = screen()
    view.output("web", 0, b"Name? ")
    view.output("api2", 0, b"tick\n")
    view.output("web", 0, b"bob\n")
    assert out.getvalue() == b"web  | Name? \napi2 | tick\nweb  | bob\n"


def test_watchview_stderr_of_a_streams_app_is_apart_and_marked() -> None:
    view, out, err = screen()
    view.output("web", 1, b"out\n")
    view.output("web", 2, b"oops\n")
    assert out.getvalue() == b"web  | out\n"
    assert err.getvalue() == b"web  ! oops\n"


def test_watchview_run_lines_and_notes_go_to_stderr() -> None:
    view, out, err = screen()
    view.output("web", 0, b"half")
    view.app_line("web", "#2 (watch) started")
    view.note("synced: wrote main.sh")
    assert out.getvalue() == b"web  | half\n"
    assert err.getvalue() == b"web  #2 (watch) started\nrunnerd: synced: wrote main.sh\n"


def test_watchview_colour_names_each_app_in_its_own_colour() -> None:
    view, out, _ = screen(colour=True)
    view.output("web", 0, b"a\n")
    view.output("api2", 0, b"b\n")
    assert out.getvalue() == b"\x1b[36mweb \x1b[0m | a\n\x1b[33mapi2\x1b[0m | b\n"


def test_watchview_run_events_read_as_a_person_reads_them() -> None:
    started = {"type": "run", "app": "web", "generation": 3, "phase": "started",
               "trigger": "watch"}  # fmt: skip
    assert run_text(started, "watch") == "#3 (watch) started"
    assert run_text({**started, "telo": "0.14.2"}, "watch") == "#3 (watch) started (telo 0.14.2)"
    done = {"generation": 3, "phase": "completed", "code": 0, "durationMs": 412}
    assert run_text(done, "watch") == "#3 (watch) exited 0 in 0.4 s"
    killed = {"generation": 3, "phase": "completed", "code": 143, "durationMs": 65_000}
    assert run_text(killed, None) == "#3 exited 143 (SIGTERM) in 65 s"
    failed = {"generation": 4, "phase": "failed", "reason": "entry main.sh is not a file"}
    assert run_text(failed, "manual") == "#4 (manual) failed: entry main.sh is not a file"
    assert duration_text(185_000) == "3 min 5 s"
    added = {"added": [{"port": 8080, "protocol": "tcp"}], "rejected": [{"port": 9, "reason": "x"}]}
    assert endpoints_text(added) == "ports +8080/tcp refused 9: x"


def test_watchview_app_specs_name_entry_and_ports() -> None:
    assert parse_app("web=srv/main.py:8080,53/udp", streams=False) == {
        "name": "web", "entryRelativePath": "srv/main.py",
        "ports": [{"port": 8080, "protocol": "tcp"}, {"port": 53, "protocol": "udp"}],
    }  # fmt: skip
    assert parse_app("job=a:b.sh", streams=True) == {
        "name": "job", "entryRelativePath": "a:b.sh", "io": "streams"
    }  # fmt: skip
    for bad in ("web", "=main.sh", "web="):
        with pytest.raises(UsageError, match="NAME=ENTRY"):
            parse_app(bad, streams=False)
    with pytest.raises(UsageError, match="each port must be N or N/udp"):
        parse_app("web=main.sh:99999", streams=False)


def test_watchview_ls_shows_apps_with_generations_and_the_agent() -> None:
    apps = [{"name": "web", "generation": 3}, {"name": "api", "generation": 1}]
    watch = {"mode": "watch", "apps": apps, "agent": "claude"}
    assert apps_text(watch) == "web#3,api#1 +agent:claude"
    assert apps_text({"mode": "run", "apps": [{"name": "app", "generation": 0}]}) == "-"
    assert apps_text({}) == "-"


def test_watchview_attach_refuses_options_of_a_new_session() -> None:
    from runnerd.client.watch import _attach

    args = argparse.Namespace(attach="abc", app=["x=y"], entry=None, agent=None, port=[],
                              image=None, env_file=None, streams=False)  # fmt: skip
    with pytest.raises(UsageError, match="drop --app"):
        _attach(None, args)  # type: ignore[arg-type]  # refused before any request


def test_watchview_a_429_waits_what_the_daemon_says() -> None:
    from runnerd.client.transport import ApiError
    from runnerd.client.watchsession import DEFAULT_RETRY_S, _retry_after_s

    told = "30 workspace writes and reloads in the last 60 s (watch.reload_limit); try again in 7 s"
    assert _retry_after_s(ApiError(429, "reload_rate_limited", told)) == 7.0
    header = ApiError(429, "reload_rate_limited", told, headers={"retry-after": "3"})
    assert _retry_after_s(header) == 3.0
    assert _retry_after_s(ApiError(429, "reload_rate_limited", "slow down")) == DEFAULT_RETRY_S
