"""`GET /v1/sessions` (a runnerd extension) and the verbs built on it: ls, stop."""

from __future__ import annotations

import json
import sys

import trio

from tests.cli.helpers import cli, start, wait_status
from tests.harness import Daemon, read_pty_until, start_daemon
from tests.shared_daemon import OnBackend, shared_runnerd_on_each_backend

__all__ = ["shared_runnerd_on_each_backend"]  # the module's `runnerd`

CATALOG = {
    "local": {"runtimes": {"greeter": {"command": ["/bin/sh", "-c", "echo hi; sleep 30"]}}},
    "apps": {"greet": {"image": "greeter", "title": "Greeter", "env": {"TOKEN": "s3cret"}}},
}


async def test_the_list_names_each_session_and_never_its_env(
    tmp_path, on_backend: OnBackend
) -> None:
    overrides = on_backend.overrides(CATALOG)
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        bundle_id = await start(daemon, "exit 0", env={"PASSWORD": "hunter2"})
        created = await client.post("/v1/apps/greet/sessions", json={"env": {}})
        app_id = created.json()["sessionId"]
        await wait_status(daemon, bundle_id, ("exited",))
        await wait_status(daemon, app_id, ("running",))
        # `running` can precede the first output (a pod's log stream attaches
        # after it): wait for the "hi" the list must then count.
        await read_pty_until(daemon.socket_path, app_id, rb"hi")
        response = await client.get("/v1/sessions")
        assert response.status_code == 200
        assert response.headers["x-runnerd-max-body-bytes"] == str(16 * 1024 * 1024)
        entries = {e["sessionId"]: e for e in response.json()["sessions"]}
        assert entries[bundle_id]["image"] == "sh"
        assert entries[bundle_id]["status"] == {"kind": "exited", "code": 0}
        assert "exitedAt" in entries[bundle_id]
        assert entries[app_id]["app"] == "greet"
        assert "image" not in entries[app_id]  # the catalog's image stays private
        assert entries[app_id]["lastOutputSeq"] >= 1
        for secret in ("hunter2", "s3cret", "PASSWORD", "TOKEN", "greeter"):
            assert secret not in response.text
        await client.delete(f"/v1/sessions/{app_id}")


async def test_the_list_is_in_the_openapi_document_as_an_extension(runnerd: Daemon) -> None:
    async with runnerd.client() as client:
        document = (await client.get("/v1/openapi.json")).json()
    operation = document["paths"]["/v1/sessions"]["get"]
    assert operation["x-runnerd-extension"] is True
    assert "post" in document["paths"]["/v1/sessions"]


async def test_ls_shows_live_sessions_and_a_includes_finished_ones(
    tmp_path, on_backend: OnBackend
) -> None:
    # Its own daemon: it asserts the whole list.
    async with start_daemon(tmp_path, on_backend.overrides()) as runnerd:
        await _ls_shows_live_sessions_and_a_includes_finished_ones(runnerd)


async def _ls_shows_live_sessions_and_a_includes_finished_ones(runnerd: Daemon) -> None:
    done = await start(runnerd, "exit 4")
    live = await start(runnerd, "exec sleep 30")
    await wait_status(runnerd, done, ("exited",))
    await wait_status(runnerd, live, ("running",))
    result = await cli(runnerd, "ls")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0].split() == ["ID", "STATUS", "AGE", "MODE", "IMAGE/APP", "APPS", "PORTS"]
    assert [line.split()[:2] for line in lines[1:]] == [[live, "running"]]
    assert lines[1].split()[3:6] == ["run", "sh", "-"]  # a run session: no apps column
    everything = (await cli(runnerd, "ls", "-a")).stdout.decode()
    assert f"{done}  exited 4" in everything and live in everything
    quiet = (await cli(runnerd, "ls", "-aq")).stdout.decode().split()
    assert quiet == [done, live]
    listed = json.loads((await cli(runnerd, "ls", "--json")).stdout)
    assert list(listed) == ["sessions"]  # the daemon's object, as the README says
    assert [e["sessionId"] for e in listed["sessions"]] == [live]
    everyone = json.loads((await cli(runnerd, "ls", "-a", "--json")).stdout)["sessions"]
    assert [e["sessionId"] for e in everyone] == [done, live]
    await cli(runnerd, "stop", live)


async def test_stop_stops_each_session_and_names_an_unknown_one(runnerd: Daemon) -> None:
    first = await start(runnerd, "exec sleep 30")
    second = await start(runnerd, "exec sleep 30")
    await wait_status(runnerd, second, ("running",))
    result = await cli(runnerd, "stop", first, "nosuchsession", second)
    assert result.returncode == 1
    assert result.stdout.decode().split() == [first, second]
    assert b"no session 'nosuchsession'" in result.stderr
    async with runnerd.client() as client:
        for session_id in (first, second):
            status = (await client.get(f"/v1/sessions/{session_id}")).json()["status"]
            assert status == {"kind": "stopped"}


# One backend: no daemon answers (the CLI's own message).
async def test_a_verb_without_a_daemon_says_where_it_looked(tmp_path) -> None:
    async with start_daemon(tmp_path) as daemon:
        daemon.socket_path = tmp_path / "nothing-here.sock"
        result = await cli(daemon, "ls")
    assert result.returncode == 1
    assert b"cannot reach runnerd at unix:" in result.stderr
    assert b"nothing-here.sock" in result.stderr


async def test_plain_verbs_load_no_server_stack_and_no_trio(runnerd: Daemon) -> None:
    # Start-up time is what a user feels on every `runnerd ls`: the plain
    # verbs speak HTTP with the standard library and import nothing heavy.
    program = (
        "import sys\n"
        "from runnerd.cli.main import main\n"
        f"code = main(['ls', '-a', '--socket', {str(runnerd.socket_path)!r}])\n"
        "heavy = ('quart', 'hypercorn', 'trio', 'httpx', 'msgspec', 'runnerd.config')\n"
        "print('loaded:', [m for m in heavy if m in sys.modules], code)\n"
    )
    result = await trio.run_process(
        [sys.executable, "-c", program], capture_stdout=True, capture_stderr=True, check=False
    )
    assert result.stdout.decode().splitlines()[-1] == "loaded: [] 0", result.stderr
