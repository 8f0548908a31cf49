"""Ctrl-C in the verbs that run trio: one `KeyboardInterrupt`, never a group.

Owns `run_trio`, the one way the client verbs enter trio (`run`, `attach`,
`logs`). trio delivers SIGINT as `KeyboardInterrupt` to its main task
wherever that task is; inside a nursery (every streaming verb has one) the
nursery wraps it, so `trio.run` raises a `BaseExceptionGroup` of it, which
no `except KeyboardInterrupt` catches (a traceback and exit 1 instead of the
documented 130 and detach line). `run_trio` unwraps such a group, so each
caller handles Ctrl-C as the plain `KeyboardInterrupt` it is: `run` and
`attach` as a detach (runnerd.client.attach), every other verb in
`runnerd.client.verbs.dispatch` (exit 130).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

T = TypeVar("T")


def run_trio(main: Callable[[], Awaitable[T]]) -> T:
    """`trio.run(main)`.

    Raises:
        KeyboardInterrupt: Ctrl-C (SIGINT) arrived, alone or wrapped in
            exception groups with nothing but other interrupts beside it.
        BaseException: anything else `main` raised, as trio raised it.
    """
    try:
        return trio.run(main)
    except BaseExceptionGroup as group:
        interrupts, rest = group.split(KeyboardInterrupt)
        if interrupts is None or rest is not None:
            raise
        raise KeyboardInterrupt from None
