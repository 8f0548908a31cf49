"""A session pod's terminal for the session: the attach kept up, nothing lost.

Owns three things between `attach.run_attach` and the session's sink:

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
  read is in both); see its docstring for late attach bytes. Chosen over
  holding the workload until the attach is up: that needs a wrapper in the
  session image, and a fast `print; exit` ends before any attach could
  connect.
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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

import trio

import runnerd.kube.errors as errors
from runnerd.kube.attach import AttachEnd, Terminal, run_attach
from runnerd.kube.client import KubeClient

log = logging.getLogger(__name__)

# Stdin held before the first attach is up; beyond it, input is dropped
# (as the attach's own queue does).
MAX_HELD_STDIN_BYTES = 1024 * 1024
# Attach output held while the log is read; beyond it the splice gives up
# looking for an overlap (and may repeat a little output rather than lose it).
MAX_HELD_OUTPUT_BYTES = 4 * 1024 * 1024
REATTACH_FIRST_S = 0.2
REATTACH_CAP_S = 5.0
# An adopted session's splice passes through (its log is output the previous
# daemon delivered), so a drop there cannot be backfilled.
DROPPED_LINE = (
    b"\r\n[runnerd: the terminal connection to the session pod dropped; reconnecting."
    b" Output may have been missed.]\r\n"
)
LOST_LINE = (
    b"\r\n[runnerd: the terminal connection to the session pod dropped and the output"
    b" written meanwhile could not be read back from the pod's log; some is missing.]\r\n"
)
LOG_OPERATION = "could not read the session's output"
# What one log read returns at most (the first bytes of the log). A
# backfill reads what was delivered plus this much, up to BACKFILL_MAX_BYTES
# delivered: past that, a drop is reported as a loss instead.
LOG_READ_BYTES = 1024 * 1024
BACKFILL_MAX_BYTES = 32 * 1024 * 1024


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


def overlap(log_bytes: bytes, held: bytes) -> int:
    """The length of the longest tail of `log_bytes` that is a head of `held`."""
    for size in range(min(len(log_bytes), len(held)), 0, -1):
        if log_bytes.endswith(held[:size]):
            return size
    return 0


class Splice:
    """Output in order: the log read ahead of the attach stream, once.

    The attach stream starts somewhere in the log's tail (it was up before the
    log was read), but its bytes may arrive after the log is back: until the
    attach bytes reach past the log's end (or differ from it), they are held
    as likely repeats of the log (`_pending`), at most the log's length.
    An attach joins the container's output only some time after its
    handshake, so output written in between is in neither the log read nor
    the attach: when the attach's first bytes are not in the log read, they
    are held for a second read (`reread`, once), which has everything up to
    them. `emitted` counts the container's bytes written so far, so
    `catch_up` can add what a cut-short attach, or one that saw nothing,
    never delivered, once the container has ended. `resume` after a dropped
    attach holds the next attach's bytes the same way, and `release` then
    writes only the log past `emitted` (the backfill). Where output is lost,
    `lost` is called at that place, then a line says so (`LOST_LINE`).
    Content decides what repeats: output identical to the log's tail, sent
    again right after the attach came up, is taken for a repeat.
    """

    def __init__(self, emit: Callable[[bytes], None], lost: Callable[[], None]) -> None:
        self._emit_raw = emit
        self._lost_raw = lost
        self._held: bytearray | None = bytearray()
        self._aligning = False  # the log is out; attach bytes may still repeat it
        self._log = b""  # the log read, while aligning
        self._pending = b""
        self._tracking = True
        # Set by `keep_attached`: start a second log read (`reread_done`).
        self.reread: Callable[[], None] | None = None
        self._rereading = False
        self._reread_spent = False
        self.emitted = 0
        self.fed = 0  # attach bytes seen: none, and the attach may have come up too late
        self.lost = False  # output was lost (said once in the terminal)
        self._dropped = False  # an attach dropped while the container ran

    def pass_through(self) -> None:
        """No log splicing at all: an adopted pod's log is output the previous
        daemon already delivered, so attach bytes go straight out and nothing
        is caught up from the log."""
        self._held, self._aligning, self._tracking, self._reread_spent = None, False, False, True

    @property
    def released(self) -> bool:
        return self._held is None

    @property
    def tracking(self) -> bool:
        """Whether `emitted` still says where the stream is in the log."""
        return self._tracking

    def log_limit_bytes(self) -> int:
        """How much of the log the next read needs (what was delivered, and more)."""
        return self.emitted + LOG_READ_BYTES

    def _emit(self, data: bytes) -> None:
        self.emitted += len(data)
        self._emit_raw(data)

    def feed(self, data: bytes) -> None:
        self.fed += len(data)
        if self._held is not None:
            self._held += data
        elif self._aligning:
            self._align(self._pending + data)
        else:
            self._emit(data)

    def release(self, log_bytes: bytes | None) -> None:
        """The log is back (None: it could not be read): write what of it was
        not written yet, then the held attach bytes it lacks."""
        if self._held is None:
            return
        held, self._held = bytes(self._held), None
        if self.emitted and not self._backfills(log_bytes):
            self._say_lost()
            self._emit(held)
            return
        log_bytes = log_bytes or b""
        if log_bytes[self.emitted :]:
            self._emit(log_bytes[self.emitted :])
        if len(held) > MAX_HELD_OUTPUT_BYTES:  # too much to compare: repeat rather than lose
            self._emit(held)
            return
        self._log, self._aligning = log_bytes, True
        self._align(held)

    def _align(self, attach: bytes) -> None:
        log_bytes = self._log
        inside = log_bytes.find(attach)
        if self._rereading or not attach or 0 <= inside < len(log_bytes) - len(attach):
            self._pending = attach  # all of it may repeat the log: wait for more
            return
        skip = overlap(log_bytes, attach)
        if not skip and self.reread is not None and self._tracking and not self._reread_spent:
            # The attach's first bytes are not in the log: it may have joined
            # the output after some was written past the read. A second read
            # has everything up to them at least.
            self._rereading = self._reread_spent = True
            self._pending = attach
            self.reread()
            return
        self._aligning, self._log, self._pending = False, b"", b""
        if attach[skip:]:
            self._emit(attach[skip:])

    def reread_done(self, log_bytes: bytes) -> None:
        """The second log read is back: write what the first lacked, then
        the held attach bytes past it."""
        self._rereading = False
        if not self._aligning:
            return
        if log_bytes.startswith(self._log) and len(log_bytes) > len(self._log):
            self._emit(log_bytes[len(self._log) :])
            self._log = log_bytes
        self._align(self._pending)

    def _backfills(self, log_bytes: bytes | None) -> bool:
        """Whether `log_bytes` holds everything past `emitted` up to a new
        attach: read, not shorter than what was delivered (rotated), not cut
        at its read limit, and `emitted` still a place in it."""
        return (
            self._tracking
            and log_bytes is not None
            and len(log_bytes) >= self.emitted
            and len(log_bytes) < self.log_limit_bytes()
        )

    def _say_lost(self) -> None:
        """Output is missing: say so once, and stop counting positions."""
        if not self.lost:
            self._lost_raw()
            self._emit_raw(LOST_LINE)
        self.lost, self._tracking = True, False

    def say_dropped(self) -> None:
        """An attach dropped with nothing to backfill from (passing through,
        or positions already lost): what the container writes until the next
        attach is up is missed. Report the place, then say so in a line."""
        self._lost_raw()
        self._emit_raw(DROPPED_LINE)

    def resume(self) -> None:
        """The attach dropped: hold the next one's bytes until the log is
        read again (`release`), which backfills what was written meanwhile.
        Passing through (no positions known), nothing can be backfilled.
        Still holding (no log read back yet), that read releases it all."""
        self._dropped = True
        if self._held is not None:
            return
        self.flush()
        if not self._tracking:
            return
        if self.emitted > BACKFILL_MAX_BYTES:  # too much log to read past
            self._say_lost()
            return
        self._held, self._reread_spent = bytearray(), False

    def flush(self) -> None:
        """The attach ended: what it sent that still looked like a repeat was one."""
        self._aligning, self._rereading, self._log, self._pending = False, False, b"", b""

    def catch_up(self, final_log: bytes | None) -> None:
        """The container ended but its attach was cut short: `final_log` (its
        whole output; None: unreadable, so output may be missing) past what
        was already written."""
        self.release(final_log)
        self.flush()
        if not self._tracking:
            return
        if final_log is None:
            if self._dropped:  # what the dropped attach missed is nowhere else
                self._say_lost()
        elif len(final_log) > self.emitted:
            self._emit(final_log[self.emitted :])


async def read_log(client: KubeClient, pod: str, limit_bytes: int = LOG_READ_BYTES) -> bytes | None:
    """The container's output so far (its first `limit_bytes`); None when it
    cannot be read (logged)."""
    try:
        return await client.read_log(
            pod, container="session", operation=LOG_OPERATION, limit_bytes=limit_bytes
        )
    except errors.KubeError as exc:
        log.warning("could not read the pod's log: %r", exc.__cause__ or exc, extra={"pod": pod})
        return None


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

    async def read(self, client: KubeClient, pod: str, splice: Splice) -> None:
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
        splice.release(await read_log(client, pod, splice.log_limit_bytes()))


async def keep_attached(
    client: KubeClient,
    pod: str,
    relay: Relay,
    splice: Splice,
    emit: Callable[[bytes], None],
    pod_runs: Callable[[], bool],
    quiet_s: float = 0.0,
) -> bool:
    """Attach to `pod` until its terminal ends, re-attaching while `pod_runs()`.

    An attach that comes up while the splice holds also starts its log read
    (after the attach's first output, or `quiet_s` of silence). Returns when
    an attach ends with the container (True: it delivered all the output),
    or the pod stops running (False); a read still waiting then is not sent.
    """
    reads = _SpliceRead(quiet_s)
    async with trio.open_nursery() as nursery:

        async def reread() -> None:
            splice.reread_done(await read_log(client, pod, splice.log_limit_bytes()) or b"")

        splice.reread = lambda: nursery.start_soon(reread)
        try:
            return await _attach_until_end(
                client, pod, relay, splice, emit, pod_runs, nursery, reads
            )
        finally:
            reads.attach_ended()
            splice.reread = None  # the nursery is closing: no second read past it


async def _attach_until_end(
    client: KubeClient,
    pod: str,
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
            nursery.start_soon(reads.read, client, pod, splice)

    def output(data: bytes) -> None:
        splice.feed(data)
        reads.spoke.set()

    while True:
        status = cast("trio.TaskStatus[Terminal]", _OnAttached(up))
        refused: errors.KubeError | None = None
        try:
            end = await run_attach(client, pod, on_output=output, task_status=status)
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
