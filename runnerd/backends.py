"""The backends this build offers: the one module that names them.

Owns `BUILT` (a `runner.backend` name to its package) and `Provider`, what
the core asks of a backend package: each package exports these at its top
level (`runnerd.local` does), so the daemon, the CLI and the HTTP edge ask
the configured backend instead of testing its name. A package is imported
only when it is the configured one.

May import: `backend`, `config` (and, by name, the backend packages).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol, cast

from runnerd.backend import Backend, BackendContext
from runnerd.config import Config, ConfigError

# Name → the module exporting the package's Provider (the Kubernetes one is
# its `provider` module, so its pure parts import without trio or httpx).
BUILT: Mapping[str, str] = {"local": "runnerd.local", "kubernetes": "runnerd.kube.provider"}


class Provider(Protocol):
    """What a backend package exports. Every function is pure unless said."""

    NAME: str

    def check_config(self, config: Config, *, reloaded: bool = False) -> None:
        """Refuse a config this backend cannot run (ConfigError naming the
        key). `reloaded`: checked against what was bound at start."""

    def offered_images(self, config: Config) -> tuple[str, ...] | None:
        """The images a bundle session may pick when `runner.allowed_images`
        is unset; None: only `default_image` (advertised read-only)."""

    def stop_timeout_s(self, config: Config) -> float:
        """How long a user stop may wait for a workload to be gone."""

    def config_warnings(self, config: Config, daemon_path: str | None) -> list[str]:
        """What a valid config may still get wrong on this host (reads the
        filesystem); `check-config` prints them."""

    def keep_bound(self, old: Config, new: Config) -> Config:
        """A reloaded `new` with this backend's start-bound settings from `old`."""

    def bound_changes(self, old: Config, new: Config) -> list[str]:
        """Keys of this backend's that changed but need a restart."""

    def open_backend(
        self, config: Config, context: BackendContext
    ) -> AbstractAsyncContextManager[Backend]:
        """The backend, open for the daemon's lifetime: entered in the root
        nursery before the session manager runs (the listeners are bound by
        then: `context.hidden_paths` names their directories), exited after
        every session has ended. A backend that counts (apiserver requests)
        registers its series in `context.metrics` and counts there. It is
        never handed the catalog: the session core re-checks an app session
        against it just before `run()`. Raises ConfigError for what the
        operator must fix."""


def provider_for(config: Config) -> Provider:
    """The configured backend's package.

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
    return cast(Provider, importlib.import_module(BUILT[name]))


def check_config(config: Config) -> Config:
    """`config` once the configured backend accepts it (ConfigError if not)."""
    provider_for(config).check_config(config)
    return config


if TYPE_CHECKING:  # every built package satisfies the protocol
    import runnerd.kube.provider
    import runnerd.local

    _kube: Provider = runnerd.kube.provider
    _local: Provider = runnerd.local
