"""What one `/io` socket serves: a run session's PTY, or one app of a watch session.

Owns `io_target`, the `?app=` rule of the contract (a run session takes none
or `app`; a watch session the name of one of its apps, or none when it has
exactly one; anything else is the reason for a 4404 close), and `IoTarget`:
the ring the socket replays and follows, where stdin and resizes go, and
what its first `seq` frame says besides the seq (watch only: `app`, `io`).
A watch app's ring holds each chunk as its stream byte then the payload, so
the socket frames it exactly as a run session's (seq, then the chunk).
An app removed from the set (`PUT /apps`) ends its sockets' streams once
they have what its ring held (close 4404, as a new socket on it gets).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runnerd.session.reader import Changes, Ring

if TYPE_CHECKING:
    from runnerd.session.apps import AppChannel
    from runnerd.session.manager import Session

SEP = (",", ":")
# A run session's one app, as `GET` names it.
RUN_SESSION_APP = "app"
# A close reason is at most 123 bytes: a client's app name is cut to fit.
MAX_NAME_IN_REASON = 40


class _AppChanges:
    """The session's wake-up as one app's reader waits on it: its stream
    also ends once the app left the session's set (`PUT /apps`), after
    what its ring still holds for the reader."""

    def __init__(self, session: Session, channel: AppChannel) -> None:
        self._session, self._channel = session, channel

    @property
    def is_terminal(self) -> bool:
        return self._session.is_terminal or self._channel.gone

    async def wait_change(self) -> None:
        await self._session.wait_change()


@dataclass(frozen=True)
class IoTarget:
    """What one socket serves: the ring it replays and follows and the
    wake-up its reader waits on, where stdin and resizes go (`resize` None:
    a `streams` app, which has no terminal), what its first `seq` frame says
    besides the seq, and why its stream ended when the session did not
    (`gone_reason`: the app left the set; None while it has not)."""

    ring: Ring[bytes]
    changes: Changes
    write_stdin: Callable[[bytes], None]
    resize: Callable[[int, int], None] | None
    seq_fields: dict[str, str] = field(default_factory=dict)
    gone_reason: Callable[[], str | None] = lambda: None

    def seq_frame(self, seq: int) -> str:
        return json.dumps({"type": "seq", "seq": seq, **self.seq_fields}, separators=SEP)


def io_target(session: Session, app: str | None) -> IoTarget | str:
    """The socket's target for `?app=` (None: absent), or why it is 4404.

    A run session takes no `app` or `app`; a watch session the name of one
    of its apps, or none when it has exactly one.
    """
    if session.mode != "watch":
        if app not in (None, RUN_SESSION_APP):
            return f"no app {app[:MAX_NAME_IN_REASON]!r}: a run session has one app, 'app'"
        return IoTarget(session.pty, session, session.write_stdin, session.resize)
    channel = session.app_channel(app)
    if channel is None:
        if app is None:
            count = len(session.app_channels())
            return f"this watch session has {count} apps: name one with ?app="
        return f"no app {app[:MAX_NAME_IN_REASON]!r} in this session"
    left = f"app {channel.name!r} left the session"
    return IoTarget(
        channel.ring,
        _AppChanges(session, channel),
        channel.write_stdin,
        channel.resize if channel.io == "tty" else None,
        {"app": channel.name, "io": channel.io},
        lambda: left if channel.gone else None,
    )
