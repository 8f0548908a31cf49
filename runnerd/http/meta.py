"""Routes about the runner itself: health, capabilities, probe, OpenAPI.

`/v1/health` never touches the backend. `/v1/capabilities` is re-resolved
from the live config on every request (a reload changes it at once); its
`features` name the backend's watch io when watch sessions are on.
`/v1/probe` applies the same image gate as a session start before asking the
backend, so it never reports an image a client cannot run. The OpenAPI
document is built on its first request (`runnerd.http.openapi`), not at start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from runnerd.backend import ImageSpec
from runnerd.config.images import check_image
from runnerd.contract import ProbeRequest, parse_body, unavailable
from runnerd.http.errors import json_response, read_body
from runnerd.session.capabilities import build_capabilities

if TYPE_CHECKING:
    from runnerd.http.state import AppState


def register_meta_routes(app: QuartTrio, state: AppState) -> None:
    async def health() -> Response:
        return json_response({"ok": True, "version": state.version})

    async def capabilities() -> Response:
        backend = state.backend
        # `description` is optional on a backend (the local one's is the
        # default's "on this host"), so it is not part of the Protocol.
        own = getattr(backend, "description", None)
        document = build_capabilities(
            state.config,
            state.offered(),
            backend.notices,
            backend.watch_io,
            own if isinstance(own, str) else None,
        )
        return json_response(document)

    async def probe() -> Response:
        body = parse_body(ProbeRequest, await read_body())
        # The start gate first: a probe answers what a start would do, and an
        # image a session may not pick (a catalog app's, say) is never probed,
        # so its existence does not leak.
        problem = check_image(state.config, body.config.image, state.offered())
        if problem is not None:
            return json_response(unavailable(problem))
        image = ImageSpec(image=body.config.image, pull_policy=body.config.pullPolicy)
        return json_response(await state.backend.probe(image))

    # Built on the first request, not at start: the document (and msgspec's
    # schema generation) costs ~6 ms of a start no client waits on, and most
    # daemons never serve it. It is immutable once built, so it is kept.
    openapi_document: dict[str, object] = {}

    async def openapi() -> Response:
        if not openapi_document:
            from runnerd.http.openapi import build_openapi

            openapi_document.update(build_openapi(state.version))
        return json_response(openapi_document)

    app.add_url_rule("/v1/health", view_func=health, methods=["GET"])
    app.add_url_rule("/v1/capabilities", view_func=capabilities, methods=["GET"])
    app.add_url_rule("/v1/probe", view_func=probe, methods=["POST"])
    app.add_url_rule("/v1/openapi.json", view_func=openapi, methods=["GET"])
