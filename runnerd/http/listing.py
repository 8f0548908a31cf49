"""`GET /v1/sessions`: every registered session, a runnerd extension.

Owns the list `runnerd ls` (and any client that lost a session id) needs.
Not part of the upstream `/v1` contract: the OpenAPI document marks it with
`x-runnerd-extension`. Each entry says what a user recognises a session by
(status, age, image or app, ports) and where its two replay cursors stand,
so a client can read "everything so far" without waiting on a timer. A
watch session (`mode`, `apps`, `agent` as its `GET` has them) lists every
app's ports as its `ports`, and each app's own output cursor as
`apps[].lastOutputSeq` (its `/io?app=` ring; the session's `lastOutputSeq`
is then 0: it has no session-wide output).

Never listed: env (it may hold a catalog secret) and an app session's image
(the catalog's, which no client may read; the app name stands for it).

The answer carries the daemon's request body limit in the header
`x-runnerd-max-body-bytes`, so a client can refuse an oversized bundle before
sending it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quart import Response
from quart_trio import QuartTrio

from runnerd.http.errors import json_response
from runnerd.http.sessions import session_summary

if TYPE_CHECKING:
    from runnerd.http.state import AppState
    from runnerd.session.manager import Session

MAX_BODY_HEADER = "x-runnerd-max-body-bytes"


def session_entry(session: Session) -> dict[str, Any]:
    """One list entry: `{sessionId, status, mode, agent?, apps, createdAt,
    exitedAt?, image | app, ports, lastEventId, lastOutputSeq}`."""
    spec = session.spec
    entry = session_summary(session)
    if spec.app is not None:
        entry["app"] = spec.app
    elif session.image is not None:
        entry["image"] = session.image
    entry["ports"] = [{"port": p.port, "protocol": p.protocol} for p in spec.ports]
    if session.mode == "watch":
        channels = session.app_channels()
        entry["ports"] = [port for app in entry["apps"] for port in app["ports"]]
        for app, channel in zip(entry["apps"], channels, strict=True):
            app["lastOutputSeq"] = channel.ring.published
    # What a reader can be given now (`published`): ids above it may still
    # be held back, their reservation not yet on disk.
    entry["lastEventId"] = session.events.published
    entry["lastOutputSeq"] = session.pty.published
    return entry


def register_listing_route(app: QuartTrio, state: AppState) -> None:
    async def list_sessions() -> Response:
        body = {"sessions": [session_entry(s) for s in state.sessions.sessions()]}
        response = json_response(body)
        response.headers[MAX_BODY_HEADER] = str(state.config.server.max_body_bytes)
        return response

    app.add_url_rule("/v1/sessions", view_func=list_sessions, methods=["GET"])
