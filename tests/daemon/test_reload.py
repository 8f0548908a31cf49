"""SIGHUP: catalog, terms and image allowlist reload; listeners stay."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from runnerd.backends import parse_config
from runnerd.daemon.reload import build_reloaded, restart_only_changes
from tests.e2e.edge import tcp_daemon
from tests.harness import session_body, start_daemon

SECRET = "reload-secret-4b1d"
GREET_RUNTIME = {"greet": {"command": ["/bin/sh", "-c", "echo hello; exec cat"]}}
BEFORE: dict[str, Any] = {
    "runner": {"allowed_images": ["sh"]},
    "local": {"runtimes": GREET_RUNTIME},
}
AFTER: dict[str, Any] = {
    "server": {
        "listen": ["unix:/nonexistent/elsewhere.sock"],
        "cors_origins": ["https://editor.example"],
    },
    "runner": {"allowed_images": ["sh", "python"]},
    "local": {"runtimes": GREET_RUNTIME},
    "terms": {"body": "Be nice.", "version": "v2", "title": "House rules"},
    "apps": {"greeter": {"image": "greet", "title": "Greeter", "env": {"TOKEN": SECRET}}},
}


def image_schema(capabilities: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = capabilities["config"]["schema"]["properties"]["image"]
    return schema


async def test_sighup_reloads_catalog_terms_and_allowed_images(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, BEFORE) as daemon, daemon.client() as client:
        before = (await client.get("/v1/capabilities")).json()
        assert "terms" not in before and not before.get("apps")
        assert image_schema(before)["enum"] == ["sh"]

        daemon.write_config(AFTER)
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("config reloaded")

        response = await client.get("/v1/capabilities")
        after = response.json()
        assert after["terms"] == {"version": "v2", "title": "House rules", "body": "Be nice."}
        assert after["apps"] == [{"name": "greeter", "title": "Greeter"}]
        assert image_schema(after)["enum"] == ["sh", "python"]
        assert SECRET not in response.text
        origin = {"origin": "https://editor.example"}
        cors = (await client.get("/v1/health", headers=origin)).headers
        assert cors["access-control-allow-origin"] == "https://editor.example"
        other = {"origin": "https://elsewhere.example"}
        assert (
            "access-control-allow-origin"
            not in (await client.get("/v1/health", headers=other)).headers
        )
        # The listen change needs a restart: we still serve where we were.
        assert "need a restart" in daemon.stderr_text()
        assert (await client.get("/v1/health")).status_code == 200
    assert SECRET not in daemon.stderr_text()


async def test_sighup_with_a_bad_file_keeps_the_old_config(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, BEFORE) as daemon, daemon.client() as client:
        daemon.config_path.write_text(daemon.config_path.read_text() + "\n[runner\n")
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("reload failed")

        line = next(x for x in daemon.stderr_text().splitlines() if "reload failed" in x)
        assert line.startswith("ERROR ")
        assert str(daemon.config_path) in line
        capabilities = (await client.get("/v1/capabilities")).json()
        assert image_schema(capabilities)["enum"] == ["sh"]
        assert "terms" not in capabilities


async def test_sighup_with_a_deeply_nested_value_keeps_the_old_config(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, BEFORE) as daemon, daemon.client() as client:
        deep = "[" * 5000 + "]" * 5000
        daemon.config_path.write_text(daemon.config_path.read_text() + f"\nx = {deep}\n")
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("reload failed")

        line = next(x for x in daemon.stderr_text().splitlines() if "reload failed" in x)
        assert line.startswith("ERROR ") and "unexpectedly" not in line
        assert str(daemon.config_path) in line and "nest deeper than the limit" in line
        assert "Traceback" not in daemon.stderr_text()
        assert image_schema((await client.get("/v1/capabilities")).json())["enum"] == ["sh"]


async def test_sighup_applies_a_new_capacity_to_new_sessions(tmp_path: Path) -> None:
    async with start_daemon(tmp_path) as daemon, daemon.client() as client:
        first = await client.post("/v1/sessions", json=session_body("exec sleep 1000"))
        assert first.status_code == 201

        daemon.write_config({"runner": {"max_sessions": 1}})
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("config reloaded")

        second = await client.post("/v1/sessions", json=session_body("exec sleep 1000"))
        assert second.status_code == 409, second.text
        assert second.json()["error"] == "too_many_sessions"
        # The live session was not touched by the smaller capacity.
        session_id = first.json()["sessionId"]
        status = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]
        assert status["kind"] in ("starting", "running")


async def test_sighup_applies_a_new_log_level(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, {"server": {"log_level": "warning"}}) as daemon:
        daemon.write_config({"server": {"log_level": "info"}})
        daemon.send_signal(signal.SIGHUP)
        reloaded = "INFO runnerd.daemon config reloaded"
        await daemon.wait_for_stderr(reloaded)
        # stderr is ordered: everything logged before the reload line has
        # been read by now, so the INFO startup line was really filtered.
        before = daemon.stderr_text().split(reloaded)[0]
        assert "serving" not in before
        assert not [line for line in before.splitlines() if line.startswith("INFO ")]
        assert "need a restart" not in daemon.stderr_text()


async def test_sighup_refuses_an_app_on_a_runtime_added_since_start(tmp_path: Path) -> None:
    async with start_daemon(tmp_path) as daemon, daemon.client() as client:
        daemon.write_config(
            {
                "local": {"runtimes": GREET_RUNTIME},
                "apps": {"greeter": {"image": "greet"}},
            }
        )
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("reload failed")
        assert "apps.greeter.image" in daemon.stderr_text()
        assert not (await client.get("/v1/capabilities")).json().get("apps")


async def test_sighup_with_a_non_utf8_drop_in_keeps_serving_and_sessions(
    tmp_path: Path,
) -> None:
    async with start_daemon(tmp_path, BEFORE) as daemon, daemon.client() as client:
        started = await client.post("/v1/sessions", json=session_body("exec sleep 1000"))
        assert started.status_code == 201, started.text
        session_id = started.json()["sessionId"]
        drop_in = tmp_path / "apps.d" / "bad.toml"
        drop_in.parent.mkdir()
        drop_in.write_bytes(b'[apps.x]\nimage = "greet"\ntitle = "caf\xe9"\n')
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("reload failed")

        line = next(x for x in daemon.stderr_text().splitlines() if "reload failed" in x)
        assert line.startswith("ERROR ") and "bad.toml" in line
        assert (await client.get("/v1/health")).status_code == 200
        status = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]
        assert status["kind"] in ("starting", "running")
        assert image_schema((await client.get("/v1/capabilities")).json())["enum"] == ["sh"]


async def test_sighup_refuses_images_the_running_runtimes_cannot_run(tmp_path: Path) -> None:
    # The new file alone is valid (its `greet` runs bundles), but the running
    # backend kept the `greet` it started with, which cannot run a bundle.
    async with start_daemon(tmp_path, BEFORE) as daemon, daemon.client() as client:
        daemon.write_config(
            {
                "runner": {"allowed_images": ["sh", "greet"]},
                "local": {"runtimes": {"greet": {"command": ["/bin/sh", "{entry}"]}}},
            }
        )
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("reload failed")
        line = next(x for x in daemon.stderr_text().splitlines() if "reload failed" in x)
        assert "runner.allowed_images[1]" in line and "need a restart" in line
        assert image_schema((await client.get("/v1/capabilities")).json())["enum"] == ["sh"]


async def test_reload_applies_allowed_hosts_to_the_next_request(tmp_path: Path) -> None:
    async with tcp_daemon(tmp_path) as (daemon, port):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            before = await client.get("/v1/health", headers={"host": "runner.example"})
            listen = [f"unix:{daemon.socket_path}", "tcp:127.0.0.1:0"]
            daemon.write_config({"server": {"listen": listen, "allowed_hosts": ["runner.example"]}})
            daemon.send_signal(signal.SIGHUP)
            await daemon.wait_for_notification("STATUS=config reloaded")
            after = await client.get("/v1/health", headers={"host": "runner.example"})
    assert before.status_code == 403 and after.status_code == 200


def test_reload_keeps_state_dir_and_says_it_needs_a_restart() -> None:
    def no_files(path: Path) -> str:
        raise FileNotFoundError(path)

    data: dict[str, Any] = {
        "runner": {"default_image": "sh", "state_dir": "/srv/a"},
        "local": {"runtimes": {"sh": {"command": ["/bin/sh", "{entry}"]}}},
    }
    old = parse_config(data, base_dir=Path("/etc/runnerd"), read_text=no_files)
    new = replace(old, runner=replace(old.runner, state_dir=Path("/srv/b"), max_sessions=3))
    reloaded = build_reloaded(old, new)
    assert reloaded.runner.state_dir == Path("/srv/a") and reloaded.runner.max_sessions == 3
    assert restart_only_changes(old, new) == ["runner.state_dir"]


async def test_a_reload_to_any_origin_with_a_tcp_listener_warns_as_start_up_does(
    tmp_path: Path,
) -> None:
    async with tcp_daemon(tmp_path) as (daemon, _):
        assert "server.cors_origins" not in daemon.stderr_text()
        listen = [f"unix:{daemon.socket_path}", "tcp:127.0.0.1:0"]
        daemon.write_config({"server": {"listen": listen, "cors_origins": "*"}})
        daemon.send_signal(signal.SIGHUP)
        await daemon.wait_for_stderr("config reloaded")
        log = daemon.stderr_text()
    (warning,) = [line for line in log.splitlines() if "server.cors_origins" in line]
    assert "WARNING" in warning and "every web page you visit" in warning, warning
    assert log.index(warning) < log.index("config reloaded")
