"""`[watch]`: the watch-session settings, and the catalog's agent keys. Pure.

Owns `parse_watch` and `render_watch` (the table's shape, `WatchConfig`, is
in `runnerd.config.model` with the other sections, each default justified)
and the two keys a catalog entry gains for watch sessions (`port`,
`token_env`: `parse_agent_keys`). The contract's table: every value an
integer ≥ 1, an unknown key refused naming it.

Whether a backend serves watch sessions is its provider's to say
(`runnerd.backends.Provider.WATCH_IO`: the `io` modes its apps may have;
none on a backend without them). `check_watch_offered` refuses `enabled =
true` on a backend that offers none, so neither `check-config` nor start-up
nor a reload accepts a file that asks for them, rather than a daemon that
says it serves them and does not.
"""

from __future__ import annotations

from runnerd.config.envnames import is_env_name
from runnerd.config.model import ConfigError, WatchConfig
from runnerd.config.table import Table, show

WATCH_KEYS = (
    "enabled", "max_sessions", "idle_seconds", "checkpoint_seconds",
    "suspended_ttl_seconds", "reload_limit", "max_ttl_seconds",
)  # fmt: skip


def _integer(t: Table, name: str, default: int) -> int:
    value = t.data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(t.key(name), f"must be an integer of at least 1, got {show(value)}")
    return value


def parse_watch(t: Table) -> WatchConfig:
    """`[watch]` (`t` read with `WATCH_KEYS`, so an unknown key is already refused).

    Raises:
        ConfigError: a value that is not an integer ≥ 1 (or a boolean for
            `enabled`).
    """
    enabled = t.data.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ConfigError(t.key("enabled"), f"must be true or false, got {show(enabled)}")
    d = WatchConfig()
    watch = WatchConfig(
        enabled=enabled,
        max_sessions=_integer(t, "max_sessions", d.max_sessions),
        idle_seconds=_integer(t, "idle_seconds", d.idle_seconds),
        checkpoint_seconds=_integer(t, "checkpoint_seconds", d.checkpoint_seconds),
        suspended_ttl_seconds=_integer(t, "suspended_ttl_seconds", d.suspended_ttl_seconds),
        reload_limit=_integer(t, "reload_limit", d.reload_limit),
        max_ttl_seconds=_integer(t, "max_ttl_seconds", d.max_ttl_seconds),
    )
    return watch


def check_watch_offered(watch: WatchConfig, backend: str, watch_io: tuple[str, ...]) -> None:
    """Refuse `[watch] enabled = true` on a backend that offers no watch io.

    `backend`: `runner.backend`; `watch_io`: its provider's `WATCH_IO`.

    Raises:
        ConfigError: naming `watch.enabled`.
    """
    if watch.enabled and not watch_io:
        raise ConfigError(
            "watch.enabled",
            f"watch sessions are not available on the {backend} backend yet; "
            "set it to false or remove it",
        )


def render_watch(watch: WatchConfig) -> dict[str, object]:
    """The table's keys and values, in the contract's order, for `check-config`."""
    return {key: getattr(watch, key) for key in WATCH_KEYS}


def parse_agent_keys(t: Table) -> tuple[int | None, str | None]:
    """A catalog entry's `port` (1..65535, the tcp port it listens on as a
    co-resident agent) and `token_env` (an env name, the client env-name rule
    of `runnerd.config.envnames`); None when absent.

    Raises:
        ConfigError: naming `apps.NAME.port` or `apps.NAME.token_env`.
    """
    port = t.data.get("port")
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
    ):
        raise ConfigError(t.key("port"), f"must be a port number 1..65535, got {show(port)}")
    token_env = t.data.get("token_env")
    if token_env is not None and (not isinstance(token_env, str) or not is_env_name(token_env)):
        raise ConfigError(
            t.key("token_env"),
            "must be an environment variable name (letters, digits and '_', not starting "
            f"with a digit), got {show(token_env)}",
        )
    return port, token_env
