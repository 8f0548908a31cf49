"""What a workload is to the core while it runs: its handle, its address, its end.

Part of the backend seam (`runnerd.backend`, which re-exports every name
here): `Exited`/`Failed` (how a workload ended on its own), `WorkloadHandle`
(its terminal), `WorkloadAddress` and `Dial` (where the core's watchers
reach it). In a module of their own so that both halves of the seam (run
sessions in `runnerd.backend`, watch sessions in `runnerd.backend.watch`)
use them without importing each other.

May import what `runnerd.backend` may.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import trio

__all__ = ["Dial", "Exited", "Failed", "WorkloadAddress", "WorkloadHandle"]


@dataclass(frozen=True)
class Exited:
    """The workload ended on its own with this exit code (signal N → 128+N)."""

    code: int


@dataclass(frozen=True)
class Failed:
    """The workload ended in a way that is not an exit code (e.g. pod evicted).

    `message` is client-safe: it becomes the terminal `failed` status as is.
    """

    message: str


class WorkloadHandle(Protocol):
    """The live workload's terminal. Both methods never block and never raise;
    they are no-ops once the workload has ended."""

    def write(self, data: bytes) -> None: ...

    def resize(self, cols: int, rows: int) -> None: ...


# Opens a TCP connection to (host, port) from the runner; raises OSError when
# it cannot (refused, unreachable, the way there gone).
Dial = Callable[[str, int], Awaitable["trio.abc.Stream"]]


@dataclass(frozen=True)
class WorkloadAddress:
    """Where the runner reaches a running workload: what the core's own
    watchers of it need (`runnerd.workload.supervision`: a reachability
    probe per declared tcp port, the debug relay). One per app of a session.

    `host`: what each declared tcp port is dialled at, with `dial` (None: a
    plain TCP connect from the runner's network). A probe must reach the
    workload's own socket, never a forwarder that accepts for it: a local
    session in its own network namespace dials inside it.
    `inspect_port`: the port of its debug server on `host` (None: it has
    none). The core relays `http://<host>:<inspect_port>/events` as debug
    events, and that base URL is the `running.inspectUrl` a client sees, so
    it must be reachable from the runner directly (the local backend
    publishes it on the host's loopback)."""

    host: str
    inspect_port: int | None = None
    dial: Dial | None = field(default=None, compare=False)

    @property
    def inspect_url(self) -> str | None:
        """The debug server's base URL (`running.inspectUrl`), None without one."""
        return None if self.inspect_port is None else f"http://{self.host}:{self.inspect_port}"
