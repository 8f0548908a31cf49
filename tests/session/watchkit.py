"""What the watch-session tests share: specs, a running manager, waits."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from runnerd.backend import BundleSpec, CreationSpec, ImageSpec, Limits, SessionIdentity
from runnerd.backend.watch import AgentLaunch, WatchSpec
from runnerd.config import WatchConfig
from runnerd.contract import PortMapping
from runnerd.session.manager import SessionManager
from runnerd.session.session import Session
from runnerd.session.statefile import StateDir
from runnerd.session.watchsession import WatchSession
from runnerd.session.watchspec import WatchSessionSpec
from runnerd.watch.apps import AppSpec

from .watchfake import FakeWatchBackend

_ids = itertools.count()
EPOCH = 1_800_000_000.0


def wall_clock() -> float:
    """Epoch seconds that move with trio's (mock) clock."""
    return EPOCH + trio.current_time()


def app(name: str, entry: str, *ports: int, io: str = "tty") -> AppSpec:
    return AppSpec(
        name,
        entry,
        tuple(PortMapping(port=p, protocol="tcp") for p in ports),
        io,  # type: ignore[arg-type]
    )


def watch_spec(
    files: dict[str, str],
    apps: tuple[AppSpec, ...] | None = None,
    *,
    ttl_s: float = 3600.0,
    agent: AgentLaunch | None = None,
    token: str | None = None,
) -> WatchSessionSpec:
    identity = SessionIdentity(
        f"watch-{next(_ids)}", Limits("1", "1Gi", "1Gi", ttl_s), inspect=True
    )
    entry = next(iter(files))
    creation = CreationSpec(ImageSpec("sh", "missing"), {}, BundleSpec(entry, tuple(files.items())))
    chosen = apps if apps is not None else (AppSpec("app", entry),)
    return WatchSessionSpec(WatchSpec(identity, creation), chosen, agent, token)


@asynccontextmanager
async def running_manager(
    backend: FakeWatchBackend,
    *,
    max_sessions: int = 8,
    state: StateDir | None = None,
    **watch: Any,
) -> AsyncIterator[SessionManager]:
    """A serving manager over `backend`, every session stopped on the way
    out (unless the test stopped them otherwise: a detach). `state`: its
    state dir (watch records, with `backend.watch_adopt`)."""
    limits = WatchConfig(enabled=True, **watch)
    manager = SessionManager(
        backend,  # type: ignore[arg-type]
        max_sessions=max_sessions,
        exit_ttl_s=600,
        replay_buffer_bytes=1 << 20,
        wall_clock=wall_clock,
        watch=limits,
        state=state,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        try:
            yield manager
        finally:
            with trio.fail_after(60):
                await manager.stop_all()
            nursery.cancel_scope.cancel()


def start(manager: SessionManager, spec: WatchSessionSpec) -> WatchSession:
    session = manager.start_watch(spec)
    assert isinstance(session, WatchSession)
    return session


async def wait_until(
    session: Session, condition: Callable[[], bool], timeout_s: float = 600
) -> None:
    """Wait (woken by the session's changes) until `condition()` holds."""
    with trio.fail_after(timeout_s):
        while not condition():
            # A terminal session never changes again (and wakes at once).
            assert not session.is_terminal, f"ended {session.status} first"
            with trio.move_on_after(0.1):  # some conditions (a host left) wake nobody
                await session.wait_change()


def events(session: Session) -> list[dict[str, Any]]:
    return [dict(event) for _, event in session.events.since(0).items]


def runs(session: Session, name: str | None = None) -> list[tuple[int, str, Any]]:
    """(generation, phase, trigger/code/reason) of the `run` events, per app when named."""
    found = []
    for event in events(session):
        if event["type"] == "run" and (name is None or event["app"] == name):
            detail = event.get("trigger", event.get("code", event.get("reason")))
            found.append((event["generation"], event["phase"], detail))
    return found


def statuses(session: Session) -> list[str]:
    return [e["status"]["kind"] for e in events(session) if e["type"] == "status"]
