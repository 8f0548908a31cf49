"""Printing the effective configuration (`runnerd check-config`).

Owns `render_config`: the `Config` as TOML, defaults filled in, every secret
(catalog env values, the terms body) masked. The backend's tables come from
its provider as `Section`s (`runnerd.backends.render_config`): this module
formats them and names no backend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from runnerd.config.images import Offered, allowed_images
from runnerd.config.model import Config, toml_key
from runnerd.config.watch import render_watch

MASK = "***"
# One table as `check-config` prints it: its header and its keys in order
# (a None value is left out: unset). A backend renders its tables as these.
Section = tuple[str, Mapping[str, object]]


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a TOML string
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"cannot render {value!r}")


def _section(header: str, items: Mapping[str, object]) -> list[str]:
    lines = [f"[{header}]"]
    lines += [f"{toml_key(k)} = {_toml(v)}" for k, v in items.items() if v is not None]
    return [*lines, ""]


def _render_head(config: Config, offered: Offered) -> list[str]:
    s, r = config.server, config.runner
    out = _section("server", {
        "listen": s.listen, "socket_mode": f"{s.socket_mode:04o}",
        "cors_origins": s.cors_origins, "max_body_bytes": s.max_body_bytes,
        "log_level": s.log_level, "allowed_hosts": s.allowed_hosts,
        "allow_remote": s.allow_remote, "idle_timeout_seconds": s.idle_timeout_s,
        "request_timeout_seconds": s.request_timeout_s, "max_connections": s.max_connections,
    })  # fmt: skip
    out += _section("runner", {
        "backend": r.backend, "display_name": r.display_name, "description": r.description,
        "default_image": r.default_image, "allowed_images": r.allowed_images,
        "registry_url": r.registry_url, "max_sessions": r.max_sessions,
        "max_subscribers_per_session": r.max_subscribers_per_session,
        "exit_ttl_seconds": r.exit_ttl_s, "replay_buffer_bytes": r.replay_buffer_bytes,
        "state_dir": r.state_dir,
    })  # fmt: skip
    if r.allowed_images is None:
        effective = allowed_images(config, offered)
        shown = ", ".join(effective) if effective else f"{r.default_image} only"
        out.insert(len(out) - 1, f"# allowed_images not set; accepted images: {shown}")
    if config.terms is not None:
        t = config.terms
        out += _section("terms", {"version": t.version, "title": t.title, "body": MASK})
    return out


def render_config(config: Config, offered: Offered, backend: list[Section]) -> str:
    """The effective config as TOML (defaults filled in, paths absolute).

    Catalog env values and the terms body are masked as `"***"`: the output
    goes to terminals and logs. It parses back with the same shape.
    `offered`: the backend's images (`runnerd.backends.Provider.offered_images`);
    `backend`: its tables, last (`runnerd.backends.Provider.render`).
    """
    out = [f"# effective config of {config.source or '<memory>'}", ""]
    out += _render_head(config, offered)
    for tier, lim in (("session", config.session_limits), ("app", config.app_limits)):
        out += _section(f"limits.{tier}", {
            "cpu": lim.cpu, "memory": lim.memory,
            "ephemeral_storage": lim.ephemeral_storage, "ttl_seconds": lim.ttl_s,
        })  # fmt: skip
    for app in config.apps.values():
        out += _section(f"apps.{toml_key(app.name)}", {
            "image": app.image, "pull_policy": app.pull_policy, "title": app.title,
            "description": app.description, "env": {k: MASK for k in app.env},
            "port": app.port, "token_env": app.token_env,
        })  # fmt: skip
    out += _section("metrics", {"listen": config.metrics.listen})
    out += _section("watch", render_watch(config.watch))
    for header, items in backend:
        out += _section(header, items)
    for name in config.unread:
        out += [f"# [{name}] not read: runner.backend = {_toml(config.runner.backend)}", ""]
    return "\n".join(out)
