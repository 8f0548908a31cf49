"""Start-up progress on stderr while `runnerd run` waits for `running`.

Owns the two renderings of the same updates: on a terminal, one live status
line (a spinner, the session id, the latest phase message) redrawn in place
and erased once the workload runs, so its output starts on a clean line;
anywhere else, one plain line per update (logs and CI output stay readable).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TICK_S = 0.1
_ERASE_LINE = "\r\x1b[2K"


class Progress:
    def __init__(self, session_id: str, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.session_id = session_id
        self.message = "starting"
        self._frame = 0
        self._shown = False

    def update(self, message: str) -> None:
        """A new phase message: redrawn on a terminal, one line elsewhere."""
        if message == self.message and self._shown:
            return
        self.message = message
        if self.live:
            self._draw()
        else:
            self.stream.write(f"runnerd: {self.session_id}: {message}\n")
            self.stream.flush()
        self._shown = True

    def tick(self) -> None:
        """Advance the spinner (terminal only)."""
        if self.live:
            self._frame = (self._frame + 1) % len(SPINNER)
            self._draw()

    def _draw(self) -> None:
        line = f"{SPINNER[self._frame]} {self.session_id} {self.message}"
        try:  # never wider than the terminal: a wrapped line cannot be redrawn
            width = os.get_terminal_size(self.stream.fileno()).columns - 1
        except (OSError, ValueError):
            width = 79
        self.stream.write(_ERASE_LINE + line[: max(width, 10)])
        self.stream.flush()

    def done(self) -> None:
        """Erase the live line (nothing to erase in plain mode)."""
        if self.live:
            self.stream.write(_ERASE_LINE)
            self.stream.flush()
