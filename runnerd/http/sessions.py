"""Session routes: start (`POST /v1/sessions`, `POST /v1/apps/{name}/sessions`),
inspect (`GET /v1/sessions/{id}`) and stop (`DELETE /v1/sessions/{id}`).

Owns the order of the start checks at the HTTP edge: schema (`parse_body`),
the `x-runnerd-terminal-size` header (the size the workload's terminal
starts with, given to the session before its workload exists; to every
`tty` app of a watch session), then terms, app, bundle/config, paths,
image, watch mode, agent, the watch-session count and the apps
(`runnerd.session.admission`, given the backend's watch io and the manager's
count of live watch sessions), then capacity (`SessionManager.start` or
`start_watch`), and a shutdown in progress. Each check raises before
anything is registered, so a rejected request changes no state;
`runnerd.http.errors` turns the exception into the answer. The 201 goes out
as soon as the session is registered, before the backend starts the
workload. `POST /v1/apps/{name}/sessions` starts run sessions only.

`GET /v1/sessions/{id}` describes either mode: `mode`, `apps` (name, io,
latest generation, ports; a run session's one app is `app`, `tty`,
generation 0) and, while a watch session has one, `agent` (its catalog
name)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from quart import Response, request
from quart_trio import QuartTrio

from runnerd.backend import RunSpec
from runnerd.contract import (
    ACCEPTED_TERMS_HEADER,
    TERMINAL_SIZE_HEADER,
    StartAppSessionRequest,
    StartSessionRequest,
    parse_body,
)
from runnerd.errors import RunnerdError
from runnerd.http.errors import json_response, read_body
from runnerd.http.io import parse_terminal_size
from runnerd.session.admission import admit, admit_app, new_session_id
from runnerd.session.watchspec import WatchSessionSpec
from runnerd.watch.apps import DEFAULT_APP_NAME

if TYPE_CHECKING:
    from runnerd.http.state import AppState
    from runnerd.session.manager import Session

log = logging.getLogger(__name__)


def session_summary(session: Session) -> dict[str, Any]:
    """`GET /v1/sessions/{id}`: `{sessionId, status, mode, agent?, apps,
    createdAt, exitedAt?}`."""
    body: dict[str, Any] = {
        "sessionId": session.id,
        "status": session.status,
        "mode": session.mode,
    }
    if session.agent_name is not None:
        body["agent"] = session.agent_name
    body["apps"] = session_apps(session)
    body["createdAt"] = session.created_at
    if session.exited_at is not None:
        body["exitedAt"] = session.exited_at
    return body


def session_apps(session: Session) -> list[dict[str, Any]]:
    """A session's apps as `GET` shows them, in declaration order. A run
    session's workload is one app `app` (`tty`, generation 0: run sessions
    count no runs) with the session's ports."""
    if session.mode == "run":
        ports = [{"port": p.port, "protocol": p.protocol} for p in session.spec.ports]
        return [{"name": DEFAULT_APP_NAME, "io": "tty", "generation": 0, "ports": ports}]
    return [
        {
            "name": channel.name,
            "io": channel.io,
            "generation": channel.generation,
            "ports": [{"port": p.port, "protocol": p.protocol} for p in channel.ports],
        }
        for channel in session.app_channels()
    ]


def fresh_session_id(state: AppState) -> str:
    """A new id no registered session holds. A collision of 60 random bits is
    all but impossible, but `SessionManager.start` refuses a duplicate, so
    picking again here keeps that from ever surfacing as a 500."""
    while True:
        session_id = new_session_id()
        if state.sessions.get(session_id) is None:
            return session_id


def requested_size() -> tuple[int, int] | None:
    """The request's `x-runnerd-terminal-size`, if it has one. Raises a 400
    `invalid_request` naming the header for a value that is not `COLSxROWS`."""
    value = request.headers.get(TERMINAL_SIZE_HEADER)
    if value is None:
        return None
    size = parse_terminal_size(value)
    if size is None:
        raise RunnerdError(
            f"{TERMINAL_SIZE_HEADER}: must be COLSxROWS, e.g. 132x43, got {value[:40]!r}",
            status_hint=400,
            code="invalid_request",
        )
    return size


def launch(
    state: AppState, spec: RunSpec | WatchSessionSpec, size: tuple[int, int] | None
) -> Response:
    """Register and start `spec`, its terminal `size` known before its
    workload (a watch session: each `tty` app's) exists; the 201
    (RegistryFull → 409, shutdown → 503)."""
    if isinstance(spec, WatchSessionSpec):
        session = state.sessions.start_watch(spec)
        for channel in session.app_channels():
            if size is not None and channel.io == "tty":
                channel.resize(*size)
    else:
        session = state.sessions.start(spec)
        if size is not None:
            session.resize(*size)
    body = {
        "sessionId": session.id,
        "streamUrl": f"/v1/sessions/{session.id}/events",
        "createdAt": session.created_at,
    }
    return json_response(body, 201)


def register_session_routes(app: QuartTrio, state: AppState) -> None:
    # No await between `fresh_session_id` and `launch`: no other request can
    # take the id in between.
    async def start_session() -> Response:
        body = parse_body(StartSessionRequest, await read_body())
        size = requested_size()
        terms = request.headers.get(ACCEPTED_TERMS_HEADER)
        spec = admit(
            body,
            state.config,
            accepted_terms=terms,
            session_id=fresh_session_id(state),
            offered=state.offered(),
            watch_io=state.backend.watch_io,
            watch_live=state.sessions.watch_live_count(),
        )
        return launch(state, spec, size)

    async def start_app_session(name: str) -> Response:
        body = parse_body(StartAppSessionRequest, await read_body())
        size = requested_size()
        terms = request.headers.get(ACCEPTED_TERMS_HEADER)
        session_id = fresh_session_id(state)
        spec = admit_app(name, body, state.config, accepted_terms=terms, session_id=session_id)
        return launch(state, spec, size)

    async def get_session(session_id: str) -> Response:
        return json_response(session_summary(await state.sessions.lookup(session_id)))

    async def delete_session(session_id: str) -> Response:
        await read_body()  # a body sent anyway: read, so the connection stays reusable
        await state.sessions.stop(session_id)  # StopFailed → 500 stop_failed
        return Response("", status=204)

    app.add_url_rule("/v1/sessions", view_func=start_session, methods=["POST"])
    app.add_url_rule("/v1/apps/<name>/sessions", view_func=start_app_session, methods=["POST"])
    app.add_url_rule("/v1/sessions/<session_id>", view_func=get_session, methods=["GET"])
    app.add_url_rule("/v1/sessions/<session_id>", view_func=delete_session, methods=["DELETE"])
