"""Watch sessions through the session core: the driver, against an
in-process watch backend whose apps are trio tasks (`watchfake`), under
trio's MockClock where timing is what is tested."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runnerd.backend import StartError
from runnerd.backend.watch import ChangeSet, Write
from runnerd.watch.errors import WatchError

from .watchfake import FakeWatchBackend
from .watchkit import app, events, running_manager, runs, start, statuses, wait_until, watch_spec

SERVE = "echo up\nserve\n"


async def test_generation_one_then_running_and_an_exit_leaves_the_session_up() -> None:
    backend = FakeWatchBackend()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": "echo hi\nexit 3\n"}))
        await wait_until(
            session, lambda: len(runs(session)) == 2 and session.status["kind"] == "running"
        )
        assert runs(session) == [(1, "started", "initial"), (1, "completed", 3)]
        assert session.status == {"kind": "running"}
        assert statuses(session) == ["starting", "running"]
        kinds = [e["type"] for e in events(session)]
        assert kinds.index("run") < kinds.index("status", 1)  # generation 1 before `running`
        channel = session.app_channel(None)
        assert channel is not None and channel.generation == 1
        assert [chunk for _, chunk in channel.ring.since(0).items] == [b"\x00hi\n"]
        progress = [e for e in events(session) if e["type"] == "progress"]
        assert progress == [
            {"type": "progress", "phase": "provision", "message": "workspace ready", "done": True}
        ]


async def test_an_entry_that_is_not_there_is_started_then_failed_and_the_session_runs() -> None:
    backend = FakeWatchBackend()
    spec = watch_spec({"main.sh": SERVE}, (app("web", "main.sh"), app("gone", "nope.sh")))
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
        reason = "entry 'nope.sh' is not a file in the workspace"
        assert runs(session, "gone") == [(1, "started", "initial"), (1, "failed", reason)]
        assert runs(session, "web") == [(1, "started", "initial")]


async def test_a_burst_of_changes_is_one_watch_generation(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = FakeWatchBackend()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.status["kind"] == "running")
        for i in range(5):
            await session.apply_changes(ChangeSet((Write(f"f{i}.txt", b"x"),)))
            await trio.sleep(0.2)  # each change < 300 ms after the previous
        last_change = trio.current_time() - 0.2
        await wait_until(session, lambda: len(runs(session)) == 3)
        assert trio.current_time() - last_change < 2.0
        await trio.sleep(5)
        assert runs(session) == [
            (1, "started", "initial"),
            (1, "completed", 143),
            (2, "started", "watch"),
        ]
        assert backend.hosts[0].peak == {"app": 1}
        assert await session.read_workspace_file("f4.txt") == b"x"


async def test_a_change_set_that_changes_nothing_restarts_nothing(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    async with running_manager(FakeWatchBackend()) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.status["kind"] == "running")
        assert await session.apply_changes(ChangeSet()) == (0, 0)
        # Deleting a path that is not there changes nothing either.
        assert await session.apply_changes(ChangeSet(deletes=("zzz",))) == (0, 0)
        await trio.sleep(10)
        assert runs(session) == [(1, "started", "initial")]


async def test_reload_restarts_at_once_and_names_an_unknown_app() -> None:
    backend = FakeWatchBackend()
    spec = watch_spec({"main.sh": SERVE}, (app("a", "main.sh"), app("b", "main.sh")))
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
        assert session.reload("b") == ["b"]
        await wait_until(session, lambda: len(runs(session, "b")) == 3)
        assert runs(session, "b") == [
            (1, "started", "initial"),
            (1, "completed", 143),
            (2, "started", "manual"),
        ]
        assert runs(session, "a") == [(1, "started", "initial")]
        with pytest.raises(WatchError) as refused:
            session.reload("c")
        assert (refused.value.status_hint, refused.value.code) == (404, "unknown_app")
        assert session.reload(None) == ["a", "b"]
        await wait_until(session, lambda: session.app_channel("a").generation == 2)  # type: ignore[union-attr]
        await wait_until(session, lambda: runs(session, "b")[-1] == (3, "started", "manual"))
        assert backend.hosts[0].peak == {"a": 1, "b": 1}


async def test_running_lists_every_apps_declared_ports_and_follows_put_apps() -> None:
    backend = FakeWatchBackend()
    spec = watch_spec(
        {"main.sh": SERVE}, (app("web", "main.sh", 8080), app("api", "main.sh", 9090))
    )
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
        assert [e["port"] for e in session.status.get("endpoints", [])] == [8080, 9090]
        await session.replace_apps((app("api", "main.sh", 9090),))
        assert session.status == {
            "kind": "running",
            "endpoints": [{"host": "", "port": 9090, "protocol": "tcp"}],
        }


async def test_put_apps_keeps_counters_and_output_and_restarts_every_app_with_resume() -> None:
    backend = FakeWatchBackend()
    spec = watch_spec({"main.sh": SERVE}, (app("a", "main.sh"), app("b", "main.sh")))
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
        session.reload("a")
        await wait_until(session, lambda: session.app_channel("a").generation == 2)  # type: ignore[union-attr]
        kept = session.app_channel("a")
        assert kept is not None
        await wait_until(session, lambda: len(kept.ring.since(0).items) == 2)
        names = await session.replace_apps((app("c", "main.sh"), app("a", "main.sh", 8080)))
        assert names == ["c", "a"]
        assert [c.name for c in session.app_channels()] == ["c", "a"]
        assert session.app_channel("b") is None and session.app_channel("a") is kept
        assert kept.ports[0].port == 8080
        await wait_until(
            session, lambda: kept.generation == 3 and session.app_channel("c").generation == 1
        )  # type: ignore[union-attr]
        assert runs(session, "a")[-2:] == [(2, "completed", 143), (3, "started", "resume")]
        assert runs(session, "c") == [(1, "started", "resume")]
        assert len(kept.ring.since(0).items) >= 2  # a's output of every generation, one ring
        assert backend.hosts[0].running.get("b") == 0


async def test_the_agent_runs_with_its_token_and_is_not_restarted() -> None:
    from runnerd.backend import ImageSpec
    from runnerd.backend.watch import AgentLaunch

    backend = FakeWatchBackend()
    agent = AgentLaunch("editor", ImageSpec("editor", "missing"), 7070, {"AGENT_TOKEN": "t" * 32})
    spec = watch_spec({"main.sh": SERVE}, agent=agent, token="t" * 32)
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
        assert session.status == {
            "kind": "running",
            "agent": {"host": "", "port": 7070, "protocol": "tcp", "token": "t" * 32},
        }
        assert session.agent_name == "editor"
        await wait_until(session, lambda: backend.hosts[0].agent_running)
        assert backend.hosts[0].agent_env == {"AGENT_TOKEN": "t" * 32}
        session.reload(None)
        await wait_until(session, lambda: len(runs(session)) == 3)
        assert backend.hosts[0].agent_running


async def test_an_app_on_the_agents_port_keeps_the_agent_out() -> None:
    from runnerd.backend import ImageSpec
    from runnerd.backend.watch import AgentLaunch

    backend = FakeWatchBackend()
    agent = AgentLaunch("editor", ImageSpec("editor", "missing"), 7070)
    spec = watch_spec({"main.sh": SERVE}, (app("web", "main.sh", 7070),), agent=agent)
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
        # No agent on `running`; the app's declared port is its endpoint.
        web = {"host": "", "port": 7070, "protocol": "tcp"}
        assert session.status == {"kind": "running", "endpoints": [web]}
        assert session.agent_name is None
        message = (
            "co-resident agent 'editor' was not started: it listens on tcp port 7070, "
            "which app 'web' declares"
        )
        assert {"type": "progress", "phase": "boot", "message": message} in events(session)
        assert not backend.hosts[0].agent_running


async def test_the_ttl_fails_the_session_with_its_message(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = FakeWatchBackend()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}, ttl_s=30))
        with trio.fail_after(600):
            await session.wait_terminal()
        assert session.status == {
            "kind": "failed",
            "message": "ttl: session exceeded its time limit of 30 s",
        }
        assert backend.hosts[0].left and backend.hosts[0].running == {"app": 0}


async def test_a_workspace_that_cannot_be_made_fails_the_session() -> None:
    backend = FakeWatchBackend()
    backend.open_fails = StartError("provision", "no room for the workspace")
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        with trio.fail_after(60):
            await session.wait_terminal()
        assert session.status == {
            "kind": "failed",
            "message": "provision: no room for the workspace",
        }


async def test_a_self_watching_apps_generations_are_its_kernels(
    mock_clock: trio.testing.MockClock,
) -> None:
    from runnerd.session.appsink import AppReport

    mock_clock.autojump_threshold = 0
    backend = FakeWatchBackend()
    spec = watch_spec({"main.sh": "selfwatch\nserve\n"}, (app("k", "main.sh", 8080),))
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.status["kind"] == "running")
        channel = session.app_channel("k")
        assert channel is not None and channel.self_watching
        assert runs(session) == []  # the process started; the kernel has not said so yet
        report = AppReport(session, channel)  # what the debug relay reports to

        def kernel(name: str, **payload: object) -> None:
            report.debug({"kind": "event", "event": name, "payload": payload})

        kernel("Kernel.Starting", telo="1.2.3")
        await session.apply_changes(ChangeSet((Write("main.yaml", b"v2"),)))
        await trio.sleep(5)  # past the debounce: the core does not restart it
        kernel("Kernel.Stopped", exitCode=0)
        kernel("Kernel.Starting")
        kernel("Kernel.PortsResolved", ports=[{"port": 9090}])
        assert runs(session) == [
            (1, "started", "initial"),
            (1, "completed", 0),
            (2, "started", "watch"),
        ]
        assert backend.hosts[0].starts == ["k"]
        endpoints = [e for e in events(session) if e["type"] == "endpoints"]
        assert endpoints == [
            {
                "type": "endpoints",
                "app": "k",
                "added": [{"host": "", "port": 9090, "protocol": "tcp"}],
                "removed": [{"host": "", "port": 8080, "protocol": "tcp"}],
            }
        ]
        assert [p.port for p in channel.ports] == [9090]
        session.reload("k")  # a manual restart: the core's, attributed to `manual`
        await wait_until(session, lambda: backend.hosts[0].starts == ["k", "k"])
        kernel("Kernel.Starting")
        assert runs(session)[-2:] == [(2, "completed", 143), (3, "started", "manual")]
        debug = [e for e in events(session) if e["type"] == "debug"]
        assert all(e["app"] == "k" for e in debug) and len(debug) == 5


async def test_a_reload_while_a_generation_starts_lets_it_start_then_restarts_it(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = FakeWatchBackend()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": SERVE}))
        await wait_until(session, lambda: session.status["kind"] == "running")
        backend.hosts[0].start_delay_s = 1.0
        session.reload(None)
        await trio.sleep(0.5)  # generation 2 is starting
        session.reload(None)
        await wait_until(session, lambda: len(runs(session)) == 5)
        assert runs(session) == [
            (1, "started", "initial"),
            (1, "completed", 143),
            (2, "started", "manual"),
            (2, "completed", 143),
            (3, "started", "manual"),
        ]
        assert backend.hosts[0].peak == {"app": 1}
