"""`FrameLengths` finds frame boundaries as wsproto writes them, split anywhere."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.frame_protocol import FrameProtocol, Opcode

from runnerd.http.wsframes import FrameLengths, binary_frames

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


# Payload sizes on each side of the 7-, 16- and 64-bit length encodings
# (a frame carries the 4-byte seq too).
EDGES = [0, 121, 122, 65531, 65532, 65536]


@given(
    st.lists(
        st.tuples(st.integers(0, 2**32 - 1), st.sampled_from(EDGES) | st.integers(0, 300)),
        max_size=6,
    )
)
@settings(max_examples=60, deadline=None)
def test_binary_frames_parse_back_as_one_message_per_chunk(chunks: list[tuple[int, int]]) -> None:
    """What a client (wsproto's own frame reader) makes of several frames
    written at once: one binary message per chunk, in order, each the 4-byte
    big-endian seq then that chunk's bytes."""
    entries = [(seq, bytes([seq % 251]) * size) for seq, size in chunks]
    reader = FrameProtocol(client=True, extensions=[])
    reader.receive_bytes(binary_frames(entries))
    got = []
    for frame in reader.received_frames():
        assert frame.opcode is Opcode.BINARY and frame.frame_finished and frame.message_finished
        got.append((int.from_bytes(frame.payload[:4], "big"), bytes(frame.payload[4:])))
    assert got == entries
