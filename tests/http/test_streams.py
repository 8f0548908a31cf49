"""`runnerd.http.streams`: the stream bounds as counting rules, without sockets.

The daemon-level behaviour (1,000 subscribers, health still served) is
`tests/e2e/test_stream_caps.py`.
"""

from __future__ import annotations

import pytest

from runnerd.http.streams import (
    ListenerStreams,
    StreamSlot,
    SubscriberCounts,
    TooManyStreams,
    TooManySubscribers,
    reserved_connections,
    stream_share,
)


@pytest.mark.parametrize(
    ("cap", "reserved"),
    [(1, 0), (2, 1), (8, 1), (16, 2), (448, 56), (1000, 125)],
)
def test_reserved_connections_are_an_eighth_at_least_one_never_the_whole_cap(
    cap: int, reserved: int
) -> None:
    assert reserved_connections(cap) == reserved
    assert stream_share(cap) == cap - reserved


def test_claim_counts_both_bounds_and_release_is_idempotent() -> None:
    counts, listener = SubscriberCounts(), ListenerStreams("unix:/s", 16)
    slot = StreamSlot(listener)
    slot.claim(counts, "a", 2)
    slot.claim(counts, "a", 2)  # a second claim of one slot counts nothing
    assert counts.live("a") == 1 and listener.live == 1
    slot.release()
    slot.release()
    assert counts.live("a") == 0 and listener.live == 0


def test_the_session_bound_refuses_with_the_limit_and_counts_nothing() -> None:
    counts, listener = SubscriberCounts(), ListenerStreams("unix:/s", 1000)
    held = [StreamSlot(listener) for _ in range(3)]
    for slot in held:
        slot.claim(counts, "a", 3)
    with pytest.raises(TooManySubscribers) as refused:
        StreamSlot(listener).claim(counts, "a", 3)
    assert refused.value.status_hint == 429 and refused.value.extra == {"limit": 3}
    assert "runner.max_subscribers_per_session" in refused.value.message
    assert len(refused.value.message.encode()) <= 123  # fits a WebSocket close reason
    assert counts.live("a") == 3 and listener.live == 3
    StreamSlot(listener).claim(counts, "b", 3)  # another session is unaffected
    held[0].release()
    StreamSlot(listener).claim(counts, "a", 3)  # a freed slot is reusable


def test_the_listener_share_refuses_with_retry_after_and_counts_nothing() -> None:
    counts, listener = SubscriberCounts(), ListenerStreams("unix:/s", 16)
    for i in range(14):
        StreamSlot(listener).claim(counts, f"s{i}", 64)
    with pytest.raises(TooManyStreams) as refused:
        StreamSlot(listener).claim(counts, "late", 64)
    error = refused.value
    assert error.status_hint == 503 and error.code == "too_many_streams"
    assert error.headers == {"retry-after": "1"} and error.extra == {"limit": 14}
    assert "server.max_connections" in error.message
    assert len(error.message.encode()) <= 123
    assert counts.live("late") == 0 and listener.live == 14


def test_a_slot_bound_to_no_listener_applies_only_the_session_bound() -> None:
    counts = SubscriberCounts()
    for _ in range(100):
        StreamSlot(None).claim(counts, "a", 100)
    with pytest.raises(TooManySubscribers):
        StreamSlot(None).claim(counts, "a", 100)
