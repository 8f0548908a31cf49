"""The quart-trio application: `create_app`.

Owns the wiring of the HTTP edge: framework settings (body limit, no
response timeout for streams, no background-task grace), JSON error bodies,
CORS, and the route modules under `runnerd.http`. A new app object per call:
a quart app can only go through lifespan startup once.

What the routes share is `runnerd.http.state.AppState`, a protocol: the
edge never imports the daemon that satisfies it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quart.routing import QuartRule
from quart_trio import QuartTrio

from runnerd.http.cors import register_cors
from runnerd.http.counting import register_request_counting
from runnerd.http.errors import register_error_handlers
from runnerd.http.events import DEFAULT_HEARTBEAT_S, register_events_route
from runnerd.http.guard import register_guard
from runnerd.http.io import register_io_route
from runnerd.http.listing import register_listing_route
from runnerd.http.meta import register_meta_routes
from runnerd.http.sessions import register_session_routes
from runnerd.http.state import AppState
from runnerd.http.workspace import register_workspace_routes


class LazyBuildRule(QuartRule):
    """A route whose URL builders are compiled at their first use.

    werkzeug compiles two per rule when the rule is added (from an AST, for
    `url_for`): 36 `compile()` calls, ~15 ms of every start before the first
    answer (bench/README.md, "Start"), for URLs runnerd never builds from
    its routes. Matching is untouched; a URL built is the one werkzeug's own
    builder builds (it is that builder, compiled then).
    """

    def _compile_builder(self, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        compiled: Callable[..., tuple[str, str]] | None = None

        def build(rule: QuartRule, **values: Any) -> tuple[str, str]:
            nonlocal compiled
            if compiled is None:
                compiled = QuartRule._compile_builder(rule, append_unknown)
            return compiled(rule, **values)

        return build


def create_app(state: AppState, *, sse_heartbeat_s: float = DEFAULT_HEARTBEAT_S) -> QuartTrio:
    """A new quart-trio app serving the `/v1` contract from `state`.

    `sse_heartbeat_s` is the SSE `: heartbeat` interval (the contract's 20 s);
    tests pass a short one.
    """
    app = QuartTrio("runnerd")
    app.url_rule_class = LazyBuildRule  # before the first route is added
    app.config["MAX_CONTENT_LENGTH"] = state.config.server.max_body_bytes
    # Streams end on their own (terminal status, shutdown); a response timeout
    # would cut a live SSE stream.
    app.config["RESPONSE_TIMEOUT"] = None
    # Nothing of ours runs in app.nursery; do not hold shutdown for it.
    app.config["BACKGROUND_TASK_SHUTDOWN_TIMEOUT"] = None
    # A body that trickles in is cut (408) after this; the headers' deadline
    # is the server's (`runnerd.http.server`).
    app.config["BODY_TIMEOUT"] = state.config.server.request_timeout_s
    # `//` in a path is a 404 like any unknown path, not a 308 HTML redirect.
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = False

    register_error_handlers(app, max_body_bytes=state.config.server.max_body_bytes)
    register_guard(app, lambda: state.config)  # first: before any other hook or route
    register_cors(app, lambda: state.config)
    register_request_counting(app, state.metrics)
    register_meta_routes(app, state)
    register_session_routes(app, state)
    register_listing_route(app, state)
    register_workspace_routes(app, state)
    register_events_route(app, state, heartbeat_s=sse_heartbeat_s)
    register_io_route(app, state)
    return app
