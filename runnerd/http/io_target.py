"""What one `/io` socket serves: a run session's PTY, or one app of a watch session.

Owns `io_target`, the `?app=` rule of the contract (a run session takes none
or `app`; a watch session the name of one of its apps, or none when it has
exactly one; anything else is the reason for a 4404 close), and `IoTarget`:
the ring the socket replays and follows, where stdin and resizes go, and
what its first `seq` frame says besides the seq (watch only: `app`, `io`).
A watch app's ring holds each chunk as its stream byte then the payload, so
the socket frames it exactly as a run session's (seq, then the chunk).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runnerd.session.reader import Ring

if TYPE_CHECKING:
    from runnerd.session.manager import Session

SEP = (",", ":")
# A run session's one app, as `GET` names it.
RUN_SESSION_APP = "app"
# A close reason is at most 123 bytes: a client's app name is cut to fit.
MAX_NAME_IN_REASON = 40


@dataclass(frozen=True)
class IoTarget:
    """What one socket serves: the ring it replays and follows, where stdin
    and resizes go (`resize` None: a `streams` app, which has no terminal),
    and what its first `seq` frame says besides the seq."""

    ring: Ring[bytes]
    write_stdin: Callable[[bytes], None]
    resize: Callable[[int, int], None] | None
    seq_fields: dict[str, str] = field(default_factory=dict)

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
        return IoTarget(session.pty, session.write_stdin, session.resize)
    channel = session.app_channel(app)
    if channel is None:
        if app is None:
            count = len(session.app_channels())
            return f"this watch session has {count} apps: name one with ?app="
        return f"no app {app[:MAX_NAME_IN_REASON]!r} in this session"
    return IoTarget(
        channel.ring,
        channel.write_stdin,
        channel.resize if channel.io == "tty" else None,
        {"app": channel.name, "io": channel.io},
    )
