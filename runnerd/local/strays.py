"""Descendants of a workload that left its process group, and stopping them.

Owns finding them and signalling them safely. A shell with job control
(`bash -i`, `set -m`) puts each job in a process group of its own, so a group
kill of the workload misses them although they are still its descendants.
Before a stop, the descendant tree is walked (`/proc/<pid>/task/<tid>/children`)
and every process outside the workload's group is pinned with a pidfd, so the
signals reach exactly those processes even if they exit and their pid is
reused meanwhile.

Limits: only what is still a descendant when the stop begins is found. A
process that was orphaned earlier (its parent exited, so it was reparented to
init) or that called `setsid()` and double-forked is out of reach without
cgroups.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator


def _children(pid: int) -> Iterator[int]:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                text = f.read()
        except OSError:
            continue
        yield from (int(child) for child in text.split())


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, ...]."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


class StrayProcesses:
    """Pidfds of the workload's descendants that are outside its process group."""

    def __init__(self, leader: int) -> None:
        self._leader = leader  # also the workload's process group id
        self._pidfds: dict[int, int] = {}

    def collect(self) -> None:
        """Walk the leader's descendants now and pin the strays among them."""
        stack = [self._leader]
        while stack:
            parent = stack.pop()
            for child in _children(parent):
                stack.append(child)
                if child not in self._pidfds:
                    self._pin(child, parent)

    def _pin(self, pid: int, parent: int) -> None:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return  # already gone
        # Checked after pinning: the pidfd now names one process for good, so
        # if it is still `parent`'s child it is the one we listed.
        fields = _stat_fields(pid)
        if fields is None or int(fields[1]) != parent or int(fields[2]) == self._leader:
            os.close(pidfd)
            return
        self._pidfds[pid] = pidfd

    def send(self, sig: signal.Signals) -> None:
        for pidfd in self._pidfds.values():
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, sig)

    def close(self) -> None:
        for pidfd in self._pidfds.values():
            os.close(pidfd)
        self._pidfds.clear()


def pin_children(parent: int) -> list[int]:
    """Pidfds of `parent`'s children now (each checked to still be its child
    once pinned, so a reused pid is never signalled). The caller closes them."""
    pinned = []
    for child in _children(parent):
        try:
            pidfd = os.pidfd_open(child)
        except OSError:
            continue  # already gone
        fields = _stat_fields(child)
        if fields is None or int(fields[1]) != parent:
            os.close(pidfd)
            continue
        pinned.append(pidfd)
    return pinned
