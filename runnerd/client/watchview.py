"""What `runnerd watch` shows: every app's output and runs, as lines. Pure.

Owns `Screen`, the one writer of the watch view (two byte streams, ours):
- app output on stdout, each line prefixed with the app's name padded to
  the longest (`web | hello`), as `docker compose up` shows its services;
  a `streams` app's stderr goes to our stderr with `!` for `|`
  (`web ! oops`), so the two stay apart in a pipe and on a terminal;
- one line per run event on stderr, from `run_text`: `web #1 (initial)
  started`, `web #3 (watch) exited 0 in 0.4 s`, `web #4 (manual) failed:
  <reason>` (a code over 128 names its signal: `exited 143 (SIGTERM)`);
- runnerd's own lines (`note`) on stderr as `runnerd: ...`.
On a terminal (`colour`), each app's name is in its own colour, in the
order `docker compose` uses; `NO_COLOR` turns that off (the caller's rule).

Output arrives in chunks, not lines. A chunk that ends mid-line is shown at
once (a prompt must not wait for its newline); when another app's output or
a run line comes before that line ends, the open line is ended first and
the rest of it gets its prefix again when it comes.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any, BinaryIO

# docker compose's service colours: cyan, yellow, green, magenta, blue, then bright.
COLOURS = ("36", "33", "32", "35", "34", "96", "93", "92", "95", "94")
_RESET = b"\x1b[0m"
STDERR_STREAM = 2


def _signal_name(code: int) -> str | None:
    try:
        return signal.Signals(code - 128).name if code > 128 else None
    except ValueError:
        return None


def duration_text(ms: Any) -> str:
    """`0.4 s`, `12 s`, `3 min 5 s` for a duration in milliseconds."""
    if not isinstance(ms, int | float) or ms < 0:
        return "?"
    seconds = ms / 1000
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{round(seconds)} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def run_text(event: dict[str, Any], trigger: str | None) -> str:
    """A `run` event without its app name: `#3 (watch) exited 0 in 0.4 s`.
    `trigger` is the one its generation started with (a `completed` or
    `failed` event does not carry it)."""
    head = f"#{event.get('generation', '?')}" + (f" ({trigger})" if trigger else "")
    phase = event.get("phase")
    if phase == "started":
        telo = event.get("telo")
        return f"{head} started" + (f" (telo {telo})" if telo else "")
    if phase == "completed":
        code = event.get("code")
        name = _signal_name(code) if isinstance(code, int) else None
        code_text = f"{code} ({name})" if name else f"{code}"
        return f"{head} exited {code_text} in {duration_text(event.get('durationMs'))}"
    if phase == "failed":
        return f"{head} failed: {event.get('reason', '')}"
    return f"{head} {phase}"


def endpoints_text(event: dict[str, Any]) -> str:
    """An `endpoints` event without its app name: `ports +8080/tcp -9090/tcp`."""

    def one(e: Any) -> str:
        return f"{e.get('port')}/{e.get('protocol')}" if isinstance(e, dict) else str(e)

    parts = [f"+{one(e)}" for e in event.get("added") or []]
    parts += [f"-{one(e)}" for e in event.get("removed") or []]
    parts += [f"refused {r.get('port')}: {r.get('reason')}" for r in event.get("rejected") or []]
    return "ports " + " ".join(parts)


class Screen:
    """The watch view on `out` (app output) and `err` (everything else).
    Every write is flushed at once."""

    def __init__(self, apps: Sequence[str], out: BinaryIO, err: BinaryIO, *, colour: bool) -> None:
        self.out = out
        self.err = err
        self.colour = colour
        self.width = max((len(a) for a in apps), default=3)
        self._colours: dict[str, str] = {}
        for app in apps:
            self._colour_of(app)
        self._open: tuple[str, int] | None = None  # whose line is open (unended) on screen

    def _colour_of(self, app: str) -> str:
        if app not in self._colours:
            self._colours[app] = COLOURS[len(self._colours) % len(COLOURS)]
        return self._colours[app]

    def _name(self, app: str) -> bytes:
        self.width = max(self.width, len(app))
        name = app.ljust(self.width).encode()
        if not self.colour:
            return name
        return f"\x1b[{self._colour_of(app)}m".encode() + name + _RESET

    def _stream_of(self, stream: int) -> BinaryIO:
        return self.err if stream == STDERR_STREAM else self.out

    def _end_open_line(self) -> None:
        if self._open is not None:
            stream = self._stream_of(self._open[1])
            stream.write(b"\n")
            stream.flush()
            self._open = None

    def end(self) -> None:
        """End a line left open (the view is over)."""
        self._end_open_line()

    def output(self, app: str, stream: int, data: bytes) -> None:
        """A chunk of `app`'s output (`stream`: 0 tty, 1 stdout, 2 stderr)."""
        if not data:
            return
        key = (app, stream)
        if self._open != key:
            self._end_open_line()
        target = self._stream_of(stream)
        mark = b" ! " if stream == STDERR_STREAM else b" | "
        pieces = data.split(b"\n")
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            if last and not piece:
                break  # the chunk ended a line: the next one gets its prefix
            if self._open != key:
                target.write(self._name(app) + mark)
            target.write(piece)
            self._open = key
            if not last:
                target.write(b"\n")
                self._open = None
        target.flush()

    def app_line(self, app: str, text: str) -> None:
        """A line of runnerd's about `app` (a run, its ports): `web #3 ...`."""
        self._end_open_line()
        body = text.encode(errors="replace")
        if self.colour:
            body = b"\x1b[2m" + body + _RESET  # dim: runnerd's, not the app's
        self.err.write(self._name(app) + b" " + body + b"\n")
        self.err.flush()

    def note(self, text: str) -> None:
        """A line of runnerd's own: `runnerd: ...`."""
        self._end_open_line()
        self.err.write(f"runnerd: {text}\n".encode(errors="replace"))
        self.err.flush()
