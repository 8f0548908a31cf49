"""An in-process backend that keeps the seam's promises, for the conformance suite.

Owns `FakeHost`, where fake workloads live (a cluster's stand-in: it outlives
any one backend, so a detached workload is still there for the next one's
`recover()`), and `FakeBackend`, the `runnerd.backend.Backend` on it. A
workload is a task in the host's nursery running its bundle's entry, a
script in a small line-oriented subset of sh:

    echo WORDS     one line of output ($NAME expands a variable read before)
    read NAME      one line of stdin into NAME
    exit [N]       end with code N (default 0); the end of the script is `exit 0`
    [exec] sleep S wait S seconds

Commands are separated by newlines or `;`, words are quoted as in sh. Only
image `sh` exists: another is a start failure (`provision: …`), as is a
script outside the subset (`boot: …`), both raised before `started`.

What it promises, as the real backends do: `Started` once the workload
exists and before any of its output reaches the sink; its exit code as
`Exited`; a STOP cancel ends the workload and removes its record before the
cancellation propagates; a DETACH leaves it running on the host; handle
calls never raise and are no-ops once it has ended.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from runnerd.backend import (
    EndIntent,
    Exited,
    ImageSpec,
    Outcome,
    Recovered,
    RunSpec,
    SessionIdentity,
    Sink,
    Started,
    StartError,
    WorkloadHandle,
)
from runnerd.contract import AvailabilityReport, exited, ready, running, unavailable

IMAGES = ("sh",)
COMMANDS = ("echo", "read", "exit", "sleep")
# A workload told to stop is gone within this (it only has to be cancelled).
STOP_GRACE_S = 2.0
# How long a start waits for the client's terminal size (`Sink.terminal_size`).
TERMINAL_WAIT_S = 30.0
_VARIABLE = re.compile(r"\$(\w+)")


def build_started(handle: WorkloadHandle) -> Started:
    """What the fake reports as started: the one place this suite builds a
    `Started` (the seam's value changes shape; only this follows it)."""
    return Started(handle)


def parse_script(text: str) -> list[list[str]]:
    """The commands of a script in the fake's sh subset.

    Raises:
        ValueError: a command outside the subset or with the wrong
            arguments, or unbalanced quotes.
    """
    commands: list[list[str]] = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";")
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token != ";":
                words.append(token)
                continue
            words = words[1:] if words[:1] == ["exec"] else words
            if words:
                commands.append(_checked(words))
            words = []
    return commands


def _checked(words: list[str]) -> list[str]:
    name, args = words[0], words[1:]
    if name not in COMMANDS:
        raise ValueError(f"{name!r} is not a command the fake runs")
    if name == "read" and len(args) != 1:
        raise ValueError("read takes one variable name")
    if name == "sleep" and (len(args) != 1 or not args[0].replace(".", "", 1).isdigit()):
        raise ValueError("sleep takes a number of seconds")
    if name == "exit" and (len(args) > 1 or not all(a.isdigit() for a in args)):
        raise ValueError("exit takes an exit code")
    return words


@dataclass
class Workload:
    """One workload on the host: its program, terminal and end."""

    identity: SessionIdentity
    program: list[list[str]]
    stdin: trio.MemorySendChannel[bytes]
    stdin_out: trio.MemoryReceiveChannel[bytes]
    output: trio.MemorySendChannel[bytes]
    output_out: trio.MemoryReceiveChannel[bytes]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    code: int = 137  # its exit code once `ended` is set (137: killed, as SIGKILL)
    size: tuple[int, int] = (80, 24)
    begin: trio.Event = field(default_factory=trio.Event)
    ended: trio.Event = field(default_factory=trio.Event)

    async def run(self) -> None:
        """Run the program once `begin` is set, until it exits or is killed
        (`scope` cancelled)."""
        with self.scope:
            await self.begin.wait()
            self.code = await self._execute()
        self.output.close()
        self.ended.set()

    async def _execute(self) -> int:
        variables: dict[str, str] = {}
        pending = b""
        for name, *args in self.program:
            words = [_VARIABLE.sub(lambda m: variables.get(m[1], ""), a) for a in args]
            if name == "echo":
                self.output.send_nowait(" ".join(words).encode() + b"\r\n")
            elif name == "read":
                while b"\n" not in pending and b"\r" not in pending:
                    pending += await self.stdin_out.receive()
                line, _, pending = re.split(rb"(\r\n|\r|\n)", pending, maxsplit=1)
                variables[words[0]] = line.decode()
            elif name == "sleep":
                await trio.sleep(float(words[0]))
            else:
                return int(words[0]) if words else 0
        return 0


