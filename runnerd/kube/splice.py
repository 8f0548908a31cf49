"""The splice of a session pod's output: its log read ahead of its attach
stream, each byte once (`Splice`; pure, no I/O: `terminal` feeds it the
attach's bytes and the log reads).

Owns what the splice holds and how far (`MAX_HELD_OUTPUT_BYTES`), how much
of the log one read asks for (`LOG_READ_BYTES`, `BACKFILL_MAX_BYTES`), and
the lines it writes where output is missing (`LOST_LINE`, `DROPPED_LINE`).
"""

from __future__ import annotations

from collections.abc import Callable

# Attach output held while the log is read; beyond it the splice gives up
# looking for an overlap (and may repeat a little output rather than lose it).
MAX_HELD_OUTPUT_BYTES = 4 * 1024 * 1024
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
# What one log read returns at most (the first bytes of the log). A
# backfill reads what was delivered plus this much, up to BACKFILL_MAX_BYTES
# delivered: past that, a drop is reported as a loss instead.
LOG_READ_BYTES = 1024 * 1024
BACKFILL_MAX_BYTES = 32 * 1024 * 1024


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
        self.gated = False  # `from_start`: the first attach saw all the output
        self._strip = b""  # `strip_head`: what of the marker is still to come
        self._marker = b""
        # Set for a gated program: a log read back empty, nothing written,
        # says its gate never got the start line (`podspec.GATE_MARKER`).
        self.gate_shut: Callable[[], None] | None = None

    def pass_through(self) -> None:
        """No log splicing at all: an adopted pod's log is output the previous
        daemon already delivered, so attach bytes go straight out and nothing
        is caught up from the log."""
        self._held, self._aligning, self._tracking, self._reread_spent = None, False, False, True

    def from_start(self) -> None:
        """The attach is up before the container writes anything (a gated
        program, `podspec.gated_command`): its bytes go straight out, nothing
        is read from the log for the start, and `emitted` still counts
        positions, so a dropped attach is backfilled from the log as ever."""
        self._held, self._aligning, self._reread_spent = None, False, True
        self.gated = True

    def strip_head(self, marker: bytes) -> None:
        """The stream from here starts with `marker` (the gate's, written
        once it released): not emitted, but counted as a log position. Bytes
        that turn out not to be it are emitted as they came."""
        self._strip = self._marker = marker

    def _stripped(self, data: bytes) -> bytes:
        expect = self._strip
        size = min(len(expect), len(data))
        if data[:size] == expect[:size]:
            self._strip = expect[size:]
            return data[size:]
        self._strip = b""  # not the marker: give back what looked like it
        return self._marker[: len(self._marker) - len(expect)] + data

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
        if self._strip:
            data = self._stripped(data)
            if not data:
                return
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
        if self.gate_shut is not None and log_bytes == b"" and not held and not self.emitted:
            self.gate_shut()  # the start line was lost with an attach: send it again
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
