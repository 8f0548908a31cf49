"""A session pod's terminal for the session: the attach kept up, nothing lost.

Owns three things between `attach.run_attach` and the session's sink (the
splice itself, pure, is `runnerd.kube.splice`'s; its names re-exported here):

- `Relay`, the `WorkloadHandle` the manager gets as soon as the pod runs:
  stdin and resizes go to the current attach; before the first attach is up
  they are held (bounded), so stdin sent on seeing `running` is not lost.
- `Splice`: output the container wrote before the attach was up is read from
  `pods/log` and put ahead of the attach stream. The read goes out when the
  attach first delivers output (the log then holds everything up to where
  the attach joined, so one read finds the seam), after `attach_quiet_s`
  of silence (output written before the attach shows without waiting for
  more), or not at all when the attach ends first (the caller reads the
  log whole once). The attach's bytes are held until that read is back;
  the longest tail of the log that is also the head of the held bytes is
  written once (the container's output from the attach's start to the log
  read is in both); see its docstring for late attach bytes. A program
  held until the first attach is up (a bundle session's, through the
  image's `sh`: `podspec.gated_command`) needs none of this: its splice
  starts released (`Splice.from_start`), and only a re-attach reads the log.
  Catalog apps (their own entrypoint) and adopted pods still read it.
- `keep_attached`: an attach that drops while the pod runs is re-attached
  with capped backoff, and what the container wrote meanwhile is backfilled
  from `pods/log` the same way (`Splice.resume`): the log past the bytes
  already delivered goes ahead of the new attach's stream, so an apiserver
  outage loses nothing. Where the log cannot say (unreadable, rotated
  shorter than what was delivered, past its read limit), or there is no log
  to read from (an adopted session's splice passes through), the loss is
  reported at its place (`Sink.output_lost`: a `gap` frame for `/io`
  readers) and one line in the terminal says so for a human, who sees no
  frames. A refused attach writes its classified
  reason the same way; an unreachable apiserver is only waited out.

Any container of the pod (`container=`; a run pod's `session` by default, a
watch pod's `app-<name>` or `agent`): its own attach and its own log. A
container without a TTY (a `streams` app) has its stderr handed apart
(`on_stderr`, straight from the attach); `pods/log` interleaves the two
streams, so the caller runs such a container's splice as `pass_through`
(a drop is then reported as a `gap`, not backfilled into the wrong stream).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import cast

import trio

import runnerd.kube.errors as errors
from runnerd.kube.attach import AttachEnd, Terminal, run_attach
from runnerd.kube.client import KubeClient
from runnerd.kube.splice import BACKFILL_MAX_BYTES as BACKFILL_MAX_BYTES
from runnerd.kube.splice import DROPPED_LINE as DROPPED_LINE
from runnerd.kube.splice import LOG_READ_BYTES as LOG_READ_BYTES
from runnerd.kube.splice import LOST_LINE as LOST_LINE
from runnerd.kube.splice import MAX_HELD_OUTPUT_BYTES as MAX_HELD_OUTPUT_BYTES
from runnerd.kube.splice import Splice as Splice

log = logging.getLogger(__name__)

# Stdin held before the first attach is up; beyond it, input is dropped
# (as the attach's own queue does).
MAX_HELD_STDIN_BYTES = 1024 * 1024
REATTACH_FIRST_S = 0.2
REATTACH_CAP_S = 5.0
LOG_OPERATION = "could not read the session's output"


def notice(text: str) -> bytes:
    """One line of runnerd's own in the terminal stream."""
    return f"\r\n[runnerd: {text}]\r\n".encode()


class Relay:
    """The session's `WorkloadHandle`: forwards to the current attach."""

    def __init__(self) -> None:
        self._terminal: Terminal | None = None
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._size: tuple[int, int] | None = None

    def write(self, data: bytes) -> None:
        if self._terminal is not None:
            self._terminal.write(data)
        elif self._held_bytes + len(data) <= MAX_HELD_STDIN_BYTES:
            self._held.append(data)
            self._held_bytes += len(data)

    def resize(self, cols: int, rows: int) -> None:
        self._size = (cols, rows)
        if self._terminal is not None:
            self._terminal.resize(cols, rows)

    def attached(self, terminal: Terminal | None) -> None:
        """A new attach is up (None: it ended): flush what was held, re-send the size."""
        self._terminal = terminal
        if terminal is None:
            return
        if self._size is not None:
            terminal.resize(*self._size)
        for data in self._held:
            terminal.write(data)
        self._held, self._held_bytes = [], 0


async def read_log(
    client: KubeClient, pod: str, limit_bytes: int = LOG_READ_BYTES, *, container: str = "session"
) -> bytes | None:
    """`container`'s output so far (its first `limit_bytes`); None when it
    cannot be read (logged)."""
    try:
        return await client.read_log(
            pod, container=container, operation=LOG_OPERATION, limit_bytes=limit_bytes
        )
    except errors.KubeError as exc:
        log.warning(
            "could not read the %s container's log: %r",
            container,
            exc.__cause__ or exc,
            extra={"pod": pod},
        )
        return None


