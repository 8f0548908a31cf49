"""Resize coalescing: at most one resize per 50 ms reaches a terminal.

Owns `ResizeCoalescer`, shared by a run session's workload
(`runnerd.session.session`) and each `tty` app of a watch session
(`runnerd.session.apps`): a client dragging its window sends a resize per
pixel, and a PTY (or a pod's attach) must not get one per frame. The first
resize applies at once; one within `RESIZE_INTERVAL_S` of the last applied
is deferred to that interval's end, and whatever size is latest then wins.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import trio

log = logging.getLogger("runnerd.sessions")

# At most one resize per this interval reaches the terminal; the latest wins.
RESIZE_INTERVAL_S = 0.05


class ResizeCoalescer:
    """Coalesced resizes of one live terminal. `apply(cols, rows)` is the
    terminal's own resize (it promises not to raise; a bug is logged, never
    raised into a route). A deferred flush runs in `nursery` (the
    terminal's: none outlives it); after `close()` nothing is applied."""

    def __init__(
        self, apply: Callable[[int, int], None], nursery: trio.Nursery, log_extra: dict[str, str]
    ) -> None:
        self._apply_fn = apply
        self._nursery = nursery
        self._extra = log_extra
        self._pending: tuple[int, int] | None = None
        self._last_at = -math.inf
        self._flush_due: float | None = None  # a deferred resize is due then (one at a time)
        self._closed = False

    def request(self, cols: int, rows: int) -> None:
        """Resize to (cols, rows), now or at the interval's end."""
        if self._closed:
            return
        self._pending = (cols, rows)
        if self._flush_due is not None:
            return  # the flush already due applies the latest
        due = self._last_at + RESIZE_INTERVAL_S
        if trio.current_time() >= due:
            self._apply()
        else:
            self._flush_due = due
            self._nursery.start_soon(self._flush)

    def close(self) -> None:
        """The terminal is gone: drop what is pending and apply nothing more."""
        self._closed = True
        self._pending = None

    async def _flush(self) -> None:
        if self._flush_due is not None:
            await trio.sleep_until(self._flush_due)
        self._flush_due = None
        self._apply()

    def _apply(self) -> None:
        size, self._pending = self._pending, None
        if size is None or self._closed:
            return
        self._last_at = trio.current_time()
        try:
            self._apply_fn(*size)
        except Exception:  # the handle promises not to raise; a bug must not kill a route
            log.exception("resize failed", extra=self._extra)
