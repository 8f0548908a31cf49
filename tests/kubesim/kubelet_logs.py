"""Container logs: what the runtime's log file holds for one container run, and reading it.

`ContainerLog` records a container's output as CRI does: stdout and stderr are
split into lines, each stamped with the time it arrived; a partial line is held
until its newline or the container's end. `read_log` renders a `pods/log` request
from it: `tailLines`, `sinceSeconds`/`sinceTime`, `timestamps` (RFC3339 with 9
fractional digits, as the kubelet's `timeFormatOut`), `limitBytes`, and `follow`
(new lines until the container ends).

`validate_log_target` is the kubelet's `validateContainerLogStatus`: which
container states have logs, and the exact 400 text for those that do not.

Limits: a run keeps at most `MAX_LOG_BYTES` (older lines are dropped, as log
rotation would); restarts are not simulated, so there is never a previous run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import trio

Obj = dict[str, Any]
MAX_LOG_BYTES = 10 * 1024 * 1024  # the kubelet's default containerLogMaxSize
STREAMS = {1: "stdout", 2: "stderr"}


@dataclass(frozen=True)
class LogLine:
    at: dt.datetime
    stream: str
    text: bytes  # with its newline, unless the run ended mid-line


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since: dt.datetime | None = None


@dataclass(eq=False)
class ContainerLog:
    """One container run's output; `write` is synchronous and never blocks."""

    lines: list[LogLine] = field(default_factory=list)
    ended: bool = False
    dropped: int = 0  # lines rotated away from the front
    _partial: dict[int, bytes] = field(default_factory=dict)
    _changed: trio.Event = field(default_factory=trio.Event)
    _size: int = 0

    def write(self, channel: int, data: bytes) -> None:
        pending = self._partial.pop(channel, b"") + data
        *complete, rest = pending.split(b"\n")
        for text in complete:
            self._append(channel, text + b"\n")
        if rest:
            self._partial[channel] = rest
        self._wake()

    def end(self) -> None:
        """The run is over: flush partial lines, wake followers for the last time."""
        for channel, rest in sorted(self._partial.items()):
            self._append(channel, rest)
        self._partial.clear()
        self.ended = True
        self._wake()

    def _append(self, channel: int, text: bytes) -> None:
        now = dt.datetime.now(dt.UTC)
        self.lines.append(LogLine(now, STREAMS.get(channel, "stdout"), text))
        self._size += len(text)
        while self._size > MAX_LOG_BYTES and len(self.lines) > 1:
            self._size -= len(self.lines.pop(0).text)
            self.dropped += 1

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def changed(self) -> None:
        await self._changed.wait()


def format_line(line: LogLine, *, timestamps: bool) -> bytes:
    if not timestamps:
        return line.text
    at = line.at
    stamp = f"{at:%Y-%m-%dT%H:%M:%S}.{at.microsecond * 1000:09d}Z "
    return stamp.encode() + line.text


async def read_log(log: ContainerLog, opts: LogOptions) -> AsyncIterator[bytes]:
    """The chunks of a pods/log body; with `follow`, until the run ends."""
    lines = [ln for ln in log.lines if opts.since is None or ln.at >= opts.since]
    if opts.tail_lines is not None:
        lines = lines[len(lines) - opts.tail_lines :] if opts.tail_lines else []
    budget = opts.limit_bytes
    upto = log.dropped + len(log.lines)  # absolute index of the next line to send
    while True:
        for line in lines:
            chunk = format_line(line, timestamps=opts.timestamps)
            if budget is not None:
                chunk = chunk[:budget]
                budget -= len(chunk)
            if chunk:
                yield chunk
            if budget == 0:
                return
        if not opts.follow or log.ended:
            return
        await log.changed()
        lines = log.lines[max(0, upto - log.dropped) :]
        upto = log.dropped + len(log.lines)


def validate_log_target(pod: Obj, container: str, *, previous: bool) -> str | None:
    """None when `container` has logs to read, else the kubelet's error text (a 400)."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    every = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    cs = next((c for c in every if c.get("name") == container), None)
    if cs is None:
        return f'container "{container}" in pod "{name}" is waiting to start - no logs yet'
    state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
    if previous:
        if not last or not last.get("containerID"):
            return f'previous terminated container "{container}" in pod "{name}" not found'
        return None
    if "running" in state or (state.get("terminated") or {}).get("containerID"):
        return None
    if "terminated" in state or last is not None:
        if last and last.get("containerID"):
            return None
        return f'container "{container}" in pod "{name}" is terminated'
    reason = (state.get("waiting") or {}).get("reason", "")
    why = {
        "ErrImagePull": "image can't be pulled",
        "ImagePullBackOff": "trying and failing to pull image",
    }.get(reason, reason)
    return f'container "{container}" in pod "{name}" is waiting to start: {why}'
