"""Watch sessions' own routes: the workspace, reload, the app set, resume.

Owns, under `/v1/sessions/{id}/`: `GET workspace` (the listing), `POST
workspace` (a change set), `GET workspace/file` (one file), `POST
reload[?app=]`, `PUT apps` and `POST resume`, with the contract's bodies,
statuses and the order of their errors. The workspace, reload and apps
routes first answer `404 not_found` (unknown id) and then `409
not_a_watch_session` (a run session); then each its own, in the contract's
order:

- `POST workspace`: schema (400 invalid_request, strict base64) → budget
  (429 reload_rate_limited) → liveness (409 not_running) → paths (400
  invalid_path, refusing the set whole) → applied (200 {written, deleted}).
- `GET workspace/file`: 409 not_running → 400 invalid_path (`path` missing
  or bad) → 400 invalid_request (`encoding`) → 404 file_not_found.
- `POST reload`: 409 not_running → 429 reload_rate_limited → 404
  unknown_app → 202 {reloaded}.
- `PUT apps`: schema → 409 not_running → the app checks of `POST
  /v1/sessions` (check 10) → 202 {apps}.
- `POST resume`: 404 not_suspended (unknown, a run session, not suspended)
  → 409 too_many_watch_sessions → 202 {sessionId}.

Every refusal raises before the session is touched, and the budget gives
back an admission a later check refused (it counts only requests that
passed every check), so a refused request changes no state;
`runnerd.http.errors` turns the exception into the answer. With
watch sessions off there are no watch sessions, so these answer with their
route errors only (404, 409 not_a_watch_session, 404 not_suspended).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from runnerd.contract import ReplaceAppsRequest, parse_body
from runnerd.http.errors import json_response, read_body
from runnerd.session.paths import normalise_bundle_path
from runnerd.watch.apps import build_app_set
from runnerd.watch.changes import normalise_change_set, parse_change_set
from runnerd.watch.errors import WatchError
from runnerd.watch.paths import parse_file_query

if TYPE_CHECKING:
    from runnerd.http.state import AppState
    from runnerd.session.session import Session


async def watch_session(state: AppState, session_id: str) -> Session:
    """The watch session `session_id`, after the shared errors.

    Raises:
        SessionNotFound: `404 not_found`.
        WatchError: `409 not_a_watch_session` for a run session.
    """
    session = await state.sessions.lookup(session_id)
    if session.mode != "watch":
        raise WatchError(
            409,
            "not_a_watch_session",
            f"session {session_id} is a run session; this route serves watch sessions "
            "(POST /v1/sessions with mode 'watch')",
        )
    return session


def register_workspace_routes(app: QuartTrio, state: AppState) -> None:
    async def list_workspace(session_id: str) -> Response:
        session = await watch_session(state, session_id)
        files = await session.list_workspace()
        return json_response({"files": [{"path": f.path, "hash": f.hash} for f in files]})

    # The body is read before the shared checks (so no answer leaves it
    # unread on a kept-alive connection) and parsed after them.
    async def change_workspace(session_id: str) -> Response:
        raw = await read_body()
        session = await watch_session(state, session_id)
        changes = parse_change_set(raw)
        with session.reload_budget():  # given back if a check below refuses
            session.require_running()
            written, deleted = await session.apply_changes(normalise_change_set(changes))
        return json_response({"written": written, "deleted": deleted})

    async def read_file(session_id: str) -> Response:
        session = await watch_session(state, session_id)
        session.require_running()
        path, encoding = parse_file_query(request.args.get("path"), request.args.get("encoding"))
        data = await session.read_workspace_file(path)
        if encoding == "base64":
            content = base64.b64encode(data).decode("ascii")
        else:
            content = data.decode("utf-8", errors="replace")
        return json_response({"content": content, "size": len(data)})

    # The bodyless routes read what a client may send anyway (an editor's
    # `{}`) before answering, so the connection stays reusable instead of
    # being closed with unread bytes in it (a reset that can cost the
    # client the answer).
    async def reload(session_id: str) -> Response:
        await read_body()
        session = await watch_session(state, session_id)
        session.require_running()
        with session.reload_budget():  # given back for an unknown app
            reloaded = session.reload(request.args.get("app"))
        return json_response({"reloaded": reloaded}, 202)

    async def replace_apps(session_id: str) -> Response:
        raw = await read_body()
        session = await watch_session(state, session_id)
        body = parse_body(ReplaceAppsRequest, raw)
        session.require_running()
        apps = build_app_set(
            body.apps, io_offered=state.backend.watch_io, normalise_entry=normalise_bundle_path
        )
        return json_response({"apps": await session.replace_apps(apps)}, 202)

    async def resume(session_id: str) -> Response:
        await read_body()
        await state.sessions.resume(session_id)
        return json_response({"sessionId": session_id}, 202)

    base = "/v1/sessions/<session_id>"
    app.add_url_rule(f"{base}/workspace", view_func=list_workspace, methods=["GET"])
    app.add_url_rule(f"{base}/workspace", view_func=change_workspace, methods=["POST"])
    app.add_url_rule(f"{base}/workspace/file", view_func=read_file, methods=["GET"])
    app.add_url_rule(f"{base}/reload", view_func=reload, methods=["POST"])
    app.add_url_rule(f"{base}/apps", view_func=replace_apps, methods=["PUT"])
    app.add_url_rule(f"{base}/resume", view_func=resume, methods=["POST"])
