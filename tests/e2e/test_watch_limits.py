"""Watch sessions' limits through a real daemon: the reload budget (`429
reload_rate_limited`, shared by writes and reloads, refused requests
uncounted), an idle suspend (the workspace routes then `409 not_running`,
`POST /resume` brings the session and its workspace back), and
`watch.max_sessions` (`409 too_many_watch_sessions` on a start and on a
resume; a suspended session does not count). Each refusal changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from tests.e2e.contract_client import SSE_TIMEOUT
from tests.e2e.watch_client import (
    error_of,
    has_status,
    route,
    start_watch,
    started,
    wait_frames,
    wait_running,
    watch_body,
)
from tests.harness import start_daemon

WATCH = {"enabled": True}


async def status_of(client: httpx.AsyncClient, session_id: str) -> str:
    answer = await client.get(f"/v1/sessions/{session_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"]["kind"])


async def wait_suspended(client: httpx.AsyncClient, session_id: str) -> None:
    """Until the session is suspended, asking with plain GETs: an event
    stream would be a subscriber and keep it from suspending."""
    with trio.fail_after(30):
        # A plain GET is the only way to look without subscribing.
        while await status_of(client, session_id) != "suspended":  # noqa: ASYNC110
            await trio.sleep(0.05)


async def test_writes_and_reloads_share_the_budget_and_refusals_are_not_counted(
    tmp_path: Path,
) -> None:
    async with start_daemon(tmp_path, {"watch": {**WATCH, "reload_limit": 2}}) as daemon:
        async with daemon.client() as client:
            session_id = await start_watch(client)
            await wait_running(client, session_id)
            write = {"write": [{"path": "new.txt", "content": "1"}]}
            admitted = [
                await route(client, "POST", session_id, "workspace", json=write),
                await route(client, "POST", session_id, "reload"),
            ]
            before = (await route(client, "GET", session_id, "workspace")).json()
            refused = [
                await route(client, "POST", session_id, "reload"),
                await route(
                    client, "POST", session_id, "workspace",
                    json={"write": [{"path": "other.txt", "content": "2"}]},
                ),
                await route(client, "POST", session_id, "reload", params={"app": "nope"}),
            ]  # fmt: skip
            after = (await route(client, "GET", session_id, "workspace")).json()
    assert [r.status_code for r in admitted] == [200, 202]
    assert {error_of(r) for r in refused} == {(429, "reload_rate_limited")}
    assert "watch.reload_limit" in refused[0].json()["message"]
    # When to come back, as a header a client can act on (whole seconds,
    # within the 60 s window) and in the message.
    retry = [int(r.headers["retry-after"]) for r in refused]
    assert all(1 <= s <= 60 for s in retry), retry
    assert f"try again in {retry[0]} s" in refused[0].json()["message"]
    assert after == before and "other.txt" not in str(after)


async def test_requests_refused_after_the_budget_check_give_their_admission_back(
    tmp_path: Path,
) -> None:
    """A bad path, an unknown app, a path conflict: refused, and not counted
    (a refused request changes no state), so a client that got them wrong
    is not locked out for a minute."""
    async with start_daemon(tmp_path, {"watch": {**WATCH, "reload_limit": 2}}) as daemon:
        async with daemon.client() as client:
            session_id = await start_watch(client)
            await wait_running(client, session_id)
            refused = [
                await route(
                    client,
                    "POST",
                    session_id,
                    "workspace",
                    json={"write": [{"path": path, "content": "x"}]},
                )
                for path in ("/abs", ".", "a/../b", "serve.sh/x")
            ] + [await route(client, "POST", session_id, "reload", params={"app": "nope"})]
            write = {"write": [{"path": "ok.txt", "content": "1"}]}
            admitted = [
                await route(client, "POST", session_id, "workspace", json=write),
                await route(client, "POST", session_id, "reload"),
            ]
            spent = await route(client, "POST", session_id, "reload")
    assert [error_of(r) for r in refused] == [
        (400, "invalid_path"), (400, "invalid_path"), (400, "invalid_path"),
        (409, "path_conflict"), (404, "unknown_app"),
    ]  # fmt: skip
    assert [r.status_code for r in admitted] == [200, 202]
    assert error_of(spent) == (429, "reload_rate_limited")


NOT_RUNNING: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "workspace", {}),
    ("POST", "workspace", {"json": {"write": [{"path": "late.txt", "content": "x"}]}}),
    ("GET", "workspace/file", {"params": {"path": "kept.txt"}}),
    ("POST", "reload", {}),
    ("PUT", "apps", {"json": {"apps": [{"name": "b", "entryRelativePath": "serve.sh"}]}}),
]


async def test_idle_suspend_then_resume_restores_the_workspace(tmp_path: Path) -> None:
    overrides = {"watch": {**WATCH, "idle_seconds": 1, "reload_limit": 100}}
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        session_id = await start_watch(client)
        await wait_running(client, session_id)
        kept = {"write": [{"path": "kept.txt", "content": "written before the suspend"}]}
        assert (await route(client, "POST", session_id, "workspace", json=kept)).status_code == 200
        await wait_suspended(client, session_id)
        refused = [await route(client, m, session_id, tail, **kw) for m, tail, kw in NOT_RUNNING]
        apps = (await client.get(f"/v1/sessions/{session_id}")).json()["apps"]
        resumed = await route(client, "POST", session_id, "resume")
        again = await route(client, "POST", session_id, "resume")
        frames = await wait_frames(client, session_id, _back_up)
        content = await route(
            client, "GET", session_id, "workspace/file", params={"path": "kept.txt"}
        )
        files = (await route(client, "GET", session_id, "workspace")).json()["files"]
    for response in refused:
        assert error_of(response) == (409, "not_running"), response.text
        assert "suspended" in response.json()["message"]
    assert [a["name"] for a in apps] == ["app"]
    assert (resumed.status_code, resumed.json()) == (202, {"sessionId": session_id})
    # Once resumed it is starting or running, not suspended: a second resume is refused.
    assert error_of(again) == (404, "not_suspended")
    kinds = [f.data["status"]["kind"] for f in frames if f.event == "status"]
    assert kinds[kinds.index("suspended") :][:3] == ["suspended", "starting", "running"]
    assert content.json()["content"] == "written before the suspend"
    assert [f["path"] for f in files] == ["kept.txt", "once.sh", "serve.sh"]


def _back_up(frames: list[Any]) -> bool:
    """After the `suspended` status: `running` again and an app resumed."""
    kinds = [f.data["status"]["kind"] if f.event == "status" else None for f in frames]
    if "suspended" not in kinds:
        return False
    after = frames[kinds.index("suspended") :]
    return has_status("running")(after) and any(
        f.event == "run" and f.data["phase"] == "started" and f.data["trigger"] == "resume"
        for f in after
    )


async def test_max_watch_sessions_refuses_starts_and_resumes_but_not_suspended_ones(
    tmp_path: Path,
) -> None:
    overrides = {"watch": {**WATCH, "max_sessions": 1, "idle_seconds": 1}}
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        first = await start_watch(client)
        full = await client.post("/v1/sessions", json=watch_body())
        listed = [s["sessionId"] for s in (await client.get("/v1/sessions")).json()["sessions"]]
        run = await client.post("/v1/sessions", json={**watch_body(), "mode": "run"})
        await wait_suspended(client, first)
        second = await start_watch(client)
        await wait_running(client, second)
        blocked = await route(client, "POST", first, "resume")
        still = await status_of(client, first)
        await client.delete(f"/v1/sessions/{second}")
        resumed = await route(client, "POST", first, "resume")
        frames = await wait_frames(client, first, lambda fs: started(fs, "app", 2) is not None)
    assert error_of(full) == (409, "too_many_watch_sessions")
    assert "watch.max_sessions" in full.json()["message"]
    assert listed == [first]
    assert run.status_code == 201  # run sessions are not counted
    assert error_of(blocked) == (409, "too_many_watch_sessions")
    assert still == "suspended"
    assert resumed.status_code == 202
    event = started(frames, "app", 2)
    assert event is not None and event["trigger"] == "resume"


async def test_error_order_schema_then_budget_then_liveness_then_paths(tmp_path: Path) -> None:
    """`POST /workspace`: 400 schema → 429 → 409 → 400 invalid_path; `POST
    /reload`: 409 → 429. A stopped session has no workspace (409) and is
    not suspended (404)."""
    overrides = {"watch": {**WATCH, "idle_seconds": 1, "reload_limit": 1}}
    one = {"write": [{"path": "a.txt", "content": "1"}]}
    bad_path = {"write": [{"path": "/abs", "content": "1"}]}
    json_type = {"content-type": "application/json"}
    async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
        session_id = await start_watch(client)
        await wait_running(client, session_id)
        events = f"/v1/sessions/{session_id}/events"
        async with client.stream("GET", events, timeout=SSE_TIMEOUT) as subscribed:
            assert subscribed.status_code == 200  # a subscriber: no idle suspend meanwhile
            spend = await route(client, "POST", session_id, "workspace", json=one)
            schema = await route(
                client, "POST", session_id, "workspace", content=b"[", headers=json_type
            )
            budget = await route(client, "POST", session_id, "workspace", json=one)
            before_path = await route(client, "POST", session_id, "workspace", json=bad_path)
        await wait_suspended(client, session_id)
        budget_first = await route(client, "POST", session_id, "workspace", json=one)
        running_first = await route(client, "POST", session_id, "reload")
        await client.delete(f"/v1/sessions/{session_id}")
        stopped = await route(client, "GET", session_id, "workspace")
        not_suspended = await route(client, "POST", session_id, "resume")
    assert spend.status_code == 200
    assert error_of(schema) == (400, "invalid_request")
    assert error_of(budget) == (429, "reload_rate_limited")
    assert error_of(before_path) == (429, "reload_rate_limited")
    assert error_of(budget_first) == (429, "reload_rate_limited")
    assert error_of(running_first) == (409, "not_running")
    assert error_of(stopped) == (409, "not_running")
    assert error_of(not_suspended) == (404, "not_suspended")