class FakeHandle:
    """The workload's terminal: stdin into its buffer, resizes recorded; both
    never block, never raise, and do nothing once it has ended."""

    def __init__(self, workload: Workload) -> None:
        self._workload = workload

    def write(self, data: bytes) -> None:
        if self._workload.ended.is_set():
            return
        try:
            self._workload.stdin.send_nowait(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def resize(self, cols: int, rows: int) -> None:
        if not self._workload.ended.is_set():
            self._workload.size = (cols, rows)


class FakeHost:
    """Where workloads run, by session id; see the module docstring."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self.workloads: dict[str, Workload] = {}

    def create(self, identity: SessionIdentity, program: list[list[str]]) -> Workload:
        stdin, stdin_out = trio.open_memory_channel[bytes](math.inf)
        output, output_out = trio.open_memory_channel[bytes](math.inf)
        workload = Workload(identity, program, stdin, stdin_out, output, output_out)
        self.workloads[identity.session_id] = workload
        self._nursery.start_soon(workload.run)
        return workload

    async def remove(self, session_id: str) -> None:
        """Kill the workload (if it runs), wait until it has ended, forget it."""
        workload = self.workloads.get(session_id)
        if workload is None:
            return
        workload.scope.cancel()
        await workload.ended.wait()
        del self.workloads[session_id]


@asynccontextmanager
async def open_fake_host() -> AsyncIterator[FakeHost]:
    """A host for the block's life; what still runs on it at the end is killed."""
    async with trio.open_nursery() as nursery:
        yield FakeHost(nursery)
        nursery.cancel_scope.cancel()


class FakeBackend:
    """`runnerd.backend.Backend` on a `FakeHost`; see the module docstring."""

    name = "fake"
    notices: tuple[str, ...] = ()
    detach_supported = True
    # Run sessions only: the watch half is `tests/session/watchfake.py`'s.
    watch_io: tuple[str, ...] = ()

    def __init__(self, host: FakeHost) -> None:
        self._host = host
        self._attached: set[str] = set()

    @asynccontextmanager
    async def open_watch(self, spec: object, progress: object) -> AsyncIterator[object]:
        """No watch sessions here, as a backend without `watch_io` answers."""
        await trio.lowlevel.checkpoint()
        raise StartError("watch", "watch sessions are not available on the fake backend")
        yield  # pragma: no cover - an async generator, for the context manager

    async def recover(self) -> list[Recovered]:
        """The workloads no run of this backend is attached to; an ended one
        is reported with its exit and removed."""
        await trio.lowlevel.checkpoint()
        found: list[Recovered] = []
        for session_id, workload in list(self._host.workloads.items()):
            if session_id in self._attached:
                continue
            if not workload.ended.is_set():
                found.append(Recovered(workload.identity, running()))
            else:
                found.append(Recovered(workload.identity, exited(workload.code)))
                await self._host.remove(session_id)
        return found

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        await trio.lowlevel.checkpoint()
        if image.image in IMAGES:
            return ready()
        return unavailable(f"image {image.image!r} is not on the fake host")

    async def run(
        self, spec: RunSpec, sink: Sink, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> Outcome:
        try:
            workload = await self._find_or_create(spec, sink)
            self._attached.add(spec.session_id)
            task_status.started(build_started(FakeHandle(workload)))
            async for chunk in workload.output_out:
                sink.output(chunk)
            await workload.ended.wait()
            return Exited(workload.code)
        finally:
            self._attached.discard(spec.session_id)
            if sink.end_intent() is EndIntent.STOP:  # also after its own exit
                with trio.move_on_after(STOP_GRACE_S, shield=True):
                    await self._host.remove(spec.session_id)

    async def _find_or_create(self, spec: RunSpec, sink: Sink) -> Workload:
        """The workload to attach to, on a terminal of the client's size.

        Raises:
            StartError: nothing to re-attach to, or nothing it can run.
        """
        await trio.lowlevel.checkpoint()  # as any real start, it takes a moment
        if spec.creation is None:
            workload = self._host.workloads.get(spec.session_id)
            if workload is None:
                raise StartError("attach", "the workload is gone")
            return workload
        if spec.image.image not in IMAGES:
            raise StartError("provision", f"image {spec.image.image!r} is not on the fake host")
        files: Mapping[str, str] = dict(spec.bundle.files) if spec.bundle else {}
        entry = spec.bundle.entry if spec.bundle else ""
        try:
            program = parse_script(files[entry])
        except (KeyError, ValueError) as exc:
            raise StartError("boot", f"cannot run {entry!r}: {exc}") from exc
        workload = self._host.create(spec.identity, program)
        # Its terminal exists from its first instruction: it starts on the
        # client's size, as the local backend's PTY does.
        workload.size = await sink.terminal_size(TERMINAL_WAIT_S) or workload.size
        workload.begin.set()
        return workload
