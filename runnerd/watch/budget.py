"""The reload budget: admitted workspace writes + reloads per session. Pure.

Owns `ReloadBudget`: one sliding window of `WINDOW_S` (60 s) per session,
shared by `POST /workspace` and `POST /reload`. A request is admitted while
fewer than `limit` (`watch.reload_limit`) were admitted in the last 60 s;
otherwise it is `429 reload_rate_limited`, and a refused request is not
counted (a client hammering a spent budget does not keep it spent). An
admitted request that a later check refuses (`409 not_running`, `400
invalid_path`, `404 unknown_app`) is given back (`refund`): a refused
request changes no state, the budget included.

Invariant: `_admitted` holds the admission times of the window, oldest
first, never more than `limit` of them. An admission at `t` counts while
`now < t + WINDOW_S`. `now` is a monotonic clock in seconds, never going
back.
"""

from __future__ import annotations

from collections import deque

WINDOW_S = 60.0


class ReloadBudget:
    """One session's budget. Not thread-safe (one event loop owns it)."""

    def __init__(self, limit: int, window_s: float = WINDOW_S) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self.window_s = window_s
        self._admitted: deque[float] = deque()

    def _expire(self, now: float) -> None:
        while self._admitted and now >= self._admitted[0] + self.window_s:
            self._admitted.popleft()

    def try_spend(self, now: float) -> bool:
        """Admit one request at `now` (True, counted) or refuse it (False,
        not counted)."""
        self._expire(now)
        if len(self._admitted) >= self.limit:
            return False
        self._admitted.append(now)
        return True

    def refund(self, at: float) -> None:
        """Forget the admission made at `at` (one, if several share it):
        the request was refused after all. A no-op once it left the window."""
        try:
            self._admitted.remove(at)
        except ValueError:
            pass

    def retry_after_s(self, now: float) -> float:
        """Seconds until a request would be admitted; 0 when one would now."""
        self._expire(now)
        if len(self._admitted) < self.limit:
            return 0.0
        return self._admitted[0] + self.window_s - now
