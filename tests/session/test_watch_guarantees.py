"""The contract's per-app guarantees under a random mix of what can restart
an app (writes, reloads, `PUT /apps`, suspend and resume, apps that exit on
their own), on the fake watch backend and MockClock: per app, `run` events
in generation order, each `started` before its `completed`/`failed`,
generation N ended before N+1's event, and never two processes at once."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from runnerd.backend.watch import ChangeSet, Write
from runnerd.session.watchsession import WatchSession

from .watchfake import FakeWatchBackend
from .watchkit import app, events, running_manager, start, wait_until, watch_spec

FILES = {"serve.sh": "echo up\nserve\n", "quick.sh": "echo hi\nexit 1\n"}


def check_run_guarantees(app_events: list[dict[str, Any]]) -> None:
    open_generation: int | None = None
    last = 0
    for event in app_events:
        generation = event["generation"]
        if event["phase"] == "started":
            assert open_generation is None, f"{generation} started while {open_generation} open"
            # 1 again: the name was dropped by `PUT /apps` and is a new app now.
            assert generation in (last + 1, 1), f"generation {generation} after {last}"
            open_generation = last = generation
        else:
            assert open_generation == generation, f"{event} without its started"
            open_generation = None


async def _one_step(rng: random.Random, session: WatchSession, manager: Any, step: int) -> None:
    choice = rng.randrange(6)
    if session.status["kind"] == "suspended":
        await manager.resume(session.id)
        await wait_until(session, lambda: session.serving)
    elif not session.serving:
        await wait_until(session, lambda: session.serving or session.status["kind"] == "suspended")
    elif choice == 0:
        await session.apply_changes(ChangeSet((Write(f"f{step}.txt", b"x"),)))
    elif choice == 1:
        session.reload(rng.choice([None, *[c.name for c in session.app_channels()]]))
    elif choice == 2:
        names = rng.sample(["a", "b", "c"], rng.randint(1, 3))
        specs = tuple(app(n, rng.choice(list(FILES))) for n in names)
        await session.replace_apps(specs)
    elif choice == 3:
        with session.subscribed():
            await trio.sleep(rng.uniform(0, 2))
    await trio.sleep(rng.choice([0, 0.05, 0.2, 0.5, 3, 25]))


@pytest.mark.parametrize("seed", range(8))
async def test_every_app_keeps_its_guarantees_under_a_random_mix(
    seed: int, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 0
    rng = random.Random(seed)
    backend = FakeWatchBackend()
    spec = watch_spec(FILES, (app("a", "serve.sh"), app("b", "quick.sh")))
    async with running_manager(backend, idle_seconds=20, checkpoint_seconds=7) as manager:
        session = start(manager, spec)
        await wait_until(session, lambda: session.serving)
        for step in range(60):
            await _one_step(rng, session, manager, step)
        await manager.stop(session.id)
    run_events = [e for e in events(session) if e["type"] == "run"]
    assert run_events, "nothing ran"
    for name in {e["app"] for e in run_events}:
        check_run_guarantees([e for e in run_events if e["app"] == name])
    for host in backend.hosts:
        assert all(peak == 1 for peak in host.peak.values()), host.peak
        assert host.left and not any(host.running.values())
    assert session.status == {"kind": "stopped"}