LogReader = Callable[[int], Awaitable[bytes | None]]


class _OnAttached:
    """`run_attach`'s task_status: called when an attach is up."""

    def __init__(self, callback: Callable[[Terminal], None]) -> None:
        self._callback = callback

    def started(self, value: Terminal) -> None:
        self._callback(value)


class _SpliceRead:
    """The splice's log read once an attach is up (module docstring): after
    the attach's first output or `quiet_s` of silence; never once the
    attach ended first (`attach_ended`)."""

    def __init__(self, quiet_s: float) -> None:
        self._quiet_s = quiet_s
        self.spoke = trio.Event()  # the current attach delivered output
        self._waits: set[trio.CancelScope] = set()

    def attach_up(self) -> None:
        self.spoke = trio.Event()

    def attach_ended(self) -> None:
        """The terminal ended: reads still waiting are not sent."""
        for scope in list(self._waits):
            scope.cancel()

    async def read(self, read: LogReader, splice: Splice) -> None:
        spoke = self.spoke
        with trio.CancelScope() as waiting:
            self._waits.add(waiting)
            try:
                with trio.move_on_after(self._quiet_s):
                    await spoke.wait()
            finally:
                self._waits.discard(waiting)
        if waiting.cancelled_caught or splice.released:  # a stop's read released it
            return
        splice.release(await read(splice.log_limit_bytes()))


async def keep_attached(
    client: KubeClient,
    pod: str,
    relay: Relay,
    splice: Splice,
    emit: Callable[[bytes], None],
    pod_runs: Callable[[], bool],
    quiet_s: float = 0.0,
    *,
    container: str = "session",
    tty: bool = True,
    on_stderr: Callable[[bytes], None] | None = None,
) -> bool:
    """Attach to `pod`'s `container` until its terminal ends, re-attaching
    while `pod_runs()` (for a watch pod's app: while its container runs).

    An attach that comes up while the splice holds also starts its log read
    (after the attach's first output, or `quiet_s` of silence). Returns when
    an attach ends with the container (True: it delivered all the output),
    or the pod stops running (False); a read still waiting then is not sent.
    `tty`/`on_stderr`: as `attach.run_attach`'s (stderr bypasses the splice).
    """
    reads = _SpliceRead(quiet_s)
    read = functools.partial(read_log, client, pod, container=container)
    attach = functools.partial(
        run_attach, client, pod, container=container, tty=tty, on_stderr=on_stderr
    )
    async with trio.open_nursery() as nursery:

        async def reread() -> None:
            splice.reread_done(await read(splice.log_limit_bytes()) or b"")

        splice.reread = lambda: nursery.start_soon(reread)
        try:
            return await _attach_until_end(
                client, pod, attach, read, relay, splice, emit, pod_runs, nursery, reads
            )
        finally:
            reads.attach_ended()
            splice.reread = None  # the nursery is closing: no second read past it


async def _attach_until_end(
    client: KubeClient,
    pod: str,
    attach: Callable[..., Awaitable[AttachEnd]],
    read: LogReader,
    relay: Relay,
    splice: Splice,
    emit: Callable[[bytes], None],
    pod_runs: Callable[[], bool],
    nursery: trio.Nursery,
    reads: _SpliceRead,
) -> bool:
    delay = REATTACH_FIRST_S
    refusals_said = False
    attaches_up = 0

    def up(terminal: Terminal) -> None:
        nonlocal refusals_said, attaches_up
        refusals_said = False
        if attaches_up:  # one was up before and dropped: a re-attach
            client.metrics.attach_reconnect()
        attaches_up += 1
        relay.attached(terminal)
        reads.attach_up()
        if not splice.released:
            nursery.start_soon(reads.read, read, splice)

    def output(data: bytes) -> None:
        splice.feed(data)
        reads.spoke.set()

    while True:
        status = cast("trio.TaskStatus[Terminal]", _OnAttached(up))
        refused: errors.KubeError | None = None
        try:
            end = await attach(on_output=output, task_status=status)
        except errors.KubeError as exc:
            end, refused = AttachEnd.DROPPED, exc
        relay.attached(None)
        if end is AttachEnd.ENDED or not pod_runs():
            return end is AttachEnd.ENDED
        if refused is None or isinstance(refused, errors.Unreachable):
            passing = not splice.tracking  # nothing to backfill from: say so
            splice.resume()  # the next attach backfills from the log
            if passing and refused is None:
                splice.say_dropped()
        elif not refusals_said:  # once per run of refusals, not once per retry
            emit(notice(str(refused)))
            refusals_said = True
        log.warning(
            "attach %s; re-attaching in %.1f s", refused or "dropped", delay, extra={"pod": pod}
        )
        await trio.sleep(delay)
        delay = min(delay * 2, REATTACH_CAP_S)
        if not pod_runs():
            return False
