"""runnerd.kube.client on `httpx.MockTransport` (the `transport` seam) under
trio's `MockClock`: the retry classes, Retry-After, the one deadline across
retries, the 401 credentials reload, errors classified (no httpx type ever
escapes), and the apiserver requests counted in the metrics. IO-free and
in virtual time: a 30 s deadline costs nothing.

The apiserver here is a handler function: it sees each attempt as the real
one would (method, path, headers) and answers with a status, a body, or a
transport failure."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from runnerd.kube import errors
from runnerd.kube.client import KubeClient, Policy, open_kube_client
from runnerd.kube.credentials import Credentials
from runnerd.kube.exchange import BACKSTOP_S
from runnerd.kube.kubeconfig import Connection
from runnerd.metrics import Metrics, PrometheusMetrics

CONN = Connection(server="https://apiserver.test", namespace="ns", source="test", token="t0")
POLICY = Policy()  # the daemon's own defaults: 30 s deadline, 15 s read timeout
OURS = {"app.kubernetes.io/managed-by": "runnerd"}
PODS = "/api/v1/namespaces/ns/pods"
# An attempt's answer: a response (used once), a transport failure, or a
# function making a fresh response each time (a slow one: a coroutine).
Answer = (
    httpx.Response
    | Exception
    | Callable[[], httpx.Response]
    | Callable[[], Awaitable[httpx.Response]]
)


@dataclass
class Apiserver:
    """A scripted apiserver: `script` answers attempts in order (an
    exception is raised as the transport's), then `default` answers."""

    script: list[Answer] = field(default_factory=list)
    default: Answer = field(default=lambda: httpx.Response(200, json={}))
    seen: list[httpx.Request] = field(default_factory=list)
    on_request: Callable[[httpx.Request], None] | None = None

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        # No test needs more: beyond this the client loops (in virtual time).
        assert len(self.seen) <= 100, "a runaway retry loop"
        if self.on_request is not None:
            self.on_request(request)
        answer = self.script.pop(0) if self.script else self.default
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        made = answer()
        return made if isinstance(made, httpx.Response) else await made

    def calls(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.seen]


@asynccontextmanager
async def open_mock_client(
    server: Apiserver,
    *,
    conn: Connection = CONN,
    credentials: Credentials | None = None,
    metrics: Metrics | None = None,
) -> AsyncIterator[KubeClient]:
    async with open_kube_client(
        conn,
        policy=POLICY,
        credentials=credentials,
        metrics=metrics or Metrics(),
        transport=httpx.MockTransport(server),
    ) as client:
        yield client


def status(code: int, reason: str, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"kind": "Status", "status": "Failure", "reason": reason, "code": code}
    return httpx.Response(code, json=body, headers=headers)


def pod(labels: dict[str, str]) -> httpx.Response:
    return httpx.Response(200, json={"metadata": {"name": "p1", "labels": labels}})


def refused() -> httpx.ConnectError:
    return httpx.ConnectError("connection refused")


def is_ours(p: Any) -> bool:
    return bool(p["metadata"]["labels"] == OURS)


NEW_POD = {"metadata": {"name": "p1", "labels": OURS}}


# -- retry classes ------------------------------------------------------------


async def test_a_read_rides_out_every_retryable_answer_and_a_connection_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    retryable = [status(c, "x") for c in (429, 500, 502, 503, 504)]
    server = Apiserver([*retryable, refused(), httpx.ReadTimeout("slow")])
    server.default = httpx.Response(200, json={"items": [{"a": 1}], "metadata": {}})
    async with open_mock_client(server) as client:
        with trio.fail_after(600):
            items, _ = await client.list_pods(label_selector="a=b", operation="list")
    assert items == [{"a": 1}]
    assert len(server.seen) == 8


async def test_a_read_is_not_retried_on_a_refusal(autojump_clock: trio.testing.MockClock) -> None:
    server = Apiserver([status(403, "Forbidden")])
    async with open_mock_client(server) as client:
        with pytest.raises(errors.Forbidden):
            await client.list_pods(label_selector="a=b", operation="list")
    assert len(server.seen) == 1


@pytest.mark.parametrize("failure", [status(503, "ServiceUnavailable"), refused()])
async def test_a_write_without_retry_after_is_tried_once(
    autojump_clock: trio.testing.MockClock, failure: Answer
) -> None:
    server = Apiserver([failure])
    async with open_mock_client(server) as client:
        with pytest.raises(errors.KubeError):
            await client.create_pod(NEW_POD, operation="create", is_ours=is_ours)
    assert server.calls() == [f"POST {PODS}"]  # the first may have landed: no blind repeat


async def test_a_write_comes_back_when_the_server_says_retry_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Apiserver([status(503, "ServiceUnavailable", retry_after="2")])
    server.default = httpx.Response(201, json=NEW_POD)
    async with open_mock_client(server) as client:
        started = trio.current_time()
        created = await client.create_pod(NEW_POD, operation="create", is_ours=is_ours)
    assert created == NEW_POD
    assert trio.current_time() - started == pytest.approx(2.0)  # virtual time: exact
    assert server.calls() == [f"POST {PODS}"] * 2


async def test_a_delete_rides_out_failures_and_gone_is_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Apiserver([refused(), status(500, "InternalError"), status(404, "NotFound")])
    async with open_mock_client(server) as client:
        with trio.fail_after(600):
            assert await client.delete_pod("p1", operation="delete") is False
    assert server.calls() == [f"DELETE {PODS}/p1"] * 3


# -- a create that landed -------------------------------------------------------


async def test_a_409_after_a_lost_answer_is_success_when_the_pod_is_ours(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The 504 came after the write reached etcd; the retry finds the pod.
    server = Apiserver(
        [status(504, "Timeout", retry_after="1"), status(409, "AlreadyExists"), pod(OURS)]
    )
    async with open_mock_client(server) as client:
        created = await client.create_pod(NEW_POD, operation="create", is_ours=is_ours)
    assert created["metadata"]["labels"] == OURS
    assert server.calls() == [f"POST {PODS}", f"POST {PODS}", f"GET {PODS}/p1"]


async def test_a_409_for_someone_elses_pod_is_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Apiserver([status(409, "AlreadyExists"), pod({"other": "x"})])
    async with open_mock_client(server) as client:
        with pytest.raises(errors.AlreadyExists) as caught:
            await client.create_pod(NEW_POD, operation="create", is_ours=is_ours)
    assert str(caught.value) == (
        "create: the Kubernetes API rejected the request (AlreadyExists, HTTP 409)"
    )


# -- Retry-After and the one deadline --------------------------------------------


@pytest.mark.parametrize(("retry_after", "waited_s"), [("3", 3.0), ("0", 0.0), ("25", 10.0)])
async def test_a_read_waits_as_long_as_retry_after_says_up_to_the_cap(
    autojump_clock: trio.testing.MockClock, retry_after: str, waited_s: float
) -> None:
    server = Apiserver([status(429, "TooManyRequests", retry_after=retry_after)])
    async with open_mock_client(server) as client:
        started = trio.current_time()
        assert await client.get_pod("p1", operation="read") == {}
    assert trio.current_time() - started == pytest.approx(waited_s)
    assert len(server.seen) == 2


async def test_a_retry_after_past_the_deadline_fails_now(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Apiserver(default=lambda: status(503, "ServiceUnavailable", retry_after="10"))
    async with open_mock_client(server) as client:
        started = trio.current_time()
        with trio.fail_after(600), pytest.raises(errors.ServerError):
            await client.get_pod("p1", operation="read")
    # 0, 10, 20 s; a wait to 30 s would reach the deadline: no fourth try.
    assert len(server.seen) == 3
    assert trio.current_time() - started == pytest.approx(20.0)


async def test_a_server_that_keeps_failing_slowly_ends_at_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_503() -> httpx.Response:
        await trio.sleep(20)  # past the read timeout, as a stalled apiserver
        return status(503, "ServiceUnavailable")

    server = Apiserver(default=slow_503)
    async with open_mock_client(server) as client:
        started = trio.current_time()
        with trio.fail_after(600), pytest.raises(errors.Unreachable) as caught:
            await client.list_pods(label_selector="a=b", operation="could not list pods")
    elapsed = trio.current_time() - started
    # One deadline across the retries, not retries x 20 s.
    assert POLICY.deadline_s <= elapsed <= POLICY.deadline_s + BACKSTOP_S + 1e-6
    assert len(server.seen) == 2
    assert str(caught.value) == "could not list pods: the Kubernetes API could not be reached"


async def test_a_silent_server_cannot_hold_a_call_past_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def silent() -> httpx.Response:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    server = Apiserver(default=silent)
    async with open_mock_client(server) as client:
        started = trio.current_time()
        with trio.fail_after(600), pytest.raises(errors.Unreachable):
            await client.get_pod("p1", operation="read")
    assert trio.current_time() - started <= POLICY.deadline_s + BACKSTOP_S + 1e-6
    assert len(server.seen) == 1


async def test_a_call_whose_deadline_is_spent_makes_no_further_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A 401 is retried at once, without a pause: one answered just past the
    # deadline (within the backstop) left a retry with negative timeouts,
    # which httpcore refuses with a ValueError (as a backoff that oversleeps
    # on a loaded machine did: tests/kube/test_client.py met it).
    async def late_401() -> httpx.Response:
        await trio.sleep(POLICY.deadline_s + BACKSTOP_S / 2)
        return status(401, "Unauthorized")

    timeouts: list[float] = []

    def record(request: httpx.Request) -> None:
        timeouts.extend(v for v in request.extensions["timeout"].values() if v is not None)

    server = Apiserver([late_401], on_request=record)
    async with open_mock_client(server) as client:
        with trio.fail_after(600), pytest.raises(errors.Unreachable) as caught:
            await client.get_pod("p1", operation="could not read the pod")
    assert server.calls() == [f"GET {PODS}/p1"]
    assert min(timeouts) > 0
    assert str(caught.value) == "could not read the pod: the Kubernetes API could not be reached"
    assert isinstance(caught.value.__cause__, errors.Unauthorized)


# -- 401: the credentials re-read once --------------------------------------------


def token_conn(tmp_path: Path, token: str) -> Connection:
    token_file = tmp_path / "token"
    token_file.write_text(token)
    return Connection(server=CONN.server, namespace="ns", source="test", token_file=token_file)


def rotate_on_401(token_file: Path, new_token: str) -> Callable[[httpx.Request], None]:
    def on_request(request: httpx.Request) -> None:
        token_file.write_text(new_token)  # the kubelet rotated it after the first read

    return on_request


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_401_rereads_the_token_once_then_succeeds(
    mock_clock: trio.testing.MockClock, tmp_path: Path, method: str
) -> None:
    # No autojump: the token file is read in a thread, and the retry has no wait.
    conn = token_conn(tmp_path, "stale")
    server = Apiserver([status(401, "Unauthorized")], default=httpx.Response(201, json=NEW_POD))
    server.on_request = rotate_on_401(tmp_path / "token", "fresh")
    async with open_mock_client(server, conn=conn) as client:
        if method == "GET":
            await client.get_pod("p1", operation="read")
        else:
            await client.create_pod(NEW_POD, operation="create", is_ours=is_ours)
    assert [r.headers["authorization"] for r in server.seen] == ["Bearer stale", "Bearer fresh"]


async def test_a_second_401_is_raised_without_the_token(
    mock_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    conn = token_conn(tmp_path, "revoked-token")
    server = Apiserver(default=lambda: status(401, "Unauthorized"))
    async with open_mock_client(server, conn=conn) as client:
        with pytest.raises(errors.Unauthorized) as caught:
            await client.get_pod("p1", operation="read")
    assert len(server.seen) == 2  # one re-read and retry, then the error
    assert "revoked-token" not in str(caught.value)


# -- errors classified -------------------------------------------------------------


class Chunks(httpx.AsyncByteStream):
    """A body sent chunk by chunk, then cut (a connection reset) if `cut`.
    An iterator object, not a generator, so a reader that stops early leaves
    nothing to finalise."""

    def __init__(self, *chunks: bytes, cut: bool = True) -> None:
        self.chunks, self.cut = chunks, cut

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _ChunkReader(list(self.chunks), self.cut)


class _ChunkReader:
    def __init__(self, chunks: list[bytes], cut: bool) -> None:
        self.chunks, self.cut = chunks, cut

    def __aiter__(self) -> _ChunkReader:
        return self

    async def __anext__(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.cut:
            raise httpx.ReadError("connection reset by peer")
        raise StopAsyncIteration


# A body that says gzip and is not.
GARBLED = httpx.Response(
    200, headers={"Content-Encoding": "gzip"}, stream=Chunks(b"not gzip", cut=False)
)


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (refused(), errors.Unreachable),
        (httpx.RemoteProtocolError("server disconnected"), errors.Unreachable),
        (httpx.Response(200, content=b"<html>proxy</html>"), errors.ServerError),
        (GARBLED, errors.ServerError),
        (httpx.Response(500, stream=Chunks(b'{"kind":')), errors.Unreachable),
        (httpx.Response(418, text="teapot"), errors.KubeError),
    ],
    ids=["refused", "protocol", "not-json", "bad-gzip", "error-body-cut", "odd-status"],
)
async def test_every_failure_is_a_kube_error(
    autojump_clock: trio.testing.MockClock, answer: Answer, kind: type[errors.KubeError]
) -> None:
    server = Apiserver([answer])
    async with open_mock_client(server) as client:
        with trio.fail_after(600), pytest.raises(errors.KubeError) as caught:
            await client.create_pod(NEW_POD, operation="create", is_ours=is_ours)
    assert type(caught.value) is kind
    assert str(caught.value).startswith("create: ")


async def test_a_watch_that_breaks_or_cannot_open_raises_kube_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    event = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "p1"}}}).encode()
    server = Apiserver(
        [httpx.Response(200, stream=Chunks(event + b"\n"))],
        default=lambda: httpx.Response(503, stream=Chunks(b"{")),
    )
    async with open_mock_client(server) as client:
        seen: list[dict[str, Any]] = []
        with pytest.raises(errors.Unreachable):
            async with client.open_watch(PODS, {}, operation="watch") as events:
                async for item in events:
                    seen.append(item)
        assert seen == [json.loads(event)]
        # Every reopen is cut mid-answer: retried as a read, to the deadline.
        with trio.fail_after(600), pytest.raises(errors.Unreachable):
            async with client.open_watch(PODS, {}, operation="watch"):
                raise AssertionError("opened")


