"""Property: no request a client can send gets a 5xx or kills the daemon.

Bodies, content types, paths, query cursors and headers are generated
(`tests.fuzz.strategies`) and sent to a real daemon over its UNIX socket
and its TCP listener. Every answer is either a success or a JSON error body
with a 4xx status; after every example the daemon is alive and has logged
no traceback.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import FuzzDaemon
from tests.fuzz.strategies import BODY, CURSOR, FUZZ, HEADER_TEXT, TEXT

POST_ROUTES = ["/v1/sessions", "/v1/apps/hello/sessions", "/v1/apps/%00x/sessions", "/v1/probe"]
CONTENT_TYPES = st.one_of(
    st.sampled_from(
        ["application/json", "application/json; charset=utf-8", "text/plain", "", "a/b"]
    ),
    HEADER_TEXT,
)


def assert_clean(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/json", response.headers
        body = response.json()
        assert isinstance(body["error"], str) and isinstance(body["message"], str)


@FUZZ
@given(route=st.sampled_from(POST_ROUTES), body=BODY, content_type=CONTENT_TYPES)
def test_fuzz_request_bodies(
    fuzz_daemon: FuzzDaemon, route: str, body: bytes, content_type: str
) -> None:
    client = fuzz_daemon.http
    response = client.post(route, content=body, headers={"content-type": content_type})
    assert_clean(response)
    if response.status_code == 201:  # never expected: no generated image is a runtime
        client.delete(f"/v1/sessions/{response.json()['sessionId']}")
    fuzz_daemon.assert_alive()


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "DELETE", "PUT", "OPTIONS", "PATCH"]),
    segments=st.lists(TEXT, max_size=4),
    cursor=CURSOR,
)
def test_fuzz_paths_methods_and_cursors(
    fuzz_daemon: FuzzDaemon, method: str, segments: list[str], cursor: str
) -> None:
    path = "/v1/" + "/".join(quote(s.encode("utf-8", "surrogatepass"), safe="") for s in segments)
    headers = {"last-event-id": cursor, "content-type": "application/json"}
    client = fuzz_daemon.http
    for url in (path, f"{path}?lastEventId={quote(cursor)}&lastSeq={quote(cursor)}"):
        assert_clean(client.request(method, url, headers=headers))
    events = client.get(f"/v1/sessions/nosuchsession/events?lastEventId={quote(cursor)}")
    assert events.status_code == 404 and events.json()["error"] == "not_found"
    fuzz_daemon.assert_alive()


@FUZZ
@given(host=HEADER_TEXT, origin=st.one_of(st.none(), HEADER_TEXT), terms=HEADER_TEXT)
def test_fuzz_edge_headers_over_tcp(
    fuzz_daemon: FuzzDaemon, host: str, origin: str | None, terms: str
) -> None:
    headers = {"host": host, "x-telo-accepted-terms": terms}
    if origin is not None:
        headers["origin"] = origin
    client = fuzz_daemon.tcp
    for response in (
        client.get("/v1/health", headers=headers),
        client.post("/v1/probe", json={"config": {}}, headers=headers),
        client.options(
            "/v1/sessions", headers={**headers, "access-control-request-method": "POST"}
        ),
    ):
        assert_clean(response)
        assert response.status_code != 403 or response.json()["error"] in (
            "forbidden_host", "forbidden_origin",
        )  # fmt: skip
    fuzz_daemon.assert_alive()
