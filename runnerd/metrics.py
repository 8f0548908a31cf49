"""Operational metrics: the one interface every counting site calls, and its
Prometheus implementation.

Owns `Metrics`, a tiny interface with one method per thing worth counting,
called at the few places it happens (a session reaching `running` or ending
before it, a start failure, a stream subscriber, PTY bytes, a replay gap, an
HTTP answer, a listener at its connection cap, and, for the Kubernetes
backend, apiserver requests, watch restarts, re-lists and attach reconnects:
those series exist only once that backend called `add_kube_series`, so a
local daemon exports none of them).
The base class counts nothing: it is what runs when the operator left
`[metrics]` off, so counting costs a no-op call and prometheus_client is
never imported.

`PrometheusMetrics` keeps one `CollectorRegistry` (never the library's
global one: a second daemon in the same process, as in tests, must not see
the first one's counts) with the process collector, and renders it in the
Prometheus text format for `GET /metrics` (`metrics_asgi_app`). Sessions by
status are read from the session registry at scrape time, not counted, so
that gauge can never drift. PTY byte counts are plain integers read at
scrape time too: the hot output path pays an addition, not a lock.

The daemon builds the one `Metrics` (`runnerd.daemon.main.build_metrics`) before
the backend, so a backend that counts (the Kubernetes one: apiserver
requests, watches, attaches) is handed the same object (`open_backend`'s
`metrics`) and its figures land in the same registry. No counter exports a
`*_created` series. The metric names and what they mean are listed in the
README ("Metrics").
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram
    from prometheus_client.registry import Collector

STATUSES = ("starting", "running", "exited", "failed", "stopped")
# A watch session is never `exited`; `suspended` is its own.
WATCH_STATUSES = ("starting", "running", "suspended", "failed", "stopped")
TRIGGERS = ("initial", "watch", "manual", "resume")
# POST → running: from a few ms (local) to minutes (an image pull on a cluster).
START_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
APISERVER_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    """What runnerd counts. This base counts nothing (metrics off)."""

    enabled = False

    def session_started(self, backend: str, outcome: str) -> None:
        """A session's start ended: `running`, or the terminal kind it reached first."""

    def start_latency(self, backend: str, seconds: float) -> None:
        """Seconds from the POST (registration) to `running`."""

    def start_failed(self, stage: str) -> None:
        """A start failed at `stage` (the `<stage>:` prefix of its failure message)."""

    @contextlib.contextmanager
    def subscriber(self, channel: str) -> Iterator[None]:
        """A live stream reader for the block: channel `sse` or `websocket`."""
        yield

    def pty_bytes(self, direction: str, count: int) -> None:
        """PTY bytes relayed: `output` (workload → replay ring) or `input` (stdin)."""

    def replay_gap(self, channel: str) -> None:
        """A reader was told that part of the replay was evicted (`sse`, `websocket`)."""

    def http_request(self, route: str, method: str, status: int) -> None:
        """One HTTP answer; `route` is the route's template, never the raw path."""

    def watch_sessions(self, statuses: Callable[[], Iterable[str]]) -> None:
        """Where the sessions-by-status gauge reads its figures at scrape time."""

    def watch_session_statuses(self, statuses: Callable[[], Iterable[str]]) -> None:
        """Where the watch-sessions-by-status gauge reads its figures at scrape time."""

    def app_restart(self, trigger: str) -> None:
        """A watch session's app started a generation, by its `run` trigger."""

    def watch_suspend(self) -> None:
        """A watch session was suspended (idle)."""

    def watch_resume(self) -> None:
        """A suspended watch session was resumed."""

    def workspace_writes(self, written: int, deleted: int) -> None:
        """A `POST /workspace` applied: files written and paths deleted."""

    def connection_cap(self, listener: str, action: str) -> None:
        """A listener reached its connection cap: `evicted` (its longest-idle
        connection was closed to make room) or `queued` (every connection
        busy: new clients wait in the backlog)."""

    # -- the Kubernetes backend ---------------------------------------------

    def apiserver_request(self, verb: str, code: str, error_class: str, seconds: float) -> None:
        """One apiserver request: verb, HTTP code, the classifier's class, duration."""

    def watch_restart(self, resource: str, reason: str) -> None:
        """A watch on `resource` ended and was started again."""

    def relist(self, resource: str) -> None:
        """A watch could not resume (410 Gone) and listed `resource` again."""

    def attach_reconnect(self) -> None:
        """An attach to a session pod was re-established after it dropped."""

    def add_kube_series(self) -> None:
        """The Kubernetes backend is in use: register its series (at 0).
        Called once, by that backend, before anything counts through it."""


