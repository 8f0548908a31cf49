"""The user's terminal while attached: raw mode, its size, the detach key.

Owns `raw_terminal`, which puts a terminal on stdin into raw mode (every
key, Ctrl-C included, goes to the workload; output is passed through
untranslated, since the workload's own PTY already made it terminal-ready)
and restores the saved mode on every way out of the block: normal end,
detach, an exception, cancellation, a lost daemon. The process-level
handlers for SIGTERM/SIGHUP are the caller's (they end the block).

Ctrl-] (0x1d, as telnet and `docker attach` use) detaches: the bytes typed
before it still go to the workload, nothing after it does.
"""

from __future__ import annotations

import contextlib
import os
import termios
import tty
from collections.abc import Iterator

DETACH_KEY = b"\x1d"  # Ctrl-]
DETACH_KEY_NAME = "Ctrl-]"

TermAttrs = list[object]


def is_terminal(fd: int) -> bool:
    return os.isatty(fd)


def terminal_size(fd: int) -> tuple[int, int] | None:
    """(cols, rows) of the terminal on `fd`, or None when it is not one (or reports 0)."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    if size.columns < 1 or size.lines < 1:
        return None
    return size.columns, size.lines


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Raw mode on `fd` for the block (a no-op when `fd` is not a terminal);
    the saved mode comes back however the block ends."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        # TCSADRAIN: what we already wrote is shown, then the mode changes.
        with contextlib.suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def split_at_detach(data: bytes) -> tuple[bytes, bool]:
    """The bytes to forward, and whether the detach key was typed in `data`."""
    before, key, _ = data.partition(DETACH_KEY)
    return before, bool(key)
