"""A self-watching app's in-place reload (`AppStarted.reload`): a restart
the core asks of a process that is up is its kernel reloading, not a new
process, against the in-process watch backend (`offer_reload`). The
kernel's debug frames are fed as the relay would (`AppReport.debug`)."""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing

from runnerd.errors import RunnerdError
from runnerd.session.appsink import AppReport
from runnerd.session.watchsession import WatchSession

from .watchfake import FakeWatchBackend
from .watchkit import app, events, running_manager, runs, start, wait_until, watch_spec

KERNEL = "selfwatch\nserve\n"


def _reloading() -> FakeWatchBackend:
    backend = FakeWatchBackend()
    backend.offer_reload = True
    return backend


def _kernel(session: WatchSession, name: str) -> Callable[..., None]:
    channel = session.app_channel(name)
    assert channel is not None
    report = AppReport(session, channel)

    def frame(event: str, **payload: object) -> None:
        report.debug({"kind": "event", "event": event, "payload": payload})

    return frame


async def test_a_manual_reload_of_a_self_watching_app_reloads_it_in_place() -> None:
    backend = _reloading()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": KERNEL}, (app("k", "main.sh"),)))
        await wait_until(session, lambda: session.serving)
        kernel = _kernel(session, "k")
        kernel("Kernel.Starting")
        assert session.reload("k") == ["k"]
        host = backend.hosts[0]
        await wait_until(session, lambda: host.reloads == ["k"])
        kernel("Kernel.Stopped", exitCode=0)
        kernel("Kernel.Starting")
        assert runs(session) == [
            (1, "started", "initial"),
            (1, "completed", 0),
            (2, "started", "manual"),
        ]
        assert host.starts == ["k"] and host.running == {"k": 1}  # the same process


async def test_a_reload_that_raises_is_a_progress_line_and_changes_nothing() -> None:
    backend = _reloading()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": KERNEL}, (app("k", "main.sh"),)))
        await wait_until(session, lambda: session.serving)
        kernel = _kernel(session, "k")
        kernel("Kernel.Starting")
        backend.hosts[0].reload_fails = RunnerdError("the workspace did not answer")
        session.reload("k")
        line = {
            "type": "progress",
            "phase": "boot",
            "message": "reload failed: the workspace did not answer",
            "app": "k",
        }
        await wait_until(session, lambda: line in events(session))
        # The kernel's own next run is its own (`watch`), not the failed reload's.
        kernel("Kernel.Stopped", exitCode=0)
        kernel("Kernel.Starting")
        assert runs(session)[-1] == (2, "started", "watch")
        assert backend.hosts[0].starts == ["k"]
        assert session.status["kind"] == "running"


async def test_a_kept_self_watching_app_reloads_on_put_apps_over_a_live_host() -> None:
    backend = _reloading()
    files = {"main.sh": KERNEL, "other.sh": "echo up\nserve\n"}
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec(files, (app("k", "main.sh"),)))
        await wait_until(session, lambda: session.serving)
        kernel = _kernel(session, "k")
        kernel("Kernel.Starting")
        await session.replace_apps((app("k", "main.sh"), app("web", "other.sh")))
        host = backend.hosts[0]
        await wait_until(session, lambda: host.reloads == ["k"])
        kernel("Kernel.Stopped", exitCode=0)
        kernel("Kernel.Starting")
        assert runs(session, "k")[-1] == (2, "started", "resume")
        assert host.starts.count("k") == 1


async def test_without_a_reload_offered_a_manual_restart_restarts_the_process(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    backend = FakeWatchBackend()
    async with running_manager(backend) as manager:
        session = start(manager, watch_spec({"main.sh": KERNEL}, (app("k", "main.sh"),)))
        await wait_until(session, lambda: session.serving)
        session.reload("k")
        await wait_until(session, lambda: backend.hosts[0].starts == ["k", "k"])
        assert backend.hosts[0].reloads == []


async def test_an_app_whose_process_ended_is_started_again_not_reloaded() -> None:
    backend = _reloading()
    spec = watch_spec({"main.sh": "selfwatch\nexit 1\n"}, (app("k", "main.sh"),))
    async with running_manager(backend) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.serving)
        channel = session.app_channel("k")
        assert channel is not None
        await wait_until(session, lambda: channel.exited)
        session.reload("k")
        await wait_until(session, lambda: backend.hosts[0].starts == ["k", "k"])
        assert backend.hosts[0].reloads == []
