"""A backend whose watch apps may only be `tty`, for a real daemon: run as

    python tests/e2e/ttyonly.py serve --config FILE

it adds itself (the `__main__` module) to `runnerd.backends.BUILT` as
`ttyonly` (a third backend is its package plus that one line) and runs
runnerd's own command line. It
exists so `400 io_unsupported` (an app asking for an `io` this runner does
not offer) can be asked of a real daemon: the built backends offer both.
Its sessions print one line and exit 0; watch sessions are refused at
their start, after admission, which is all the test needs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import trio

from runnerd import backends
from runnerd.backend import (
    Backend,
    BackendContext,
    Exited,
    ImageSpec,
    Outcome,
    Recovered,
    RunSpec,
    Sink,
    Started,
    StartError,
)
from runnerd.backend.watch import ProgressReport, WatchHost, WatchSpec
from runnerd.config import Config, Section, Table
from runnerd.contract import AvailabilityReport, ready

NAME = "ttyonly"
KEYS: tuple[str, ...] = ()
WATCH_IO: tuple[str, ...] = ("tty",)


@dataclass(frozen=True)
class TtyOnlySettings:
    pass


SETTINGS = TtyOnlySettings


def parse_settings(table: Table, base_dir: Path) -> TtyOnlySettings:
    return TtyOnlySettings()


def render(settings: TtyOnlySettings) -> list[Section]:
    return []


def check_config(config: Config[TtyOnlySettings], *, reloaded: bool = False) -> None:
    pass


def offered_images(config: Config[TtyOnlySettings]) -> tuple[str, ...] | None:
    return None  # any image


def stop_timeout_s(config: Config[TtyOnlySettings]) -> float:
    return 5.0


def config_warnings(config: Config[TtyOnlySettings], daemon_path: str | None) -> list[str]:
    return []


def keep_bound(old: TtyOnlySettings, new: TtyOnlySettings) -> TtyOnlySettings:
    return new


def bound_changes(old: TtyOnlySettings, new: TtyOnlySettings) -> list[str]:
    return []


class _Inert:
    def write(self, data: bytes) -> None:
        pass

    def resize(self, cols: int, rows: int) -> None:
        pass


class TtyOnlyBackend:
    name = NAME
    notices: tuple[str, ...] = ()
    detach_supported = False
    watch_io = WATCH_IO

    async def recover(self) -> list[Recovered]:
        return []

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(
        self, spec: RunSpec, sink: Sink, *, task_status: trio.TaskStatus[Started]
    ) -> Outcome:
        task_status.started(Started(_Inert()))
        sink.output(b"tty only\r\n")
        await trio.lowlevel.checkpoint()
        return Exited(0)

    @contextlib.asynccontextmanager
    async def open_watch(
        self, spec: WatchSpec, progress: ProgressReport
    ) -> AsyncIterator[WatchHost]:
        raise StartError("watch", "this test backend admits watch sessions but runs none")
        yield  # pragma: no cover


def probe_ahead(config: Config[TtyOnlySettings]) -> contextlib.AbstractContextManager[object]:
    return contextlib.nullcontext()  # nothing to learn of the host


def open_backend(
    config: Config[TtyOnlySettings], context: BackendContext
) -> contextlib.AbstractAsyncContextManager[Backend]:
    return _open_backend()


@contextlib.asynccontextmanager
async def _open_backend() -> AsyncIterator[Backend]:
    yield TtyOnlyBackend()


if __name__ == "__main__":
    backends.BUILT = {**backends.BUILT, NAME: __name__}
    from runnerd.cli.main import main

    sys.exit(main())
