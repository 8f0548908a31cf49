"""What a watch session's place is opened with (the app set, the agent) and
how its port set is published (`runnerd.session.publishing`), against the
in-process watch backend (`watchfake`)."""

from __future__ import annotations

import trio
import trio.testing

from runnerd.backend import ImageSpec
from runnerd.backend.watch import AgentLaunch, AppLaunch
from runnerd.contract import PortMapping
from runnerd.errors import RunnerdError
from runnerd.session.appsink import AppReport

from .watchfake import FakeWatchBackend
from .watchkit import app, events, running_manager, start, wait_until, watch_spec

SERVE = "echo up\nserve\n"
AGENT = AgentLaunch("editor", ImageSpec("editor", "missing"), 7070, {"AGENT_TOKEN": "t" * 32})


def _tcp(*ports: int) -> tuple[PortMapping, ...]:
    return tuple(PortMapping(port=p, protocol="tcp") for p in ports)


def _endpoints(session: object) -> list[object]:
    return session.status.get("endpoints", [])  # type: ignore[attr-defined, no-any-return]


async def test_open_watch_gets_the_app_set_with_slots_and_the_agent_also_on_resume(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = FakeWatchBackend()
    apps = (app("web", "main.sh", 8080), app("api", "api.sh", io="streams"))
    spec = watch_spec({"main.sh": SERVE, "api.sh": SERVE}, apps, agent=AGENT, token="t" * 32)
    async with running_manager(backend, idle_seconds=20) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "suspended")
        await manager.resume(session.id)
        await wait_until(session, lambda: len(backend.specs) == 2)
    launches = (
        AppLaunch("web", "main.sh", "tty", _tcp(8080), 0),
        AppLaunch("api", "api.sh", "streams", (), 1),
    )
    for opened in backend.specs:
        assert opened.apps == launches
        assert opened.agent == AGENT
    assert backend.specs[0].checkpoint is None
    assert backend.specs[1].checkpoint is not None


async def test_an_app_on_the_agents_port_opens_the_place_without_the_agent() -> None:
    backend = FakeWatchBackend()
    spec = watch_spec({"main.sh": SERVE}, (app("web", "main.sh", 7070),), agent=AGENT)
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
    assert backend.specs[0].agent is None
    assert [a.name for a in backend.specs[0].apps] == ["web"]


async def test_running_endpoints_are_what_the_host_published_once_before_running() -> None:
    backend = FakeWatchBackend()
    backend.route_domain = "example.test"
    apps = (app("web", "main.sh", 8080, 9090), app("api", "main.sh", 9090, 7000))
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}, apps))
        await wait_until(session, lambda: session.status["kind"] == "running")
        host = backend.hosts[0]
        # Every app's, app order, each once; published before `running`.
        assert host.published == [_tcp(8080, 9090, 7000)]
        assert _endpoints(session) == [
            {"host": f"{port}.example.test", "port": port, "protocol": "tcp"}
            for port in (8080, 9090, 7000)
        ]
        statuses = [e for e in events(session) if e["type"] == "status"]
        assert len(statuses) == 2  # starting, then `running` once, already published


async def test_a_rejected_port_is_an_endpoints_event_for_its_app_said_once() -> None:
    backend = FakeWatchBackend()
    backend.reject = {9090: "the cluster refused the route"}
    apps = (app("web", "main.sh", 8080), app("api", "main.sh", 9090))
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}, apps))
        await wait_until(session, lambda: session.status["kind"] == "running")
        assert _endpoints(session) == [{"host": "", "port": 8080, "protocol": "tcp"}]
        rejection = {
            "type": "endpoints",
            "app": "api",
            "rejected": [{"port": 9090, "reason": "the cluster refused the route"}],
        }
        assert [e for e in events(session) if e["type"] == "endpoints"] == [rejection]
        # A new set that still holds the port: republished, not said again.
        await session.replace_apps((app("api", "main.sh", 9090, 6000),))
        assert backend.hosts[0].published[-1] == _tcp(9090, 6000)
        assert _endpoints(session) == [{"host": "", "port": 6000, "protocol": "tcp"}]
        assert [e for e in events(session) if e["type"] == "endpoints"] == [rejection]


async def test_put_apps_on_a_live_host_republishes_before_its_answer() -> None:
    backend = FakeWatchBackend()
    backend.route_domain = "example.test"
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}, (app("web", "main.sh", 8080),)))
        await wait_until(session, lambda: session.status["kind"] == "running")
        await session.replace_apps((app("web", "main.sh", 8080), app("api", "main.sh", 9090)))
        assert backend.hosts[0].published == [_tcp(8080), _tcp(8080, 9090)]
        assert [e["port"] for e in _endpoints(session)] == [8080, 9090]  # type: ignore[index]


async def test_a_kernels_announced_ports_are_republished() -> None:
    backend = FakeWatchBackend()
    spec = watch_spec({"main.sh": "selfwatch\nserve\n"}, (app("k", "main.sh", 8080),))
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
        channel = session.app_channel("k")
        assert channel is not None
        payload = {"ports": [{"port": 9090}]}
        frame = {"kind": "event", "event": "Kernel.PortsResolved", "payload": payload}
        AppReport(session, channel).debug(frame)
        await wait_until(session, lambda: len(backend.hosts[0].published) == 2)
        assert backend.hosts[0].published[-1] == _tcp(9090)
        await wait_until(session, lambda: [e["port"] for e in _endpoints(session)] == [9090])  # type: ignore[index]


async def test_a_publish_that_raises_rejects_every_port_and_the_session_runs() -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend) as manager:
        backend.publish_fails = RunnerdError("the apiserver is unreachable")
        session = start(manager, watch_spec({"main.sh": SERVE}, (app("web", "main.sh", 8080),)))
        await wait_until(session, lambda: session.status["kind"] == "running")
        assert _endpoints(session) == []
        why = "the port could not be published: the apiserver is unreachable"
        assert {"type": "endpoints", "app": "web", "rejected": [{"port": 8080, "reason": why}]} in (
            events(session)
        )
