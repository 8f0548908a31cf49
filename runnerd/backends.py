"""The backends this build offers: the one module that names them.

Owns `BUILT` (a `runner.backend` name to its package), `Provider`, what the
core asks of a backend package, and `Configured`, the configured one as the
daemon, the CLI and the HTTP edge call it, so none of them tests a backend's
name. A package is imported only when it is the configured one. A third
backend is its package (exporting a `Provider`) plus one line in `BUILT`.

Each backend owns its settings: `runnerd.config` parses the core tables and
keeps the backend tables unread (`BackendTables`); `parse_config` and
`load_config` here then hand the configured backend its own table
(`Provider.parse_settings`), and the `Config` they return carries the typed
settings (`Config.settings`). The provider sees them typed
(`Config[LocalConfig]`), the core as `object`; `Configured` is the one place
between the two, checking at run time that a config's settings are its
provider's type. `render_config` prints the core and the backend's tables
(`Provider.render`); a reload keeps and compares them through the provider
(`keep_bound`, `bound_changes`).

May import: `backend`, `config` (and, by name, the backend packages).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from runnerd.backend import Backend, BackendContext
from runnerd.config import (
    BackendTables,
    Config,
    ConfigError,
    Section,
    Table,
    parse_core,
    read_core,
)
from runnerd.config import (
    render_config as render_core,
)
from runnerd.config.watch import check_watch_offered
from runnerd.contract import IoMode

# Name → the module exporting the package's Provider (the Kubernetes one is
# its `provider` module, so its pure parts import without trio or httpx).
# The first is the default `runner.backend`.
BUILT: Mapping[str, str] = {"local": "runnerd.local", "kubernetes": "runnerd.kube.provider"}

S = TypeVar("S")  # a backend's settings: a frozen dataclass of its own


class Provider(Protocol[S]):
    """What a backend package exports. Every function is pure unless said.
    `S` is its settings type (`SETTINGS`); the config it is handed carries
    them (`config.settings`)."""

    NAME: str
    SETTINGS: type[S]

    @property
    def KEYS(self) -> tuple[str, ...]:  # noqa: N802 (a module constant)
        """Its table's keys: any other is refused, naming it, before
        `parse_settings` sees the table."""

    @property
    def WATCH_IO(self) -> tuple[IoMode, ...]:  # noqa: N802 (a module constant)
        """The `io` modes a watch session's apps may have on it (its
        backend's `watch_io`, advertised as `features.io`); empty: it has no
        watch sessions, and `[watch] enabled = true` is refused."""

    def parse_settings(self, table: Table, base_dir: Path) -> S:
        """Its table (`[NAME]`, empty when the file has none; only `KEYS`) as
        its settings; relative paths resolve against `base_dir`. Raises
        ConfigError naming the key (`local.runtimes.sh.command`); its line is
        added for it."""

    def render(self, settings: S) -> list[Section]:
        """Its tables as `check-config` prints them; they parse back."""

    def check_config(self, config: Config[S], *, reloaded: bool = False) -> None:
        """Refuse a config this backend cannot run (ConfigError naming the
        key). `reloaded`: checked against what was bound at start."""

    def offered_images(self, config: Config[S]) -> tuple[str, ...] | None:
        """The images a bundle session may pick when `runner.allowed_images`
        is unset; None: only `default_image` (advertised read-only)."""

    def stop_timeout_s(self, config: Config[S]) -> float:
        """How long a user stop may wait for a workload to be gone."""

    def config_warnings(self, config: Config[S], daemon_path: str | None) -> list[str]:
        """What a valid config may still get wrong on this host (reads the
        filesystem); `check-config` prints them."""

    def keep_bound(self, old: S, new: S) -> S:
        """The settings a reload runs on: `new` with what is bound at start from `old`."""

    def bound_changes(self, old: S, new: S) -> list[str]:
        """Keys of its settings that changed but need a restart."""

    def probe_ahead(self, config: Config[S]) -> AbstractContextManager[object]:
        """What the backend will learn of its host when it is opened and can
        learn beside the daemon's imports, started: `runnerd serve` enters
        it once the config is read, before it imports the serving layer, and
        hands what it yields to `open_backend` (`context.ahead`); leaving it
        ends what was started and not taken. Never raises."""

    def open_backend(
        self, config: Config[S], context: BackendContext
    ) -> AbstractAsyncContextManager[Backend]:
        """The backend, open for the daemon's lifetime: entered in the root
        nursery before the session manager runs (the listeners are bound by
        then: `context.hidden_paths` names their directories), exited after
        every session has ended. A backend that counts (apiserver requests)
        registers its series in `context.metrics` and counts there. It is
        never handed the catalog: the session core re-checks an app session
        against it just before `run()`. Raises ConfigError for what the
        operator must fix."""


class Configured:
    """The configured backend's provider, as the core calls it: each method
    takes the daemon's `Config` and hands the provider its own typed one.

    Error handling: a config whose settings are not this provider's type
    (built for another backend) is a programming error: TypeError."""

    def __init__(self, provider: Provider[object]) -> None:
        self._provider = provider
        self.name = provider.NAME
        self.watch_io = provider.WATCH_IO

    def _own(self, config: Config) -> Config:
        """`config`, checked to carry this provider's settings: what makes
        handing it to the provider sound (see `provider_for`)."""
        if not isinstance(config.settings, self._provider.SETTINGS):
            raise TypeError(
                f"a config with {type(config.settings).__name__} settings handed to the"
                f" {self.name} backend"
            )
        return config

    def parse_settings(self, core: Config[BackendTables]) -> Config:
        """`core` with its `[NAME]` table parsed into this backend's settings;
        the other backends' tables it had are `unread`.

        Raises:
            ConfigError: naming the key, with its line when read from a file;
                `watch.enabled` when this backend offers no watch sessions.
        """
        tables = core.settings
        try:
            table = tables.table(self.name, self._provider.KEYS)
            settings = self._provider.parse_settings(table, tables.base_dir)
            check_watch_offered(core.watch, self.name, self.watch_io)
        except ConfigError as exc:
            located = tables.located(exc)
            if located is exc:
                raise
            raise located from exc
        unread = tuple(name for name in tables.tables if name != self.name)
        parsed: Config = core  # the core's view: settings of any type
        return dataclasses.replace(parsed, settings=settings, unread=unread)

    def render(self, config: Config) -> list[Section]:
        return self._provider.render(self._own(config).settings)

    def check_config(self, config: Config, *, reloaded: bool = False) -> None:
        self._provider.check_config(self._own(config), reloaded=reloaded)

    def offered_images(self, config: Config) -> tuple[str, ...] | None:
        return self._provider.offered_images(self._own(config))

    def stop_timeout_s(self, config: Config) -> float:
        return self._provider.stop_timeout_s(self._own(config))

    def config_warnings(self, config: Config, daemon_path: str | None) -> list[str]:
        return self._provider.config_warnings(self._own(config), daemon_path)

    def keep_bound(self, old: Config, new: Config) -> Config:
        """A reloaded `new` with this backend's start-bound settings from `old`
        (all of `old`'s when `new` names another backend: it is not switched
        to without a restart)."""
        kept = self._own(old).settings
        if isinstance(new.settings, self._provider.SETTINGS):
            kept = self._provider.keep_bound(kept, new.settings)
        return dataclasses.replace(new, settings=kept)

    def bound_changes(self, old: Config, new: Config) -> list[str]:
        """Keys of this backend's settings that changed but need a restart
        (its whole table when `new` names another backend)."""
        if not isinstance(new.settings, self._provider.SETTINGS):
            return [self.name]
        return self._provider.bound_changes(self._own(old).settings, new.settings)

    def probe_ahead(self, config: Config) -> AbstractContextManager[object]:
        return self._provider.probe_ahead(self._own(config))

    def open_backend(
        self, config: Config, context: BackendContext
    ) -> AbstractAsyncContextManager[Backend]:
        return self._provider.open_backend(self._own(config), context)


def provider_for(config: Config) -> Configured:
    """The configured backend's provider (its package imported now).

    Raises:
        ConfigError: `runner.backend` names a backend this build lacks.
    """
    name = config.runner.backend
    if name not in BUILT:
        # Refused as a config error: `check-config` and a start both fail
        # fast, before anything listens, instead of serving a runner that
        # cannot start a single session.
        built = " or ".join(repr(built) for built in BUILT)
        problem = f"{name!r} is not available in this build yet; use {built}"
        raise ConfigError("runner.backend", problem)
    # The one cast: a package's settings type is its own (`Provider[LocalConfig]`,
    # proved for each built one below); `Configured._own` checks it at run time
    # before the provider sees a config.
    return Configured(cast("Provider[object]", importlib.import_module(BUILT[name])))


def parse_config(
    data: Mapping[str, object], *, base_dir: Path, read_text: Callable[[Path], str]
) -> Config:
    """`runnerd.config.parse_core`, then the configured backend's table
    parsed by its provider. Pure but for importing that backend.

    Raises:
        ConfigError: the first problem found, naming its key path.
    """
    core = parse_core(data, base_dir=base_dir, read_text=read_text, backends=tuple(BUILT))
    return provider_for(core).parse_settings(core)


def load_config(path: Path) -> Config:
    """The config file (its drop-ins and terms file too) read and parsed, the
    configured backend's table by its provider; errors carry their line.

    Raises:
        ConfigError: unreadable, invalid, or any problem parsing finds.
    """
    core = read_core(path, backends=tuple(BUILT))
    return provider_for(core).parse_settings(core)


def check_config(config: Config) -> Config:
    """`config` once the configured backend accepts it (ConfigError if not)."""
    provider_for(config).check_config(config)
    return config


def render_config(config: Config) -> str:
    """What `check-config` prints: the core and the backend's tables, every
    secret masked (`runnerd.config.render_config`)."""
    provider = provider_for(config)
    return render_core(config, provider.offered_images(config), provider.render(config))


if TYPE_CHECKING:  # every built package satisfies the protocol, with its own settings
    import runnerd.kube.provider
    import runnerd.local
    from runnerd.kube.settings import KubeSettings
    from runnerd.local.settings import LocalConfig

    _kube: Provider[KubeSettings] = runnerd.kube.provider
    _local: Provider[LocalConfig] = runnerd.local
