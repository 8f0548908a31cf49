"""A third backend is its package plus one line in `runnerd.backends.BUILT`.

This module is that package: a tiny provider (`NAME`, `SETTINGS` and the
`runnerd.backends.Provider` functions at its top level) registered by
monkeypatching `BUILT`. Its `[toy]` table goes through the path the built
backends' tables take (read from a file, parsed by its provider with errors
carrying their key and line, printed by `check-config`, kept and compared on
a reload) with no edit to `runnerd.config`, which names no backend at all.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from runnerd import backends
from runnerd.backend import (
    Backend,
    BackendContext,
    BundleSpec,
    Exited,
    ImageSpec,
    Limits,
    Outcome,
    Recovered,
    RunSpec,
    Sink,
    Started,
)
from runnerd.cli.main import main
from runnerd.config import Config, ConfigError, Section, Table
from runnerd.contract import AvailabilityReport, exited, ready
from runnerd.daemon.reload import build_reloaded, restart_only_changes
from runnerd.session.manager import SessionManager

CONFIG_DIR = Path(__file__).resolve().parents[2] / "runnerd" / "config"

# ---------------------------------------------------------------- the provider

NAME = "toy"
KEYS = ("speed", "colour", "spool")


@dataclass(frozen=True)
class ToySettings:
    speed: int = 3
    colour: str = "red"
    spool: Path = Path("/var/spool/toy")


SETTINGS = ToySettings
WATCH_IO: tuple[str, ...] = ()  # no watch sessions: [watch] enabled is refused


def parse_settings(table: Table, base_dir: Path) -> ToySettings:
    spool = base_dir / table.string("spool", str(ToySettings.spool))
    return ToySettings(table.positive_int("speed", 3), table.string("colour", "red"), spool)


def render(settings: ToySettings) -> list[Section]:
    return [("toy", {"speed": settings.speed, "colour": settings.colour, "spool": settings.spool})]


def check_config(config: Config[ToySettings], *, reloaded: bool = False) -> None:
    if config.runner.default_image != "toy-image":
        raise ConfigError("runner.default_image", "the toy backend runs only 'toy-image'")


def offered_images(config: Config[ToySettings]) -> tuple[str, ...] | None:
    return ("toy-image", f"toy-{config.settings.colour}")


def stop_timeout_s(config: Config[ToySettings]) -> float:
    return float(config.settings.speed)


def config_warnings(config: Config[ToySettings], daemon_path: str | None) -> list[str]:
    return ["toy.colour: toys fade"] if config.settings.colour == "red" else []


def keep_bound(old: ToySettings, new: ToySettings) -> ToySettings:
    """The colour reloads; the speed and the spool are bound at start."""
    return ToySettings(old.speed, new.colour, old.spool)


def bound_changes(old: ToySettings, new: ToySettings) -> list[str]:
    keys = [key for key in ("speed", "spool") if getattr(old, key) != getattr(new, key)]
    return [f"toy.{key}" for key in keys]


class ToyBackend:
    """A workload that prints its colour and exits with its speed."""

    name = NAME
    notices: tuple[str, ...] = ()
    detach_supported = False
    watch_io: tuple[str, ...] = ()

    def __init__(self, settings: ToySettings) -> None:
        self._settings = settings

    async def recover(self) -> list[Recovered]:
        return []

    async def probe(self, image: ImageSpec) -> AvailabilityReport:
        return ready()

    async def run(
        self, spec: RunSpec, sink: Sink, *, task_status: trio.TaskStatus[Started]
    ) -> Outcome:
        task_status.started(Started(_Inert()))
        sink.output(f"a {self._settings.colour} toy\r\n".encode())
        await trio.lowlevel.checkpoint()
        return Exited(self._settings.speed)


class _Inert:
    def write(self, data: bytes) -> None:
        pass

    def resize(self, cols: int, rows: int) -> None:
        pass


def probe_ahead(config: Config[ToySettings]) -> contextlib.AbstractContextManager[object]:
    return contextlib.nullcontext()  # nothing to learn of the host


def open_backend(
    config: Config[ToySettings], context: BackendContext
) -> contextlib.AbstractAsyncContextManager[Backend]:
    return _open_backend(config.settings)


@contextlib.asynccontextmanager
async def _open_backend(settings: ToySettings) -> AsyncIterator[Backend]:
    yield ToyBackend(settings)


# ---------------------------------------------------------------- the tests


@pytest.fixture(autouse=True)
def toy_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one line a third backend adds to `BUILT`."""
    monkeypatch.setattr(backends, "BUILT", {**backends.BUILT, NAME: __name__})


def write(tmp_path: Path, toy: str, backend: str = "toy") -> Path:
    path = tmp_path / "runnerd.toml"
    path.write_text(f'[runner]\nbackend = "{backend}"\ndefault_image = "toy-image"\n\n[toy]\n{toy}')
    return path