# -- metrics -------------------------------------------------------------------------


def apiserver_samples(metrics: PrometheusMetrics) -> Iterator[tuple[str, dict[str, str], float]]:
    text = metrics.render()[0].decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("runnerd_kube_apiserver_request"):
                yield sample.name, sample.labels, sample.value


async def test_every_attempt_is_counted_by_verb_code_and_class(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_ok() -> httpx.Response:
        await trio.sleep(2)
        return httpx.Response(200, json={"items": []})

    server = Apiserver([status(503, "ServiceUnavailable"), refused(), slow_ok])
    server.default = status(404, "NotFound")
    metrics = PrometheusMetrics()
    async with open_mock_client(server, metrics=metrics) as client:
        await client.list_pods(label_selector="a=b", operation="list")
        assert await client.get_pod("p1", operation="read") is None
    samples = list(apiserver_samples(metrics))
    counted = {
        (labels["verb"], labels["code"], labels["class"]): value
        for name, labels, value in samples
        if name == "runnerd_kube_apiserver_requests_total"
    }
    assert counted == {
        ("list", "503", "server_error"): 1,
        ("list", "none", "unreachable"): 1,
        ("list", "200", "ok"): 1,
        ("get", "404", "not_found"): 1,
    }
    latency = {
        (name, labels["verb"]): value
        for name, labels, value in samples
        if name.endswith(("_count", "_sum"))
    }
    assert latency[("runnerd_kube_apiserver_request_seconds_count", "list")] == 3
    # The answer took 2 s; the failures and the backoff between them are not in it.
    assert latency[("runnerd_kube_apiserver_request_seconds_sum", "list")] == pytest.approx(2.0)
