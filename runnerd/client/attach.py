"""`runnerd attach SESSION`: a session's terminal, and its end as an exit code.

Owns what attaching means for the user: with a terminal on stdin, a raw
terminal (keys, Ctrl-C included, go to the workload; window size changes
follow; Ctrl-] detaches and leaves the session running); without one, stdin
and stdout are piped (end of stdin is sent as ^D). The loop itself is
`runnerd.client.pty_channel`.

Exit codes, the same as `runnerd run` (runnerd.client.outcome):
- the session ended: `exited N` → N; `failed` → 125 with the message on
  stderr (also when it failed or was stopped before any output: the
  channel then closes 4410 with nothing to show); `stopped` → 130;
- detached → the session id and how to come back on stderr, and 0 for
  Ctrl-]; 128 + the signal for SIGTERM/SIGHUP to this process, or Ctrl-C
  without a terminal (130);
- no such session (the channel closed 4404: the same words as `logs` and
  `events`), no daemon, or the connection lost (the daemon killed or
  shutting down) → 1 with the reason on stderr.
"""

from __future__ import annotations

import functools
import os
import signal
import sys

from runnerd.client.outcome import EXIT_ERROR, EXIT_OK, exit_code
from runnerd.client.pty_channel import ChannelEnd, Ended, StdinMode, follow_channel
from runnerd.client.terminal import DETACH_KEY_NAME
from runnerd.client.transport import Api, ApiError, ClientError, Endpoint, no_session

UNKNOWN_SESSION = 4404  # the /io close code for a session id the daemon does not know


def stdin_mode() -> StdinMode:
    return StdinMode.RAW if os.isatty(0) else StdinMode.PIPE


def run_attach(endpoint: Endpoint, session_id: str, last_seq: int = 0) -> int:
    """Attach until the session ends or the user detaches; the exit code."""
    from runnerd.client.interrupt import run_trio  # only the streaming verbs pay for trio

    try:
        end = run_trio(functools.partial(_follow, endpoint, session_id, last_seq))
    except KeyboardInterrupt:  # Ctrl-C without a raw terminal: we leave, it stays
        end = ChannelEnd(Ended.DETACHED, signal=signal.SIGINT)
    return finish(Api(endpoint), session_id, end)


async def _follow(endpoint: Endpoint, session_id: str, last_seq: int) -> ChannelEnd:
    return await follow_channel(endpoint, session_id, mode=stdin_mode(), last_seq=last_seq)


def say(message: str) -> None:
    # "\r\n": after raw mode the cursor may sit mid-line.
    sys.stderr.write(f"\r\nrunnerd: {message}\r\n" if os.isatty(2) else f"runnerd: {message}\n")
    sys.stderr.flush()


def finish(api: Api, session_id: str, end: ChannelEnd) -> int:
    """The exit code for how the channel ended (module docstring), with its message."""
    if end.how is Ended.DETACHED:
        say(
            f"detached from {session_id} (it keeps running): `runnerd attach {session_id}` "
            f"resumes, `runnerd stop {session_id}` stops it"
        )
        return EXIT_OK if end.signal is None else 128 + end.signal
    if not end.finished and end.code == UNKNOWN_SESSION:
        say(str(no_session(session_id)))
        return EXIT_ERROR
    if not end.finished:
        what = "closed" if end.code != 1006 else "lost the connection:"
        say(f"{session_id}: {what} {end.code} {end.reason}".rstrip())
        return EXIT_ERROR
    try:
        status = api.get(f"/v1/sessions/{session_id}")["status"]
    except (ApiError, ClientError, KeyError, TypeError) as exc:
        say(f"{session_id}: the terminal ended, but its status is unknown: {exc}")
        return EXIT_ERROR
    code, message = exit_code(status)
    if message is not None and code != EXIT_OK:
        say(f"{session_id} {message}")
    return code


__all__ = ["DETACH_KEY_NAME", "finish", "run_attach", "stdin_mode"]
