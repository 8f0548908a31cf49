"""Counting at the HTTP edge: every answer, by route, method and status.

Owns the `after_request` hook that counts every HTTP answer in
`runnerd.metrics.Metrics`, labelled with its route template (never the raw
path: session ids would make every series unique; an unknown route is
`unmatched`, an unknown method `other`). The streams count their own
subscribers and gaps (runnerd.http.events, runnerd.http.io).
"""

from __future__ import annotations

from quart import Response, request
from quart_trio import QuartTrio

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
