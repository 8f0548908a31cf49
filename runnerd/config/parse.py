"""Parsing the operator configuration's core: a TOML dict in, a validated `Config` out.

Owns `parse_core` (pure: file reads are injected) and the core's section
readers. A backend's own table (`[local]`, `[kubernetes]`) is kept unread in
`BackendTables`, for its provider (`runnerd.backends.parse_config`); what a
backend requires of the rest (the local backend's image rule) is that
backend's `check_config`, run by `runnerd.backends.check_config`.
Strict: an unknown key is an error (a typo never silently falls back to a
default), and every error names the key path and the problem, e.g.
`runner.max_sessions: must be a positive integer, got 'x'`. The decisions
behind the rules are in `runnerd.config`'s docstring.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

from runnerd.config.envnames import is_env_name
from runnerd.config.listen import format_listen, parse_listen
from runnerd.config.model import (
    DEFAULT_APP_LIMITS,
    DEFAULT_SESSION_LIMITS,
    AppEntry,
    Config,
    ConfigError,
    MetricsConfig,
    RunnerConfig,
    ServerConfig,
    TermsConfig,
    TierLimits,
)
from runnerd.config.quantities import QuantityError, parse_quantity
from runnerd.config.server import SERVER_KEYS, check_loopback, parse_server, same_tcp_address
from runnerd.config.table import BackendTables, Table, show
from runnerd.config.watch import WATCH_KEYS, parse_agent_keys, parse_watch
from runnerd.contract import PullPolicy

# The core's tables; the root also holds one table per built backend
# (`parse_config`'s `backends`), kept unread for its provider.
CORE_KEYS = ("server", "runner", "terms", "limits", "apps", "metrics", "watch")
_RUNNER_KEYS = (
    "backend", "display_name", "description", "default_image", "allowed_images",
    "registry_url", "max_sessions", "max_subscribers_per_session", "exit_ttl_seconds",
    "replay_buffer_bytes", "state_dir",
)  # fmt: skip
_TIER_KEYS = ("cpu", "memory", "ephemeral_storage", "ttl_seconds")
_APP_KEYS = ("image", "pull_policy", "title", "description", "env", "port", "token_env")
_LOG_LEVELS = ("debug", "info", "warning", "error")
_PULL_POLICIES = ("missing", "always", "never")
# App names appear in URL paths (/v1/apps/{name}/sessions): keep them URL-safe.
_APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


def _parse_metrics(t: Table, base_dir: Path, server: ServerConfig) -> MetricsConfig:
    """`[metrics] listen`: one entry or a list, the `server.listen` grammar minus
    `systemd` (passed sockets all serve the API), never an API listener's
    address, and loopback only unless `server.allow_remote` (as the API)."""
    raw = t.data.get("listen", [])
    entries = t.string_list("listen") if isinstance(raw, list) else (t.string("listen", ""),)
    listen: list[str] = []
    for i, entry in enumerate(entries or ()):
        key = f"metrics.listen[{i}]" if isinstance(raw, list) else "metrics.listen"
        try:
            address = parse_listen(entry, base_dir)
        except ValueError as exc:
            raise ConfigError(key, str(exc)) from None
        if address.kind == "systemd":
            raise ConfigError(key, "'systemd' sockets serve the API; give metrics an address")
        if address.kind == "tcp" and not server.allow_remote:
            check_loopback(key, entry, address.host or "", "the metrics")
        canonical = format_listen(address)
        if canonical in server.listen:
            raise ConfigError(key, f"{entry!r} is a server.listen entry; metrics get their own")
        for j, api in enumerate(server.listen):
            if same_tcp_address(canonical, api):
                raise ConfigError(
                    key, f"{entry!r} is the address of server.listen[{j}] ({api}); metrics "
                    "get their own",
                )  # fmt: skip
        if canonical in listen:
            raise ConfigError(key, f"{entry!r} is listed twice")
        listen.append(canonical)
    return MetricsConfig(listen=tuple(listen))


def _parse_runner(t: Table, base_dir: Path, backends: tuple[str, ...]) -> RunnerConfig:
    d = RunnerConfig(backend=backends[0])
    allowed = t.string_list("allowed_images")
    for i, image in enumerate(allowed or ()):
        if image in (allowed or ())[:i]:
            raise ConfigError(f"runner.allowed_images[{i}]", f"{image!r} is listed twice")
    return RunnerConfig(
        backend=t.choice("backend", d.backend, backends),
        display_name=t.string("display_name", d.display_name),
        description=t.string("description", d.description, empty_ok=True),
        default_image=t.string("default_image", d.default_image),
        allowed_images=allowed or None,  # [] is "not configured"
        registry_url=t.optional_string("registry_url"),
        max_sessions=t.positive_int("max_sessions", d.max_sessions),
        max_subscribers_per_session=t.positive_int(
            "max_subscribers_per_session", d.max_subscribers_per_session
        ),
        exit_ttl_s=t.seconds("exit_ttl_seconds", d.exit_ttl_s),
        replay_buffer_bytes=t.positive_int("replay_buffer_bytes", d.replay_buffer_bytes),
        state_dir=Path(os.path.normpath(base_dir / t.string("state_dir", str(d.state_dir)))),
    )


def _quantity(t: Table, name: str, default: str) -> str:
    value = t.data.get(name, default)
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    try:
        if not isinstance(text, str) or parse_quantity(text) <= 0:
            raise QuantityError("")
    except QuantityError:
        raise ConfigError(
            t.key(name),
            f"must be a positive Kubernetes quantity (e.g. 500m, 1Gi), got {show(value)}",
        ) from None
    return text.strip()


def _parse_tier(t: Table, default: TierLimits) -> TierLimits:
    return TierLimits(
        cpu=_quantity(t, "cpu", default.cpu),
        memory=_quantity(t, "memory", default.memory),
        ephemeral_storage=_quantity(t, "ephemeral_storage", default.ephemeral_storage),
        ttl_s=t.seconds("ttl_seconds", default.ttl_s),
    )


def _parse_terms(t: Table, base_dir: Path, read_text: Callable[[Path], str]) -> TermsConfig | None:
    if "file" in t.data and "body" in t.data:
        raise ConfigError("terms", "give either file or body, not both")
    if "file" in t.data:
        path = Path(os.path.normpath(base_dir / t.string("file", "")))
        try:
            body = read_text(path)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError("terms.file", f"cannot read {str(path)!r}: {reason}") from exc
    elif "body" in t.data:
        body = t.string("body", "", empty_ok=True)
    else:
        raise ConfigError("terms", "needs file or body (remove [terms] to run without terms)")
    title = t.string("title", "Usage agreement")
    version = t.optional_string("version")
    if not body.strip():
        return None  # an empty body is "no terms", per the contract
    # The body's hash as the default version: any edit re-prompts every client.
    version = version or hashlib.sha256(body.encode("utf-8")).hexdigest()[:12]
    return TermsConfig(version=version, title=title, body=body)


def _parse_app(t: Table, name: str) -> AppEntry:
    if not _APP_NAME.fullmatch(name):
        raise ConfigError(
            t.path,
            "an app name is 1-63 letters, digits, '-' or '_', starting with a letter or digit",
        )
    if "image" not in t.data:
        raise ConfigError(t.key("image"), "is required")
    env = t.table("env", None)
    for key, value in env.data.items():
        if not is_env_name(key):
            raise ConfigError(env.key(key), "is not a valid environment variable name")
        if not isinstance(value, str) or "\0" in value:
            # Never echo the value: catalog env values may be secrets.
            raise ConfigError(env.key(key), "must be a string (without NUL bytes)")
    port, token_env = parse_agent_keys(t)
    return AppEntry(
        name=name,
        image=t.string("image", ""),
        pull_policy=cast(PullPolicy, t.choice("pull_policy", "missing", _PULL_POLICIES)),
        title=t.optional_string("title"),
        description=t.optional_string("description"),
        env=cast(dict[str, str], dict(env.data)),
        port=port,
        token_env=token_env,
    )


def parse_core(
    data: Mapping[str, object],
    *,
    base_dir: Path,
    read_text: Callable[[Path], str],
    backends: tuple[str, ...],
) -> Config[BackendTables]:
    """Build a validated `Config` of the core tables from parsed TOML, the
    backend tables kept unread (`Config.settings`, for the configured
    backend's provider: `runnerd.backends.parse_config` does both).

    `base_dir` (absolute) is what relative paths resolve against; `read_text`
    reads the terms file (injected so this stays pure); `backends`: the
    names `runner.backend` may take (the first when the file names none),
    each also a root table this keeps.

    Raises:
        ConfigError: the first problem found, naming its key path.
    """
    root = Table(dict(data), "", (*CORE_KEYS, *backends))
    server = parse_server(root.table("server", SERVER_KEYS), base_dir)
    runner = _parse_runner(root.table("runner", _RUNNER_KEYS), base_dir, backends)
    limits = root.table("limits", ("session", "app"))
    session_limits = _parse_tier(limits.table("session", _TIER_KEYS), DEFAULT_SESSION_LIMITS)
    app_limits = _parse_tier(limits.table("app", _TIER_KEYS), DEFAULT_APP_LIMITS)
    terms = None
    if "terms" in root.data:
        terms_table = root.table("terms", ("file", "body", "title", "version"))
        terms = _parse_terms(terms_table, base_dir, read_text)
    apps_table = root.table("apps", None)
    apps = {name: _parse_app(apps_table.table(name, _APP_KEYS), name) for name in apps_table.data}
    metrics = _parse_metrics(root.table("metrics", ("listen",)), base_dir, server)
    watch = parse_watch(root.table("watch", WATCH_KEYS))
    if runner.allowed_images and runner.default_image not in runner.allowed_images:
        raise ConfigError(
            "runner.allowed_images", f"must include default_image {runner.default_image!r}"
        )
    tables = {name: root.table(name, None).data for name in backends if name in root.data}
    return Config(
        server=server,
        runner=runner,
        session_limits=session_limits,
        app_limits=app_limits,
        settings=BackendTables(tables, base_dir),
        terms=terms,
        apps=apps,
        metrics=metrics,
        watch=watch,
    )
