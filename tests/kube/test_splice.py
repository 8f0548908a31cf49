"""`terminal.Splice`: the log read ahead of the attach stream, each byte once,
whenever the attach's bytes arrive (before the log is back, or after)."""

from __future__ import annotations

import pytest

from runnerd.kube.terminal import LOG_READ_BYTES, LOST_LINE, Splice

OUTPUT = b"REG=https://env.example.\r\nsecond line\r\n"
GAP = b"<gap>"  # where the splice reported the loss (`Sink.output_lost`)


def splice() -> tuple[Splice, bytearray]:
    written = bytearray()
    return Splice(written.extend, lambda: written.extend(GAP)), written


@pytest.mark.parametrize("start", [0, 4, len(OUTPUT) - 1, len(OUTPUT)])
@pytest.mark.parametrize("before", [0, 3, 100])
def test_attach_bytes_held_or_late_are_written_once(start: int, before: int) -> None:
    # The attach came up at `start` of the container's output; the log was
    # read at its end; `before` bytes of the attach arrived before the log.
    sp, written = splice()
    attach = OUTPUT[start:] + b"after the log\r\n"
    sp.feed(attach[:before])
    sp.release(OUTPUT)
    for i in range(before, len(attach), 5):  # the rest in small chunks
        sp.feed(attach[i : i + 5])
    assert bytes(written) == OUTPUT + b"after the log\r\n"
    assert sp.emitted == len(written)


def test_a_late_attach_that_only_repeats_the_log_writes_nothing_more() -> None:
    sp, written = splice()
    sp.release(OUTPUT)
    sp.feed(OUTPUT[3:10])
    sp.flush()  # the attach ended with the container
    assert bytes(written) == OUTPUT


def test_new_output_after_the_log_passes_at_once() -> None:
    sp, written = splice()
    sp.release(b"")
    sp.feed(b"fresh")
    assert bytes(written) == b"fresh"


def test_catch_up_adds_what_a_cut_short_attach_never_delivered() -> None:
    sp, written = splice()
    sp.release(OUTPUT[:10])
    sp.feed(OUTPUT[5:12])  # then the attach was cut before the rest came
    sp.catch_up(OUTPUT + b"tail")
    assert bytes(written) == OUTPUT + b"tail"


def test_catch_up_without_any_attach_writes_the_whole_log() -> None:
    sp, written = splice()
    sp.feed(OUTPUT[20:])
    sp.catch_up(OUTPUT)
    assert bytes(written) == OUTPUT


def test_after_a_dropped_attach_the_next_one_is_backfilled_from_the_log() -> None:
    # Written while no attach was up: the log past what was delivered has it.
    sp, written = splice()
    sp.release(b"one\r\n")
    sp.resume()
    sp.feed(b"three\r\n")  # the new attach, up before the log read
    sp.release(b"one\r\ntwo\r\nthree\r\n")
    sp.feed(b"four\r\n")
    assert bytes(written) == b"one\r\ntwo\r\nthree\r\nfour\r\n"
    assert not sp.lost


def test_after_a_dropped_attach_catch_up_adds_what_the_log_has_past_it() -> None:
    # No attach came up again before the container ended.
    sp, written = splice()
    sp.release(b"one\r\n")
    sp.resume()
    sp.catch_up(b"one\r\ntwo\r\nthree\r\n")
    assert bytes(written) == b"one\r\ntwo\r\nthree\r\n"


@pytest.mark.parametrize(
    "log_bytes",
    [None, b"on", b"x" * (LOG_READ_BYTES + 5)],
    ids=["unreadable", "rotated", "past-the-read-limit"],
)
def test_a_drop_the_log_cannot_backfill_says_output_was_lost_once(log_bytes: bytes | None) -> None:
    sp, written = splice()
    sp.release(b"one\r\n")
    sp.resume()
    sp.feed(b"three\r\n")
    sp.release(log_bytes)
    assert bytes(written) == b"one\r\n" + GAP + LOST_LINE + b"three\r\n"
    assert sp.lost and not sp.tracking
    sp.catch_up(b"one\r\ntwo\r\nthree\r\nfour\r\n")  # positions unknown: nothing added
    assert bytes(written) == b"one\r\n" + GAP + LOST_LINE + b"three\r\n"


def test_an_attach_that_came_up_too_late_is_made_good_from_the_final_log() -> None:
    # The log was read before the container wrote; the attach subscribed
    # after it had: neither saw the output, the log after its end has it.
    sp, written = splice()
    sp.release(b"")
    assert sp.fed == 0
    sp.catch_up(OUTPUT)
    assert bytes(written) == OUTPUT


def test_attach_bytes_past_the_log_wait_for_a_second_read_that_fills_the_gap() -> None:
    # The attach joined after "B" was written past the log read: the second
    # read has it, and the attach's own bytes are written once after it.
    sp, written = splice()
    asked: list[bool] = []
    sp.reread = lambda: asked.append(True)
    sp.release(b"A\r\n")
    sp.feed(b"C\r\n")
    assert asked == [True] and bytes(written) == b"A\r\n"  # held until the read is back
    sp.feed(b"D\r\n")
    sp.reread_done(b"A\r\nB\r\nC\r\n")
    sp.feed(b"E\r\n")
    assert bytes(written) == b"A\r\nB\r\nC\r\nD\r\nE\r\n"
    assert asked == [True]  # one second read, never more


def test_output_that_starts_after_the_attach_is_read_again_once_not_repeated() -> None:
    sp, written = splice()
    sp.reread = lambda: None
    sp.release(b"")
    sp.feed(b"first")
    sp.reread_done(b"first")
    sp.feed(b" second")
    assert bytes(written) == b"first second"