NULL_METRICS = Metrics()


class PrometheusMetrics(Metrics):
    """`Metrics` on a private prometheus_client registry (module docstring)."""

    enabled = True

    def __init__(self) -> None:
        from prometheus_client import (
            CollectorRegistry,
            PlatformCollector,
            ProcessCollector,
            disable_created_metrics,
        )

        # No `*_created` series: a counter's creation time is the process's
        # start (process_start_time_seconds says it), and each doubled the
        # scrape. The switch is process-wide; runnerd never wants them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._add_session_metrics()
        self._kube_added = False
        for channel in ("sse", "websocket"):
            self._subscribers.labels(channel)  # present at 0 from the first scrape
        self._pty: MutableMapping[str, int] = {"output": 0, "input": 0}
        self._statuses: Callable[[], Iterable[str]] = tuple
        self._watch_statuses: Callable[[], Iterable[str]] = tuple
        for trigger in TRIGGERS:
            self._app_restarts.labels(trigger)  # present at 0 from the first scrape
        for change in ("written", "deleted"):
            self._workspace.labels(change)
        self.registry.register(_ScrapeTimeCollector(self))

    def _counter(self, name: str, text: str, *labels: str) -> Counter:
        from prometheus_client import Counter

        return Counter(name, text, labels, registry=self.registry)

    def _histogram(
        self, name: str, text: str, buckets: tuple[float, ...], *labels: str
    ) -> Histogram:
        from prometheus_client import Histogram

        return Histogram(name, text, labels, buckets=buckets, registry=self.registry)

    def _add_session_metrics(self) -> None:
        from prometheus_client import Gauge

        self._starts = self._counter(
            "runnerd_session_starts",
            "Session starts by how they ended (running, or the terminal status reached first)",
            "backend", "outcome",
        )  # fmt: skip
        self._latency = self._histogram(
            "runnerd_session_start_seconds", "POST to running", START_BUCKETS_S, "backend"
        )
        self._failures = self._counter("runnerd_session_start_failures", "Start failures", "stage")
        self._subscribers = Gauge(
            "runnerd_stream_subscribers", "Live stream readers", ["channel"], registry=self.registry
        )
        self._gaps = self._counter("runnerd_replay_gaps", "Replay gaps served", "channel")
        self._http = self._counter(
            "runnerd_http_requests", "HTTP answers", "route", "method", "status"
        )
        self._app_restarts = self._counter(
            "runnerd_watch_app_generations", "Watch-session app generations started", "trigger"
        )
        self._suspends = self._counter("runnerd_watch_suspends", "Watch sessions suspended idle")
        self._resumes = self._counter("runnerd_watch_resumes", "Watch sessions resumed")
        self._workspace = self._counter(
            "runnerd_watch_workspace_paths", "Workspace paths changed through the API", "change"
        )
        self._at_cap = self._counter(
            "runnerd_connection_cap_reached",
            "Times a listener reached its connection cap, by what it did",
            "listener", "action",
        )  # fmt: skip

    def add_kube_series(self) -> None:
        if self._kube_added:
            return
        self._kube_added = True
        self._kube_requests = self._counter(
            "runnerd_kube_apiserver_requests", "Apiserver requests", "verb", "code", "class"
        )
        self._kube_latency = self._histogram(
            "runnerd_kube_apiserver_request_seconds", "Apiserver request latency",
            APISERVER_BUCKETS_S, "verb",
        )  # fmt: skip
        self._watch_restarts = self._counter(
            "runnerd_kube_watch_restarts", "Watch restarts", "resource", "reason"
        )
        self._relists = self._counter("runnerd_kube_relists", "Re-lists after a 410", "resource")
        self._reconnects = self._counter("runnerd_kube_attach_reconnects", "Attach reconnects")
        self._relists.labels("pods")  # the one watched resource: at 0 from the first scrape

    def session_started(self, backend: str, outcome: str) -> None:
        self._starts.labels(backend, outcome).inc()

    def start_latency(self, backend: str, seconds: float) -> None:
        self._latency.labels(backend).observe(max(seconds, 0.0))

    def start_failed(self, stage: str) -> None:
        self._failures.labels(stage).inc()

    @contextlib.contextmanager
    def subscriber(self, channel: str) -> Iterator[None]:
        gauge = self._subscribers.labels(channel)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def pty_bytes(self, direction: str, count: int) -> None:
        self._pty[direction] = self._pty.get(direction, 0) + count

    def replay_gap(self, channel: str) -> None:
        self._gaps.labels(channel).inc()

    def http_request(self, route: str, method: str, status: int) -> None:
        self._http.labels(route, method, str(status)).inc()

    def watch_sessions(self, statuses: Callable[[], Iterable[str]]) -> None:
        self._statuses = statuses

    def watch_session_statuses(self, statuses: Callable[[], Iterable[str]]) -> None:
        self._watch_statuses = statuses

    def app_restart(self, trigger: str) -> None:
        self._app_restarts.labels(trigger).inc()

    def watch_suspend(self) -> None:
        self._suspends.inc()

    def watch_resume(self) -> None:
        self._resumes.inc()

    def workspace_writes(self, written: int, deleted: int) -> None:
        self._workspace.labels("written").inc(written)
        self._workspace.labels("deleted").inc(deleted)

    def connection_cap(self, listener: str, action: str) -> None:
        self._at_cap.labels(listener, action).inc()

    def apiserver_request(self, verb: str, code: str, error_class: str, seconds: float) -> None:
        self.add_kube_series()  # a no-op once registered
        self._kube_requests.labels(verb, code, error_class).inc()
        self._kube_latency.labels(verb).observe(max(seconds, 0.0))

    def watch_restart(self, resource: str, reason: str) -> None:
        self.add_kube_series()  # a no-op once registered
        self._watch_restarts.labels(resource, reason).inc()

    def relist(self, resource: str) -> None:
        self.add_kube_series()  # a no-op once registered
        self._relists.labels(resource).inc()

    def attach_reconnect(self) -> None:
        self.add_kube_series()  # a no-op once registered
        self._reconnects.inc()

    def render(self) -> tuple[bytes, str]:
        """The registry in the Prometheus text format, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _ScrapeTimeCollector:
    """The figures read at scrape time: sessions by status, PTY byte totals."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sessions = GaugeMetricFamily(
            "runnerd_sessions", "Registered sessions by status", labels=["status"]
        )
        counts = dict.fromkeys(STATUSES, 0)
        for status in self._metrics._statuses():
            counts[status] = counts.get(status, 0) + 1
        for status, count in counts.items():
            sessions.add_metric([status], count)
        yield sessions
        watch = GaugeMetricFamily(
            "runnerd_watch_sessions", "Registered watch sessions by status", labels=["status"]
        )
        watch_counts = dict.fromkeys(WATCH_STATUSES, 0)
        for status in self._metrics._watch_statuses():
            watch_counts[status] = watch_counts.get(status, 0) + 1
        for status, count in watch_counts.items():
            watch.add_metric([status], count)
        yield watch
        relayed = CounterMetricFamily(
            "runnerd_pty_bytes", "PTY bytes relayed", labels=["direction"]
        )
        for direction, total in self._metrics._pty.items():
            relayed.add_metric([direction], total)
        yield relayed


if TYPE_CHECKING:
    _: type[Collector] = _ScrapeTimeCollector


Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


def metrics_asgi_app(metrics: PrometheusMetrics) -> Callable[..., Awaitable[None]]:
    """An ASGI app answering `GET /metrics` (and nothing else: 404) from `metrics`."""

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rsplit(".", 1)[-1]  # startup | shutdown
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        if scope["type"] != "http":
            return
        if scope["path"] == "/metrics" and scope["method"] in ("GET", "HEAD"):
            body, content_type = metrics.render()
            status = 200
        else:
            body, content_type = b"not found: metrics are at GET /metrics\n", "text/plain"
            status = 404
        headers = [(b"content-type", content_type.encode()), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app
