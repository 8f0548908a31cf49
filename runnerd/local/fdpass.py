"""Fd numbers for handing fds to a child through `subprocess`'s `pass_fds`.

Owns `passing` (a spawn's fds, each at a number of its own for as long as
the spawn takes) and `park` (a long-lived fd, such as the compiled init's,
moved to such a number once).

Why: in the child, CPython 3.11's `subprocess` closes every fd it does not
keep with one `close_range` per gap between the kept fds (its exec-error
pipe's write end is kept too). A kept fd that is 3, or two kept fds side
by side, make a gap empty; `close_range` refuses that (EINVAL) and the child
falls back to listing /proc/self/fd and closing each fd in turn: as many
system calls as the daemon has fds open (~6,000 with 1,000 sessions), and
as many /proc dentries, which the kernel walks again when the child is
reaped. A session's status pipe and env memfd, or slirp4netns's two pipes,
made one after the other, sat side by side in 36-46% of 200 spawns
(strace), and the compiled init opened as fd 3 (before anything else)
made every spawn take that path.

How: blocks of consecutive fd numbers are taken at first use, each number
holding /dev/null. A number handed out is an odd one inside a block, with
a /dev/null on either side that is never kept and never free: no two kept
fds can meet, and the error pipe, allocated at the lowest free number,
never lands beside one. A spawn's fds are dup'ed there and /dev/null put
back after the spawn; a parked fd keeps its number for good. With every
block in use (more concurrent spawns than `BLOCKS`), fds are handed on as
they are: correct, and at worst slow.

Error handling: blocks that cannot be taken (EMFILE at first use) are
tried again at the next use, and fds are meanwhile handed on as they are;
`os.dup2` onto a number held here does not fail for an open fd.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator

# Concurrent spawns the blocks serve (the spawner thread's session inits and
# the worker threads' slirp4netns), and the fds one spawn hands on at most.
BLOCKS = 16
WIDTH = 4
PARKED = 4  # long-lived fds (the compiled init's)


class Passing:
    """The fds of one spawn, each at the number to give in `pass_fds` and
    argv: call it with a fd to have that number (`fds` lists them)."""

    def __init__(self, block: list[int] | None) -> None:
        self._free = [] if block is None else block[1::2]
        self.fds: tuple[int, ...] = ()

    def __call__(self, fd: int) -> int:
        if not self._free:  # no block, or more fds than it has room for
            number = fd
        else:
            number = self._free.pop(0)
            os.dup2(fd, number, inheritable=False)
        self.fds += (number,)
        return number


class FdNumbers:
    """Blocks of numbers to hand fds on at, and numbers to park fds at (the
    process has one, `passing` and `park` use it: fd numbers are the
    process's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._filler = -1
        self._blocks: list[list[int]] = []
        self._parked: list[int] = []
        self._taken = False

    def take(self) -> list[int] | None:
        with self._lock:
            self._reserve()
            return self._blocks.pop() if self._blocks else None

    def give_back(self, block: list[int], used: tuple[int, ...]) -> None:
        for number in used:
            if number in block:
                os.dup2(self._filler, number, inheritable=False)
        with self._lock:
            self._blocks.append(block)

    def park(self, fd: int) -> int:
        with self._lock:
            self._reserve()
            if not self._parked:
                return fd
            number = self._parked.pop()
        os.dup2(fd, number, inheritable=False)
        os.close(fd)
        return number

    @contextlib.contextmanager
    def passing(self) -> Iterator[Passing]:
        """A spawn's hand-on: inside, `hand(fd)` gives the number at which
        `fd` goes to the child (in `pass_fds=hand.fds` and in its argv);
        after, those numbers hold /dev/null again (the caller's own fds are
        untouched throughout: still theirs to close)."""
        block = self.take()
        hand = Passing(block)
        try:
            yield hand
        finally:
            if block is not None:
                self.give_back(block, hand.fds)

    def _reserve(self) -> None:
        if self._taken:
            return
        size = 2 * WIDTH + 1
        try:
            self._filler = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            runs = _runs(self._filler, BLOCKS * size + PARKED * 3)
        except OSError:
            os.close(self._filler)
            return
        numbers = [n for run in runs for n in run]
        self._blocks = [numbers[i : i + size] for i in range(0, BLOCKS * size, size)]
        self._parked = [numbers[i + 1] for i in range(BLOCKS * size, len(numbers), 3)]
        self._taken = True


def _runs(filler: int, count: int) -> list[list[int]]:
    """`count` numbers holding `filler`, in runs of consecutive numbers
    above every fd open now. A number another thread takes meanwhile breaks
    a run: the broken run's numbers are given back, and it starts again."""
    runs: list[list[int]] = []
    run: list[int] = []
    # Above the highest fd open now: there, nearly every number is free.
    after = max(int(name) for name in os.listdir("/proc/self/fd"))
    try:
        while sum(map(len, runs)) + len(run) < count:
            number = fcntl.fcntl(filler, fcntl.F_DUPFD_CLOEXEC, after + 1)
            if run and number != run[-1] + 1:
                for taken in run:
                    os.close(taken)
                run = []
            run.append(number)
            after = number
            if len(run) == (2 * WIDTH + 1 if len(runs) < BLOCKS else 3):
                runs.append(run)
                run = []
    except OSError:
        for taken in [*run, *(n for r in runs for n in r)]:
            os.close(taken)
        raise
    return runs


_NUMBERS = FdNumbers()
passing = _NUMBERS.passing


def park(fd: int) -> int:
    """`fd` moved for good to a number that never sits beside another
    handed-on fd (the original is closed); `fd` itself when none is left."""
    return _NUMBERS.park(fd)