def test_its_table_is_parsed_by_its_provider_into_its_settings(tmp_path: Path) -> None:
    config = backends.check_config(
        backends.load_config(write(tmp_path, 'speed = 7\nspool = "spool"\n'))
    )
    assert config.runner.backend == "toy"
    assert config.settings == ToySettings(7, "red", tmp_path / "spool")
    assert backends.provider_for(config).stop_timeout_s(config) == 7.0
    assert backends.provider_for(config).offered_images(config) == ("toy-image", "toy-red")


def test_its_errors_name_the_key_and_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        backends.load_config(write(tmp_path, 'colour = "blue"\nspeed = 0\n'))
    assert str(info.value) == "line 7: toy.speed: must be a positive integer, got 0"
    assert (info.value.key, info.value.line) == ("toy.speed", 7)


def test_an_unknown_key_in_its_table_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        backends.load_config(write(tmp_path, "sped = 1\n"))
    assert str(info.value) == "line 6: toy.sped: unknown key (did you mean 'speed'?)"


def test_its_config_check_runs(tmp_path: Path) -> None:
    path = tmp_path / "runnerd.toml"
    path.write_text('[runner]\nbackend = "toy"\n')
    with pytest.raises(ConfigError, match="the toy backend runs only 'toy-image'"):
        backends.check_config(backends.load_config(path))


def test_check_config_prints_its_table_and_its_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "speed = 2\n")
    assert main(["check-config", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert '[toy]\nspeed = 2\ncolour = "red"\nspool = "/var/spool/toy"\n' in out
    assert "# allowed_images not set; accepted images: toy-image, toy-red" in out
    assert "runnerd: warning: toy.colour: toys fade" in err
    # What it prints parses back to the same settings.
    again = tmp_path / "again.toml"
    again.write_text(out)
    assert backends.load_config(again).settings == backends.load_config(path).settings


def test_a_reload_keeps_and_compares_its_settings_through_its_provider(tmp_path: Path) -> None:
    old = backends.load_config(write(tmp_path, 'speed = 2\ncolour = "red"\n'))
    new = backends.load_config(write(tmp_path, 'speed = 5\ncolour = "green"\n'))
    assert build_reloaded(old, new).settings == ToySettings(2, "green", old.settings.spool)
    assert restart_only_changes(old, new) == ["toy.speed"]


def test_another_backends_table_is_kept_unread(tmp_path: Path) -> None:
    # Running the toy, a [local] table is never handed to the local backend's
    # provider (its package is not even imported to read it); check-config says so.
    path = write(tmp_path, "speed = 2\n")
    path.write_text(path.read_text() + '\n[local]\nworkdir = "w"\nnot_a_key = 1\n')
    config = backends.load_config(path)
    assert config.unread == ("local",)
    assert '# [local] not read: runner.backend = "toy"' in backends.render_config(config)


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    }


def test_the_config_layer_names_no_backend() -> None:
    named = {
        f"{path.name}: {value!r}"
        for path in sorted(CONFIG_DIR.glob("*.py"))
        for value in _string_constants(path)
        if value in backends.BUILT or any(f"{name}." in value for name in backends.BUILT)
    }
    assert named == set()


def test_a_reload_naming_another_backend_keeps_the_running_ones_settings(
    tmp_path: Path,
) -> None:
    old = backends.load_config(write(tmp_path, "speed = 2\n"))
    path = tmp_path / "local.toml"
    path.write_text(
        '[runner]\ndefault_image = "sh"\n[local.runtimes.sh]\ncommand = ["sh", "{entry}"]\n'
    )
    new = backends.load_config(path)
    kept = build_reloaded(old, new)
    assert (kept.runner.backend, kept.settings) == ("toy", old.settings)
    assert restart_only_changes(old, new) == ["toy", "runner.backend"]


def test_a_provider_is_never_handed_another_backends_settings(tmp_path: Path) -> None:
    toy = backends.load_config(write(tmp_path, "speed = 2\n"))
    mixed = dataclasses.replace(toy, settings=ToySettings().colour)
    with pytest.raises(TypeError, match="a config with str settings handed to the toy backend"):
        backends.provider_for(mixed).stop_timeout_s(mixed)


async def test_its_backend_opens_through_built_and_runs_a_session_in_the_core(
    tmp_path: Path,
) -> None:
    # The whole seam, not only the config: the provider `BUILT` names opens
    # the backend the daemon would, and the core's manager runs a session on it.
    config = backends.check_config(backends.load_config(write(tmp_path, 'colour = "teal"\n')))
    provider = backends.provider_for(config)
    async with provider.open_backend(config, BackendContext()) as backend:
        manager = SessionManager(backend, max_sessions=2, exit_ttl_s=60.0, replay_buffer_bytes=4096)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            spec = RunSpec.create(
                session_id="toyaaaaaaaaa",
                image=ImageSpec("toy-image", "missing"),
                env={},
                limits=Limits("50m", "64Mi", "64Mi", 60.0),
                bundle=BundleSpec("main", (("main", ""),)),
            )
            session = manager.start(spec)
            with trio.fail_after(10):
                await session.wait_terminal()
            nursery.cancel_scope.cancel()
    assert backend.name == "toy"
    assert session.status == exited(3)
    assert b"".join(data for _, data in session.pty.since(0).items) == b"a teal toy\r\n"
