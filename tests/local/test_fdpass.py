"""Fds handed to a child (`runnerd.local.fdpass`): at numbers that keep
CPython's `subprocess` on its `close_range` path, and only those fds."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from runnerd.local import fdpass

REPO = Path(__file__).resolve().parents[2]

# The child: which of its fds are open, and a byte written on each fd named.
CHILD = """
import json, os, sys
for fd in map(int, sys.argv[1:]):
    os.write(fd, b"%d" % fd)
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:  # the listing's own fd, closed by now
        return False
listed = map(int, os.listdir("/proc/self/fd"))
print(json.dumps(sorted(fd for fd in listed if fd > 2 and is_open(fd))))
"""


def test_fds_made_side_by_side_are_handed_on_apart_and_alone() -> None:
    pipes = [os.pipe() for _ in range(3)]
    # Their write ends side by side, as fds made in turn usually are.
    writers = [fcntl.fcntl(w, fcntl.F_DUPFD_CLOEXEC, 5000) for _, w in pipes]
    assert writers == list(range(writers[0], writers[0] + 3))
    try:
        with fdpass.passing() as hand:
            numbers = [hand(w) for w in writers]
            out = subprocess.run(
                [sys.executable, "-I", "-S", "-c", CHILD, *map(str, numbers)],
                pass_fds=hand.fds,
                capture_output=True,
                check=True,
                text=True,
            ).stdout
        # Neither 3 nor side by side, each between two fds the parent holds
        # open (so subprocess's error pipe cannot land beside one either).
        assert 3 not in numbers
        assert all(abs(a - b) > 1 for a in numbers for b in numbers if a != b)
        for n in numbers:
            os.fstat(n - 1)
            os.fstat(n + 1)
        # The child had those and nothing else of ours.
        assert json.loads(out) == sorted(numbers)
        for (r, _), n in zip(pipes, numbers, strict=True):
            assert os.read(r, 16) == str(n).encode()
    finally:
        for fd in [*writers, *(fd for pipe in pipes for fd in pipe)]:
            os.close(fd)


def test_after_the_spawn_the_numbers_hold_nothing_of_the_callers() -> None:
    r, w = os.pipe()
    try:
        with fdpass.passing() as hand:
            number = hand(w)
        os.close(w)  # the caller's own fd: the pipe's last writer, but for the number
        assert os.read(r, 1) == b""  # EOF: the number no longer holds the pipe
        assert os.path.samefile(f"/proc/self/fd/{number}", os.devnull)
    finally:
        os.close(r)


def test_with_every_block_in_use_fds_go_as_they_are() -> None:
    r, w = os.pipe()
    try:
        numbers = fdpass.FdNumbers()
        with contextlib.ExitStack() as others:
            for _ in range(fdpass.BLOCKS):  # every block taken by other spawns
                others.enter_context(numbers.passing())
            with numbers.passing() as hand:
                assert hand(w) == w
                subprocess.run(
                    [sys.executable, "-I", "-S", "-c", CHILD, str(w)],
                    pass_fds=hand.fds,
                    check=True,
                    capture_output=True,
                )
        assert os.read(r, 16) == str(w).encode()
    finally:
        os.close(r)
        os.close(w)


def test_a_parked_fd_keeps_its_file_at_a_number_apart() -> None:
    fd = os.open(sys.executable, os.O_RDONLY | os.O_CLOEXEC)
    parked = fdpass.FdNumbers().park(fd)
    try:
        assert parked != fd and parked != 3
        assert os.path.samefile(f"/proc/self/fd/{parked}", sys.executable)
        os.fstat(parked - 1)
        os.fstat(parked + 1)
        assert os.get_inheritable(parked) is False
    finally:
        os.close(parked)


def test_the_compiled_init_opened_first_thing_is_not_handed_on_as_fd_3() -> None:
    # A fresh interpreter, as the daemon is when its probe child starts: the
    # compiled init is the first file it opens, so plainly opened it is fd 3.
    probe = (
        "import os\n"
        "from runnerd.local.initpython import open_init_binary\n"
        "b = open_init_binary()\n"
        "os.fstat(b.fd - 1); os.fstat(b.fd + 1)\n"
        "print(b.fd)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    assert int(out) > 3
