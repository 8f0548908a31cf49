"""`Splice` of a gated program (`podspec.gated_command`): the gate's marker
stripped from the head of the stream wherever it arrives from, and a ^D
asked for again only when a re-attach's log read shows the gate shut."""

from __future__ import annotations

import pytest

from runnerd.kube.podspec import GATE_MARKER
from runnerd.kube.splice import Splice

OUTPUT = b"ready\r\ngot:one\r\n"


def gated() -> tuple[Splice, bytearray, list[str]]:
    written, asked = bytearray(), []
    sp = Splice(written.extend, lambda: written.extend(b"<gap>"))
    sp.from_start()
    sp.strip_head(GATE_MARKER)
    sp.gate_shut = lambda: asked.append("^D")
    return sp, written, asked


@pytest.mark.parametrize("chunk", [1, 3, len(GATE_MARKER), 100])
def test_the_marker_is_stripped_in_any_chunking_and_counted_as_a_log_position(
    chunk: int,
) -> None:
    sp, written, _ = gated()
    stream = GATE_MARKER + OUTPUT
    for i in range(0, len(stream), chunk):
        sp.feed(stream[i : i + chunk])
    assert bytes(written) == OUTPUT
    assert sp.emitted == len(stream)  # the log has the marker: positions stay the log's


def test_a_head_that_is_not_the_marker_is_written_as_it_came() -> None:
    sp, written, _ = gated()
    sp.feed(GATE_MARKER[:4])
    sp.feed(b"xyz")
    assert bytes(written) == GATE_MARKER[:4] + b"xyz"


def test_a_catch_up_from_the_log_strips_the_marker_too() -> None:
    sp, written, _ = gated()
    sp.catch_up(GATE_MARKER + OUTPUT)
    assert bytes(written) == OUTPUT


def test_a_re_attach_whose_log_is_empty_asks_for_the_start_line_again() -> None:
    sp, written, asked = gated()
    sp.resume()  # the first attach dropped: its ^D may not have gone out
    sp.release(b"")
    assert asked == ["^D"] and bytes(written) == b""


@pytest.mark.parametrize("log_bytes", [GATE_MARKER, GATE_MARKER + OUTPUT, None])
def test_a_re_attach_that_finds_the_marker_or_no_log_sends_no_second_start_line(
    log_bytes: bytes | None,
) -> None:
    sp, written, asked = gated()
    sp.resume()
    sp.release(log_bytes)
    assert asked == []
    assert GATE_MARKER not in bytes(written)


def test_a_re_attach_after_output_never_asks_for_the_start_line() -> None:
    sp, _, asked = gated()
    sp.feed(GATE_MARKER + OUTPUT)
    sp.resume()
    sp.release(b"")  # a log read back empty after output (rotated): not a shut gate
    assert asked == []
