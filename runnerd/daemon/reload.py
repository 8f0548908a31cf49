"""SIGHUP: re-read the config file and swap in what may change while serving.

Owns the reload rules: the catalog, terms, image allowlist, limits, CORS
origins, allowed hosts, log level and registry sizing (capacity, exit TTL,
replay size) take effect; what is bound at start (listeners, socket mode,
body limit, metrics, the backend and its own settings) is kept and a change
there is logged as needing a restart. The backend's settings are kept and
compared by its provider, on its own typed settings
(`runnerd.backends.Provider.keep_bound` / `bound_changes`). A bad file
keeps the old config and logs why at ERROR. The config now in effect is
warned about as at start-up (`server_warnings`): a reload that opens the API
to every web page (`cors_origins = "*"` with a TCP listener) says so.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import trio

from runnerd.backends import check_config, load_config, provider_for
from runnerd.config import Config, ConfigError, ServerConfig
from runnerd.config.server import server_warnings
from runnerd.daemon.logs import set_log_level
from runnerd.daemon.runtime import Runtime
from runnerd.daemon.systemd import sd_notify

log = logging.getLogger("runnerd.daemon")


def build_reloaded(old: Config, new: Config) -> Config:
    """The config to run on after SIGHUP: `new`'s catalog, terms, image list,
    limits and registry sizing, with what is bound at start (listeners, the
    backend and its own settings) kept from `old`."""
    runner = replace(new.runner, backend=old.runner.backend, state_dir=old.runner.state_dir)
    kept = replace(
        new,
        server=_reloadable_server(old, new),
        runner=runner,
        metrics=old.metrics,  # its listeners are bound at start
        source=old.source,
    )
    return provider_for(old).keep_bound(old, kept)


def check_reloaded(config: Config) -> None:
    """Refuse a reload the running backend cannot run: its settings are kept
    from the start, so the new catalog and image list are checked against
    them, not the file's. Raises ConfigError naming the key."""
    provider_for(config).check_config(config, reloaded=True)


def _reloadable_server(old: Config, new: Config) -> ServerConfig:
    # CORS and allowed hosts are read per request and the log level is ours
    # to set; listeners, socket mode, the body limit and the connection
    # bounds are fixed once the app is serving.
    return replace(
        old.server,
        log_level=new.server.log_level,
        cors_origins=new.server.cors_origins,
        allowed_hosts=new.server.allowed_hosts,
    )


def restart_only_changes(old: Config, new: Config) -> list[str]:
    """Keys that changed in the file but only take effect on restart."""
    changed = []
    if _reloadable_server(old, new) != new.server:
        changed.append("server")
    changed += provider_for(old).bound_changes(old, new)
    if old.runner.backend != new.runner.backend:
        changed.append("runner.backend")
    if old.runner.state_dir != new.runner.state_dir:
        changed.append("runner.state_dir")
    if old.metrics != new.metrics:
        changed.append("metrics")
    return changed


async def reload_config(state: Runtime) -> None:
    """Swap in the re-read config file; keep the old one if it is bad.

    Never raises: a reload must not take the daemon (and its live sessions)
    down, so even an unexpected error is logged and the old config kept."""
    old = state.config
    if old.source is None:
        log.warning("SIGHUP ignored: the config was not loaded from a file")
        return
    source = old.source
    try:
        new = check_config(await trio.to_thread.run_sync(load_config, source))
        reloaded = build_reloaded(old, new)
        check_reloaded(reloaded)
    except (ConfigError, OSError) as exc:
        log.error(
            "reload failed, keeping the previous config",
            extra={"path": str(source), "error": str(exc)},
        )
        return
    except Exception:
        log.exception(
            "reload failed unexpectedly, keeping the previous config", extra={"path": str(source)}
        )
        return
    _apply_reloaded(state, old, new, reloaded)
    await sd_notify("STATUS=config reloaded")


def _apply_reloaded(state: Runtime, old: Config, new: Config, reloaded: Config) -> None:
    state.config = reloaded
    set_log_level(new.server.log_level)
    # Capacity, exit TTL, replay size and the catalog apply from now on; a
    # smaller capacity never stops a live session, and an app withdrawn
    # here fails the start of a session admitted but not yet run.
    state.sessions.reconfigure(
        max_sessions=new.runner.max_sessions,
        exit_ttl_s=new.runner.exit_ttl_s,
        replay_buffer_bytes=new.runner.replay_buffer_bytes,
        apps=reloaded.apps,
        watch=new.watch,
    )
    # What start-up warns about, for the config now in effect (its listeners
    # and socket mode are the running ones, its CORS origins the new ones).
    for warning in server_warnings(reloaded.server):
        log.warning("config: %s", warning)
    ignored = restart_only_changes(old, new)
    if ignored:
        log.warning("reload: some changes need a restart", extra={"keys": ",".join(ignored)})
    log.info(
        "config reloaded",
        extra={"path": str(old.source), "apps": len(new.apps), "terms": new.terms is not None},
    )
