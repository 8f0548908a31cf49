"""`PUT /apps` where a place holds a fixed app set: a reopen.

On a backend whose places run exactly the app set they were opened with
(`WatchBackend.watch_fixed_apps`: a pod's containers), a new app set
cannot join the live host. There `PUT /apps` is carried out by the driver
(`runnerd.session.watching`) as a reopen:

    the route (`ask_reopen`)               the driver
    a checkpoint of the live workspace
      (CheckpointFailed: 409 checkpoint_failed, nothing changed)
    hands the driver a `Reopen` ─────────► stops every app (each open
    (workspace routes wait from now)         generation `completed`), takes
                                             a checkpoint again (a failure:
                                             the route's one stands)
    202 once GET shows the new set ◄────── the app set replaced (`applied`)
                                           leaves the host; enters
                                             `open_watch` with the new set
                                             and that checkpoint; every app
                                             starts with trigger `resume`
    the workspace routes answer again ◄─── serving: `running` republished

The status stays `running` throughout (the contract: `PUT /apps` does not
change it). A workspace route arriving during the reopen waits for the new
host (`REOPEN_WAIT_S` at most, past any backend's own start timeout: the
backend's start is what bounds it) instead of answering 409. A reopen whose
`open_watch` fails ends the session `failed "<stage>: <message>"`, and
whatever waited gets `409 not_running`. A request the driver never took (the
session went idle, stopped or failed first) is refused the same way, with
nothing changed.

Why a failed checkpoint refuses the PUT (`409 checkpoint_failed`) rather
than reopening from an older one: the new place is restored from a
checkpoint, and only one taken now holds the workspace's latest writes.
Refused, nothing has changed and nothing is lost: the apps run on, and the
client may make the workspace smaller and try again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import trio

from runnerd.backend.watch import Checkpoint, CheckpointFailed, WatchHost
from runnerd.watch.apps import AppSpec
from runnerd.watch.errors import WatchError

# How long a workspace route waits for a reopen's new host: longer than any
# backend's start timeout, so the backend's own bound is the one that holds.
REOPEN_WAIT_S = 900.0


@dataclass
class Reopen:
    """A `PUT /apps` handed to the driver: `applied` is set once the app set
    is replaced (`refused`: it was not, and never will be)."""

    apps: tuple[AppSpec, ...]
    applied: trio.Event = field(default_factory=trio.Event)
    refused: bool = False


class ReopeningSession(Protocol):
    """What `ask_reopen` needs of `runnerd.session.watchsession.WatchSession`."""

    async def keep_checkpoint(self, checkpoint: Checkpoint) -> None: ...

    def ask_reopen(self, request: Reopen) -> None: ...

    def require_running(self) -> None: ...


async def ask_reopen(session: ReopeningSession, host: WatchHost, apps: tuple[AppSpec, ...]) -> None:
    """The route's side (see the module docstring); returns once the new
    set is the session's.

    Raises:
        WatchError: 409 checkpoint_failed (nothing changed), 409 not_running
            (the session stopped serving first; nothing changed).
    """
    try:
        checkpoint = await host.checkpoint()
    except CheckpointFailed as exc:
        raise WatchError(
            409,
            "checkpoint_failed",
            f"the app set was not changed: the workspace checkpoint a new app set "
            f"is started from failed: {exc}",
        ) from exc
    await session.keep_checkpoint(checkpoint)
    request = Reopen(apps)
    session.ask_reopen(request)  # 409 not_running if it went idle meanwhile
    await request.applied.wait()
    if request.refused:
        session.require_running()
        raise WatchError(409, "not_running", "the session stopped before its app set changed")
