"""`FrameLengths` finds frame boundaries as wsproto writes them, split anywhere."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.frame_protocol import FrameProtocol, Opcode

from runnerd.http.wsframes import FrameLengths

LIMIT = 300
FRAMES = st.lists(
    st.tuples(
        st.sampled_from([Opcode.BINARY, Opcode.TEXT, Opcode.PING]),
        st.integers(min_value=0, max_value=2 * LIMIT),
    ),
    max_size=8,
)


def _client_frames(frames: list[tuple[Opcode, int]]) -> bytes:
    """What a client (masking) sends: wsproto's own frame writer."""
    writer = FrameProtocol(client=True, extensions=[])
    out = b""
    for opcode, size in frames:
        if opcode is Opcode.PING:
            out += writer.ping(b"p" * min(size, 125))  # control frames are short
        else:
            out += writer.send_data("t" * size if opcode is Opcode.TEXT else b"b" * size)
    return out


@settings(max_examples=200, deadline=None)
@given(frames=FRAMES, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=6))
def test_frame_lengths_reports_the_first_frame_over_the_limit_however_split(
    frames: list[tuple[Opcode, int]], cuts: list[int]
) -> None:
    data = _client_frames(frames)
    sizes = [min(n, 125) if op is Opcode.PING else n for op, n in frames]
    expected = next((n for n in sizes if n > LIMIT), None)
    lengths = FrameLengths(LIMIT)
    found = None
    edges = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    for start, end in zip(edges, edges[1:], strict=False):
        found = lengths.feed(data[start:end])
        if found is not None:
            break
    assert found == expected


def test_frame_lengths_reads_a_64_bit_length_from_the_head_alone() -> None:
    lengths = FrameLengths(16 * 2**20)
    head = b"\x82\xff" + (2**63 - 1).to_bytes(8, "big") + b"\0\0\0\0"
    assert lengths.feed(head[:5]) is None  # not yet the whole head
    assert lengths.feed(head[5:]) == 2**63 - 1
