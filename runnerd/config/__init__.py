"""Operator configuration's core: the entry point every other module imports from.

The package: `model` (the frozen dataclasses, `ConfigError`), `table` (the
strict TOML table reader, and `BackendTables`), `parse` (a dict in, a
`Config` out), `server` (`[server]`), `listen` (listen addresses),
`quantities` (Kubernetes quantities), `envnames`, `images` (the image
allowlist), `lines` (error line numbers), `render` (the masked rendering),
`watch` (`[watch]`, the catalog's agent keys). All pure but this module's
file reads. May import: `contract`, `errors`, `backend`; nothing above.

It names no backend. It parses the core tables (`[server]`, `[runner]`,
`[limits]`, `[terms]`, `[apps]`, `[metrics]`, `[watch]`) and keeps each backend's table
unread, with the file's text for the line numbers errors need
(`BackendTables`, in `Config.settings`); `runner.backend` is a plain name,
one of those the caller passes (`runnerd.backends.BUILT`). The configured
backend's provider parses its own table (`Provider.parse_settings`) and
renders it (`Provider.render`); `runnerd.backends` puts the two together
(`load_config`, `parse_config`, `render_config`), so a `Config` the daemon
runs on carries its backend's typed settings (`Config[ItsSettings]` to its
package, `Config` = `Config[object]` to the core).

Owns `read_core` (reads the TOML file, the `apps.d/*.toml` drop-ins and the
terms file) and re-exports the rest, so `from runnerd.config import ...` is
the one place to get it: the `Config` dataclasses and `ConfigError`
(`runnerd.config.model`), `parse_core` (pure: a dict in, a Config out, file
reads injected; `runnerd.config.parse`), `Table` / `show` (what a backend
reads its table with) and `render_config` (the effective config with every
secret masked, `runnerd check-config`; `runnerd.config.render`).

Every error names the key path and the problem, e.g.
`runner.max_sessions: must be a positive integer, got 'x'`. Strict: an
unknown key is an error (a typo never silently falls back to a default), and a
malformed catalog entry fails the whole load (never a silently shorter catalog).

Decisions (documented for operators in config/runnerd.toml):
- Relative paths (unix sockets, `terms.file`, a backend's paths) resolve
  against the directory of the config file, never the CWD, so a systemd unit
  and a shell in another directory read the same file the same way. `Config`
  holds them absolute.
- Drop-ins `apps.d/*.toml` (next to the config file, read in sorted order,
  dotfiles skipped) hold `[apps.NAME]` tables only: the same syntax as the
  main file, so an entry moves between files verbatim. An app defined twice
  (in any two files) is an error naming both files.
- `allowed_images = []` means "not configured" (the issue's example writes it
  that way); a non-empty list must include `default_image`.
- Environment variable names (catalog env, session env) follow one rule,
  `runnerd.config.envnames.is_env_name`.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

from runnerd.config.lines import find_key_line
from runnerd.config.listen import ListenAddress as ListenAddress
from runnerd.config.listen import format_listen as format_listen
from runnerd.config.listen import parse_listen as parse_listen
from runnerd.config.model import DEFAULT_APP_LIMITS as DEFAULT_APP_LIMITS
from runnerd.config.model import DEFAULT_LISTEN as DEFAULT_LISTEN
from runnerd.config.model import DEFAULT_SESSION_LIMITS as DEFAULT_SESSION_LIMITS
from runnerd.config.model import AppEntry as AppEntry
from runnerd.config.model import Config as Config
from runnerd.config.model import ConfigError as ConfigError
from runnerd.config.model import MetricsConfig as MetricsConfig
from runnerd.config.model import RunnerConfig as RunnerConfig
from runnerd.config.model import ServerConfig as ServerConfig
from runnerd.config.model import TermsConfig as TermsConfig
from runnerd.config.model import TierLimits as TierLimits
from runnerd.config.model import WatchConfig as WatchConfig
from runnerd.config.model import toml_key as toml_key
from runnerd.config.parse import parse_core as parse_core
from runnerd.config.render import MASK as MASK
from runnerd.config.render import Section as Section
from runnerd.config.render import render_config as render_config
from runnerd.config.table import BackendTables as BackendTables
from runnerd.config.table import Table as Table
from runnerd.config.table import show as show

DROP_IN_DIR = "apps.d"
# No key of the config nests more than 5 levels (`apps.NAME.env.KEY`, a
# runtime's command list); 32 leaves room and keeps every walk over the
# parsed data (parse, render) far from Python's recursion limit.
MAX_TOML_DEPTH = 32


def _check_depth(data: dict[str, object], where: str) -> None:
    """Refuse values nested deeper than MAX_TOML_DEPTH, iteratively (the
    check itself cannot hit the recursion limit); the key is the top-level
    path where it happens."""
    stack: list[tuple[object, str, int]] = [(value, key, 1) for key, value in data.items()]
    while stack:
        node, key, depth = stack.pop()
        if depth > MAX_TOML_DEPTH:
            raise ConfigError(key, f"nests deeper than the limit of {MAX_TOML_DEPTH} levels{where}")
        if isinstance(node, dict):
            # The path names the first levels only: enough to find the value.
            named = (f"{key}.{k}" if depth < 3 else key for k in node)
            stack.extend((v, name, depth + 1) for v, name in zip(node.values(), named, strict=True))
        elif isinstance(node, list):
            stack.extend((item, key, depth + 1) for item in node)


def _read_toml(path: Path, *, named: bool) -> tuple[dict[str, object], str]:
    """The parsed file and its text. `named`: say which file in the message
    (the main file's name is already in front of every error the CLI prints)."""
    what = f"{str(path)!r} " if named else ""
    try:
        text = path.read_bytes().decode("utf-8")
        data = tomllib.loads(text)
    except OSError as exc:
        raise ConfigError("", f"cannot read {what}".strip() + f": {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message carries "(at line N, column M)".
        raise ConfigError("", f"{what}is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"{what}is not valid UTF-8 (byte {exc.start}: {exc.reason})") from exc
    except RecursionError:
        # tomllib parses nested arrays and inline tables recursively.
        limit = f"deeper than the limit of {MAX_TOML_DEPTH} levels"
        raise ConfigError("", f"{what}is not a usable config: values nest {limit}") from None
    _check_depth(data, f" in {path}" if named else "")
    return data, text


def _merge_drop_ins(data: dict[str, object], path: Path, texts: dict[Path, str]) -> dict[str, Path]:
    """Add every `apps.d/*.toml` app to `data["apps"]` (and each file's text
    to `texts`); returns app → file."""
    apps = data.setdefault("apps", {})
    if not isinstance(apps, dict):
        raise ConfigError("apps", f"must be a table, got {show(apps)}")
    origin = {name: path for name in apps}
    drop_dir = path.parent / DROP_IN_DIR
    files = sorted(drop_dir.glob("*.toml")) if drop_dir.is_dir() else []
    for file in (f for f in files if not f.name.startswith(".") and f.is_file()):
        extra, texts[file] = _read_toml(file, named=True)
        for key in extra:
            if key != "apps":
                raise ConfigError(
                    key, f"not allowed in {file}: a drop-in holds only [apps.NAME] tables"
                )
        more = extra.get("apps", {})
        if not isinstance(more, dict):
            raise ConfigError("apps", f"must be a table in {file}, got {show(more)}")
        for name, entry in more.items():
            if name in origin:
                raise ConfigError(f"apps.{name}", f"defined in both {origin[name]} and {file}")
            origin[name] = file
            apps[name] = entry
    return origin


def read_core(path: Path, *, backends: tuple[str, ...]) -> Config[BackendTables]:
    """Read the config file, its `apps.d/*.toml` drop-ins and the terms file:
    the core parsed (`parse_core`), the backend tables kept with the file's
    text, so a backend's error finds its line (`BackendTables.located`).

    Raises:
        ConfigError: unreadable or invalid TOML, or any problem `parse_core`
            finds; an error inside a drop-in's app names that file.
    """
    path = Path(os.path.abspath(path))
    data, text = _read_toml(path, named=False)
    texts = {path: text}
    origin = _merge_drop_ins(data, path, texts)
    try:
        config = parse_core(
            data,
            base_dir=path.parent,
            read_text=lambda p: p.read_text(encoding="utf-8"),
            backends=backends,
        )
    except ConfigError as exc:
        for name, file in origin.items():
            key = f"apps.{toml_key(name)}"
            if file != path and (exc.key == key or exc.key.startswith(f"{key}.")):
                line = find_key_line(texts[file], exc.key)
                where = f"{file}" if line is None else f"{file}, line {line}"
                raise ConfigError(exc.key, f"{exc.problem} (in {where})") from exc
        line = find_key_line(text, exc.key) if exc.key else None
        raise ConfigError(exc.key, exc.problem, line) from exc
    tables = dataclasses.replace(config.settings, text=text)
    return dataclasses.replace(config, settings=tables, source=path)
