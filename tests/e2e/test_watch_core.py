"""The session core's per-app guarantees through a real daemon (local
backend, real `sh` processes): across a burst of writes and reloads, `run`
events come in generation order, each `started` before its `completed`,
generation N ended before N+1's event, and at most one process of an app
ran at a time, as the processes themselves record it (each appends
`start PID` when it begins and `stop PID` on the SIGTERM a restart sends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from tests.e2e.watch_client import route, runs, start_watch, started, wait_frames, wait_running
from tests.harness import start_daemon

# Logs its life into the workspace; the restart's SIGTERM ends it through the
# trap, which is set before `start` is logged: a SIGTERM sent once the line is
# there always finds it (one sent earlier would end `sh` with 143, not 0).
LOGGED = (
    "trap 'echo stop $$ >> life.log; exit 0' TERM\n"
    "echo start $$ >> life.log\n"
    "while :; do sleep 0.05; done\n"
)


def check_run_guarantees(events: list[dict[str, Any]]) -> None:
    """The contract's per-app guarantees over one app's `run` events."""
    open_generation: int | None = None
    last = 0
    for event in events:
        generation = event["generation"]
        if event["phase"] == "started":
            assert open_generation is None, f"{generation} started while {open_generation} was open"
            assert generation == last + 1, f"generation {generation} after {last}"
            open_generation = last = generation
        else:
            assert open_generation == generation, f"{event} without its started"
            open_generation = None


async def life_log(client: httpx.AsyncClient, session_id: str) -> list[str]:
    answer = await route(client, "GET", session_id, "workspace/file", params={"path": "life.log"})
    if answer.status_code == 404:  # not written yet
        return []
    assert answer.status_code == 200, answer.text
    return str(answer.json()["content"]).splitlines()


async def wait_started(client: httpx.AsyncClient, session_id: str, count: int) -> None:
    """Until `count` processes of the app have logged `start` (so the last
    of them has its trap set: a restart may SIGTERM it now)."""
    while True:
        log = await life_log(client, session_id)
        if sum(line.startswith("start") for line in log) >= count:
            return
        await trio.sleep(0.02)


async def test_a_burst_of_writes_and_reloads_keeps_every_per_app_guarantee(tmp_path: Path) -> None:
    # The stop grace is the most a config allows (5 s), not the harness's
    # 1 s: the codes below are the traps' `exit 0`, which a loaded machine
    # must not turn into a SIGKILL's 137 by scheduling a trap late.
    config = {"watch": {"enabled": True}, "local": {"stop_grace_seconds": 5}}
    async with start_daemon(tmp_path, config) as daemon:
        async with daemon.client() as client:
            session_id = await start_watch(client, files={"app.sh": LOGGED}, entry="app.sh")
            await wait_running(client, session_id)
            await wait_started(client, session_id, 1)
            answers: list[int] = []

            async def write(i: int) -> None:
                body = {"write": [{"path": f"f{i}.txt", "content": str(i)}]}
                answer = await route(client, "POST", session_id, "workspace", json=body)
                answers.append(answer.status_code)

            # One burst, one `watch` generation: the three writes sent at
            # once, so a busy machine's slow requests cannot space them
            # past the 300 ms debounce (which would rightly be two bursts).
            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(write, i)
            assert answers == [200, 200, 200]
            await wait_frames(client, session_id, lambda fs: started(fs, "app", 2) is not None)
            for generation in (3, 4):
                await wait_started(client, session_id, generation - 1)
                answer = await route(client, "POST", session_id, "reload")
                assert answer.status_code == 202, answer.text
                frames = await wait_frames(
                    client, session_id, lambda fs, g=generation: started(fs, "app", g) is not None
                )
            events = runs(frames, "app")
            check_run_guarantees(events)
            triggers = [e["trigger"] for e in events if e["phase"] == "started"]
            assert triggers == ["initial", "watch", "manual", "manual"]
            # Each stopped process's own exit: its trap's `exit 0`.
            assert all(e["code"] == 0 for e in events if e["phase"] == "completed")
            # The processes' own record: one at a time, each stopped before the next began.
            log = await life_log(client, session_id)
            while len(log) < 7:  # generation 4 may not have written its line yet
                log = await life_log(client, session_id)
            words = [line.split()[0] for line in log]
            assert words == ["start", "stop"] * 3 + ["start"]
            pids = [line.split()[1] for line in log]
            assert pids[0::2][:3] == pids[1::2]  # each stop is the last start's
