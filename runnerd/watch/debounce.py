"""The restart debounce of a watch session's `watch` restarts. Pure.

Owns `RestartDebounce`: a change through the API schedules the restart
`DELAY_S` (300 ms) ahead, and each further change before it is due pushes
it back, so a burst of changes each less than 300 ms after the previous one
is ONE restart, due 300 ms after the burst's last change (the contract
allows up to 2 s: the rest is the IO side's margin). `now` is a monotonic
clock in seconds.

The IO side: on each change call `change(now)`; a task sleeps until
`due_at`, and when it wakes calls `take(now)`, which says whether the
restart is due (it may have been pushed back meanwhile: sleep again until
the new `due_at`).
"""

from __future__ import annotations

DELAY_S = 0.3


class RestartDebounce:
    """One session's pending `watch` restart: none, or due at `due_at`."""

    def __init__(self, delay_s: float = DELAY_S) -> None:
        self.delay_s = delay_s
        self.due_at: float | None = None

    def change(self, now: float) -> float:
        """A change at `now`: the restart is now due at `now + delay_s`
        (later than any earlier schedule). Returns that time."""
        self.due_at = now + self.delay_s
        return self.due_at

    def take(self, now: float) -> bool:
        """True once when the pending restart is due at `now` (it is then no
        longer pending); False when none is pending or it is not due yet."""
        if self.due_at is None or now < self.due_at:
            return False
        self.due_at = None
        return True

    def cancel(self) -> None:
        """Drop a pending restart (the session stops or suspends)."""
        self.due_at = None
