"""Counting at the HTTP edge: answers by route, live SSE readers and their gaps.

Owns the glue between the routes and `runnerd.metrics.Metrics`: an
`after_request` hook labelling each answer with its route template (never
the raw path: session ids would make every series unique; an unknown route
is `unmatched`, an unknown method `other`), and a wrapper
that counts an SSE stream as a live subscriber for as long as it is being
sent, and each `gap` frame it sends. The WebSocket route counts its own
(runnerd.http.io).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from quart import Response, request
from quart_trio import QuartTrio

from runnerd.http.events import GAP_FRAME
from runnerd.metrics import Metrics

# Any other method a client sends is counted as "other": labels stay a small set.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def register_request_counting(app: QuartTrio, metrics: Metrics) -> None:
    if not metrics.enabled:
        return

    async def count(response: Response) -> Response:
        rule = request.url_rule
        route = rule.rule if rule is not None else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        metrics.http_request(route, method, response.status_code)
        return response

    app.after_request(count)


async def counted_sse(frames: AsyncIterator[bytes], metrics: Metrics) -> AsyncIterator[bytes]:
    """`frames`, with the reader counted live until the stream ends or is dropped
    (closing `frames` then too)."""
    with metrics.subscriber("sse"):
        try:
            async for frame in frames:
                if frame == GAP_FRAME:
                    metrics.replay_gap("sse")
                yield frame
        finally:
            aclose = getattr(frames, "aclose", None)
            if aclose is not None:
                await aclose()
