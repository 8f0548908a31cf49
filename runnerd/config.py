"""Operator configuration: the typed, validated shape runnerd runs on.

Owns the `Config` dataclasses (frozen: a reload builds a new one and swaps it
whole) and `ConfigError`. Parsing lives in `parse_config` (pure: a dict in, a
Config out, file reads injected) and `load_config` (reads the TOML file, the
`apps.d/*.toml` drop-ins and the terms file); `render_config` prints the
effective config with every secret masked (`runnerd check-config`).

Every error names the key path and the problem, e.g.
`runner.max_sessions: must be a positive integer, got 'x'`. Strict: an
unknown key is an error (a typo never silently falls back to a default), and a
malformed catalog entry fails the whole load (never a silently shorter catalog).

Decisions (documented for operators in config/runnerd.toml):
- Relative paths (unix sockets, `local.workdir`, `terms.file`) resolve against
  the directory of the config file, never the CWD, so a systemd unit and a
  shell in another directory read the same file the same way. `Config` holds
  them absolute.
- Drop-ins `apps.d/*.toml` (next to the config file, read in sorted order,
  dotfiles skipped) hold `[apps.NAME]` tables only: the same syntax as the
  main file, so an entry moves between files verbatim. An app defined twice
  (in any two files) is an error naming both files.
- On the local backend an "image" is a `[local.runtimes.NAME]`. A runtime
  whose command contains `{entry}` runs bundles; one without runs as is and is
  what a catalog app names (an app session has no bundle). So
  `default_image` and `allowed_images` must name `{entry}` runtimes, and an
  app's `image` a runtime without `{entry}`.
- `allowed_images = []` means "not configured" (the issue's example writes it
  that way); a non-empty list must include `default_image`.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from runnerd.contract import PullPolicy
from runnerd.limits import QuantityError, parse_quantity
from runnerd.listen_address import ListenAddress as ListenAddress
from runnerd.listen_address import format_listen as format_listen
from runnerd.listen_address import parse_listen as parse_listen


class ConfigError(ValueError):
    """A config file that cannot be run on. `key` is the dotted key path."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class ServerConfig:
    # "unix:/path", "tcp:HOST:PORT", "fd:N", or "systemd" (LISTEN_FDS).
    listen: tuple[str, ...]
    socket_mode: int = 0o660
    # "*" or an explicit allowlist of origins.
    cors_origins: Literal["*"] | tuple[str, ...] = "*"
    max_body_bytes: int = 16 * 1024 * 1024
    log_level: str = "info"


@dataclass(frozen=True)
class TermsConfig:
    version: str
    title: str
    body: str


@dataclass(frozen=True)
class TierLimits:
    """Ceilings for one tier, as Kubernetes quantities plus a TTL in seconds."""

    cpu: str
    memory: str
    ephemeral_storage: str
    ttl_s: float


@dataclass(frozen=True)
class AppEntry:
    name: str
    image: str
    pull_policy: PullPolicy = "missing"
    title: str | None = None
    description: str | None = None
    # Operator values; may be secrets. Never logged, never sent to a client
    # (repr=False: a logged config or entry must not carry them either).
    env: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class RuntimeConfig:
    """A local-backend "image": a command line with `{entry}` substituted."""

    name: str
    command: tuple[str, ...]
    # Extra argv when the session asks for `inspect`; `{inspect_port}` substituted.
    inspect_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class LocalConfig:
    workdir: Path = Path("/var/lib/runnerd/sessions")
    stop_grace_s: float = 2.0
    runtimes: Mapping[str, RuntimeConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class RunnerConfig:
    backend: Literal["local", "kubernetes"] = "local"
    display_name: str = "Telo Runner"
    description: str = "Runs Telo applications on this host."
    default_image: str = "telorun/node:latest-slim"
    # None: not configured (backend default applies, see
    # `runnerd.capabilities.allowed_images`).
    allowed_images: tuple[str, ...] | None = None
    registry_url: str | None = None
    max_sessions: int = 32
    exit_ttl_s: float = 4 * 3600.0
    replay_buffer_bytes: int = 5_000_000


@dataclass(frozen=True)
class Config:
    server: ServerConfig
    runner: RunnerConfig
    session_limits: TierLimits
    app_limits: TierLimits
    local: LocalConfig
    terms: TermsConfig | None = None
    apps: Mapping[str, AppEntry] = field(default_factory=dict)
    # The file this was loaded from (SIGHUP re-reads it), None when built in code.
    source: Path | None = None


# --------------------------------------------------------------------------
# Reading TOML tables strictly
# --------------------------------------------------------------------------


def _show(value: object) -> str:
    """A value as an operator wrote it, for an error message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    return repr(value)


def _key(name: str) -> str:
    """A TOML key as written: bare when it can be, quoted otherwise."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


class _Table:
    """One TOML table under a dotted key path. Refuses keys it does not know,
    and every reader names the full key path in its error."""

    def __init__(self, data: object, path: str, known: tuple[str, ...] | None) -> None:
        if not isinstance(data, dict):
            raise ConfigError(path, f"must be a table, got {_show(data)}")
        self.data = cast(dict[str, object], data)
        self.path = path
        for key in self.data:
            if known is not None and key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(self.key(key), f"unknown key{hint}")

    def key(self, name: str) -> str:
        return f"{self.path}.{_key(name)}" if self.path else _key(name)

    def table(self, name: str, known: tuple[str, ...] | None) -> _Table:
        return _Table(self.data.get(name, {}), self.key(name), known)

    def string(self, name: str, default: str, *, empty_ok: bool = False) -> str:
        value = self.data.get(name, default)
        if not isinstance(value, str) or (not empty_ok and not value.strip()):
            raise ConfigError(self.key(name), f"must be a non-empty string, got {_show(value)}")
        return value

    def optional_string(self, name: str) -> str | None:
        """An optional string; blank counts as unset."""
        value = self.string(name, "", empty_ok=True).strip()
        return value or None

    def positive_int(self, name: str, default: int) -> int:
        value = self.data.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(self.key(name), f"must be a positive integer, got {_show(value)}")
        return value

    def seconds(self, name: str, default: float, *, zero_ok: bool = False) -> float:
        value = self.data.get(name, default)
        if isinstance(value, int | float) and not isinstance(value, bool):
            if math.isfinite(value) and (value > 0 or (zero_ok and value == 0)):
                return float(value)
        word = "a non-negative" if zero_ok else "a positive"
        raise ConfigError(self.key(name), f"must be {word} number of seconds, got {_show(value)}")

    def string_list(self, name: str, *, empty_ok: bool = True) -> tuple[str, ...] | None:
        """None when absent; every item a non-empty string."""
        if name not in self.data:
            return None
        value = self.data[name]
        if not isinstance(value, list) or (not value and not empty_ok):
            raise ConfigError(self.key(name), f"must be a list of strings, got {_show(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                raise ConfigError(
                    f"{self.key(name)}[{i}]", f"must be a non-empty string, got {_show(item)}"
                )
        return tuple(value)

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.data.get(name, default)
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(
                self.key(name), f"must be one of {', '.join(choices)}, got {_show(value)}"
            )
        return value


# --------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------

_ROOT_KEYS = ("server", "runner", "terms", "limits", "apps", "local")
_SERVER_KEYS = ("listen", "socket_mode", "cors_origins", "max_body_bytes", "log_level")
_RUNNER_KEYS = (
    "backend", "display_name", "description", "default_image", "allowed_images",
    "registry_url", "max_sessions", "exit_ttl_seconds", "replay_buffer_bytes",
)  # fmt: skip
_TIER_KEYS = ("cpu", "memory", "ephemeral_storage", "ttl_seconds")
_APP_KEYS = ("image", "pull_policy", "title", "description", "env")
_LOCAL_KEYS = ("workdir", "stop_grace_seconds", "runtimes")
_RUNTIME_KEYS = ("command", "inspect_args")
_LOG_LEVELS = ("debug", "info", "warning", "error")
_PULL_POLICIES = ("missing", "always", "never")
# App names appear in URL paths (/v1/apps/{name}/sessions): keep them URL-safe.
_APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Production default: the systemd unit's RuntimeDirectory, reachable only
# through the socket's group. TCP is opt-in: it has no peer credentials.
DEFAULT_LISTEN = ("unix:/run/runnerd/runnerd.sock",)
DEFAULT_SESSION_LIMITS = TierLimits("50m", "100Mi", "512Mi", 3600.0)
DEFAULT_APP_LIMITS = TierLimits("500m", "512Mi", "1Gi", 21600.0)
ENTRY = "{entry}"
# Backends this build can serve; "kubernetes" parses but arrives with its issue.
BUILT_BACKENDS = ("local",)


def _parse_server(t: _Table, base_dir: Path) -> ServerConfig:
    entries = t.string_list("listen", empty_ok=False)
    listen: list[str] = []
    for i, entry in enumerate(entries or DEFAULT_LISTEN):
        try:
            canonical = format_listen(parse_listen(entry, base_dir))
        except ValueError as exc:
            raise ConfigError(f"server.listen[{i}]", str(exc)) from None
        if canonical in listen:
            raise ConfigError(f"server.listen[{i}]", f"{entry!r} is listed twice")
        listen.append(canonical)
    mode = t.string("socket_mode", "0660")
    if not re.fullmatch(r"0?[0-7]{3}", mode):
        raise ConfigError(
            "server.socket_mode", f'must be an octal string like "0660", got {mode!r}'
        )
    return ServerConfig(
        listen=tuple(listen),
        socket_mode=int(mode, 8),
        cors_origins=_parse_cors(t),
        max_body_bytes=t.positive_int("max_body_bytes", 16 * 1024 * 1024),
        log_level=t.choice("log_level", "info", _LOG_LEVELS),
    )


def _parse_cors(t: _Table) -> Literal["*"] | tuple[str, ...]:
    if t.data.get("cors_origins", "*") == "*":
        return "*"
    origins = t.string_list("cors_origins") or ()
    for i, origin in enumerate(origins):
        # A browser's Origin never ends in "/", so such an entry never matches.
        if "://" not in origin or origin.endswith("/"):
            hint = ' (for any origin write cors_origins = "*")' if origin == "*" else ""
            raise ConfigError(
                f"server.cors_origins[{i}]",
                f"must be an origin like https://editor.example.com, got {origin!r}{hint}",
            )
    return origins


def _backend(t: _Table) -> str:
    backend = t.choice("backend", "local", ("local", "kubernetes"))
    if backend not in BUILT_BACKENDS:
        # Refused here, not at bind time: `check-config` and a start both fail
        # fast, before anything listens, instead of serving a runner that
        # cannot start a single session.
        raise ConfigError(
            "runner.backend", f"{backend!r} is not available in this build yet; use 'local'"
        )
    return backend


def _parse_runner(t: _Table) -> RunnerConfig:
    d = RunnerConfig()
    allowed = t.string_list("allowed_images")
    for i, image in enumerate(allowed or ()):
        if image in (allowed or ())[:i]:
            raise ConfigError(f"runner.allowed_images[{i}]", f"{image!r} is listed twice")
    return RunnerConfig(
        backend=cast(Literal["local", "kubernetes"], _backend(t)),
        display_name=t.string("display_name", d.display_name),
        description=t.string("description", d.description, empty_ok=True),
        default_image=t.string("default_image", d.default_image),
        allowed_images=allowed or None,  # [] is "not configured"
        registry_url=t.optional_string("registry_url"),
        max_sessions=t.positive_int("max_sessions", d.max_sessions),
        exit_ttl_s=t.seconds("exit_ttl_seconds", d.exit_ttl_s),
        replay_buffer_bytes=t.positive_int("replay_buffer_bytes", d.replay_buffer_bytes),
    )


def _quantity(t: _Table, name: str, default: str) -> str:
    value = t.data.get(name, default)
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    try:
        if not isinstance(text, str) or parse_quantity(text) <= 0:
            raise QuantityError("")
    except QuantityError:
        raise ConfigError(
            t.key(name),
            f"must be a positive Kubernetes quantity (e.g. 500m, 1Gi), got {_show(value)}",
        ) from None
    return text.strip()


def _parse_tier(t: _Table, default: TierLimits) -> TierLimits:
    return TierLimits(
        cpu=_quantity(t, "cpu", default.cpu),
        memory=_quantity(t, "memory", default.memory),
        ephemeral_storage=_quantity(t, "ephemeral_storage", default.ephemeral_storage),
        ttl_s=t.seconds("ttl_seconds", default.ttl_s),
    )


def _parse_terms(t: _Table, base_dir: Path, read_text: Callable[[Path], str]) -> TermsConfig | None:
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


def _parse_app(t: _Table, name: str) -> AppEntry:
    if not _APP_NAME.fullmatch(name):
        raise ConfigError(
            t.path,
            "an app name is 1-63 letters, digits, '-' or '_', starting with a letter or digit",
        )
    if "image" not in t.data:
        raise ConfigError(t.key("image"), "is required")
    env = t.table("env", None)
    for key, value in env.data.items():
        if not _ENV_NAME.fullmatch(key):
            raise ConfigError(env.key(key), "is not a valid environment variable name")
        if not isinstance(value, str) or "\0" in value:
            # Never echo the value: catalog env values may be secrets.
            raise ConfigError(env.key(key), "must be a string (without NUL bytes)")
    return AppEntry(
        name=name,
        image=t.string("image", ""),
        pull_policy=cast(PullPolicy, t.choice("pull_policy", "missing", _PULL_POLICIES)),
        title=t.optional_string("title"),
        description=t.optional_string("description"),
        env=cast(dict[str, str], dict(env.data)),
    )


def _parse_local(t: _Table, base_dir: Path) -> LocalConfig:
    runtimes: dict[str, RuntimeConfig] = {}
    table = t.table("runtimes", None)
    for name in table.data:
        rt = table.table(name, _RUNTIME_KEYS)
        command = rt.string_list("command", empty_ok=False)
        if command is None:
            raise ConfigError(rt.key("command"), "is required")
        inspect_args = rt.string_list("inspect_args") or ()
        runtimes[name] = RuntimeConfig(name=name, command=command, inspect_args=inspect_args)
    workdir = Path(os.path.normpath(base_dir / t.string("workdir", str(LocalConfig.workdir))))
    return LocalConfig(
        workdir=workdir,
        stop_grace_s=t.seconds("stop_grace_seconds", LocalConfig.stop_grace_s, zero_ok=True),
        runtimes=runtimes,
    )


def _check_local_images(
    runner: RunnerConfig, local: LocalConfig, apps: Mapping[str, AppEntry]
) -> None:
    """On the local backend every image names a runtime: `{entry}` runtimes for
    bundle sessions, runtimes without it for catalog apps (no bundle)."""
    defined = ", ".join(local.runtimes) or "none"

    def runtime(key: str, image: str, bundle: bool) -> None:
        rt = local.runtimes.get(image)
        if rt is None:
            raise ConfigError(
                key, f"{image!r} is not a [local.runtimes] entry (defined: {defined})"
            )
        if bundle != any(ENTRY in arg for arg in rt.command):
            need = "must contain" if bundle else "must not contain"
            use = "a bundle session" if bundle else "an app session, which has no bundle"
            raise ConfigError(
                key, f"runtime {image!r} is used by {use}: its command {need} {ENTRY}"
            )

    runtime("runner.default_image", runner.default_image, True)
    for i, image in enumerate(runner.allowed_images or ()):
        runtime(f"runner.allowed_images[{i}]", image, True)
    for app in apps.values():
        runtime(f"apps.{app.name}.image", app.image, False)


def parse_config(
    data: Mapping[str, object], *, base_dir: Path, read_text: Callable[[Path], str]
) -> Config:
    """Build a validated `Config` from parsed TOML.

    `base_dir` (absolute) is what relative paths resolve against; `read_text`
    reads the terms file (injected so this stays pure).

    Raises:
        ConfigError: the first problem found, naming its key path.
    """
    root = _Table(dict(data), "", _ROOT_KEYS)
    server = _parse_server(root.table("server", _SERVER_KEYS), base_dir)
    runner = _parse_runner(root.table("runner", _RUNNER_KEYS))
    limits = root.table("limits", ("session", "app"))
    session_limits = _parse_tier(limits.table("session", _TIER_KEYS), DEFAULT_SESSION_LIMITS)
    app_limits = _parse_tier(limits.table("app", _TIER_KEYS), DEFAULT_APP_LIMITS)
    terms = None
    if "terms" in root.data:
        terms_table = root.table("terms", ("file", "body", "title", "version"))
        terms = _parse_terms(terms_table, base_dir, read_text)
    apps_table = root.table("apps", None)
    apps = {name: _parse_app(apps_table.table(name, _APP_KEYS), name) for name in apps_table.data}
    local = _parse_local(root.table("local", _LOCAL_KEYS), base_dir)
    if runner.allowed_images and runner.default_image not in runner.allowed_images:
        raise ConfigError(
            "runner.allowed_images", f"must include default_image {runner.default_image!r}"
        )
    if runner.backend == "local":
        _check_local_images(runner, local, apps)
    return Config(
        server=server,
        runner=runner,
        session_limits=session_limits,
        app_limits=app_limits,
        local=local,
        terms=terms,
        apps=apps,
    )


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------

DROP_IN_DIR = "apps.d"


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError("", f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{str(path)!r} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        # TOML is UTF-8; tomllib lets the decode error through as is.
        raise ConfigError(
            "", f"{str(path)!r} is not valid UTF-8 (byte {exc.start}: {exc.reason})"
        ) from exc


def _merge_drop_ins(data: dict[str, object], path: Path) -> dict[str, Path]:
    """Add every `apps.d/*.toml` app to `data["apps"]`; returns app → file."""
    apps = data.setdefault("apps", {})
    if not isinstance(apps, dict):
        raise ConfigError("apps", f"must be a table, got {_show(apps)}")
    origin = {name: path for name in apps}
    drop_dir = path.parent / DROP_IN_DIR
    files = sorted(drop_dir.glob("*.toml")) if drop_dir.is_dir() else []
    for file in (f for f in files if not f.name.startswith(".") and f.is_file()):
        extra = _read_toml(file)
        for key in extra:
            if key != "apps":
                raise ConfigError(
                    key, f"not allowed in {file}: a drop-in holds only [apps.NAME] tables"
                )
        more = extra.get("apps", {})
        if not isinstance(more, dict):
            raise ConfigError("apps", f"must be a table in {file}, got {_show(more)}")
        for name, entry in more.items():
            if name in origin:
                raise ConfigError(f"apps.{name}", f"defined in both {origin[name]} and {file}")
            origin[name] = file
            apps[name] = entry
    return origin


def load_config(path: Path) -> Config:
    """Read the config file, its `apps.d/*.toml` drop-ins and the terms file.

    Raises:
        ConfigError: unreadable or invalid TOML, or any problem `parse_config`
            finds; an error inside a drop-in's app names that file.
    """
    path = Path(os.path.abspath(path))
    data = _read_toml(path)
    origin = _merge_drop_ins(data, path)
    try:
        config = parse_config(
            data, base_dir=path.parent, read_text=lambda p: p.read_text(encoding="utf-8")
        )
    except ConfigError as exc:
        for name, file in origin.items():
            key = f"apps.{_key(name)}"
            if file != path and (exc.key == key or exc.key.startswith(f"{key}.")):
                raise ConfigError(exc.key, f"{exc.problem} (in {file})") from exc
        raise
    return dataclasses.replace(config, source=path)


# --------------------------------------------------------------------------
# Rendering (`runnerd check-config`)
# --------------------------------------------------------------------------

MASK = "***"


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
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"cannot render {value!r}")


def _section(header: str, items: Mapping[str, object]) -> list[str]:
    lines = [f"[{header}]"]
    lines += [f"{_key(k)} = {_toml(v)}" for k, v in items.items() if v is not None]
    return [*lines, ""]


def _render_head(config: Config) -> list[str]:
    s, r = config.server, config.runner
    out = _section("server", {
        "listen": s.listen, "socket_mode": f"{s.socket_mode:04o}",
        "cors_origins": s.cors_origins, "max_body_bytes": s.max_body_bytes,
        "log_level": s.log_level,
    })  # fmt: skip
    out += _section("runner", {
        "backend": r.backend, "display_name": r.display_name, "description": r.description,
        "default_image": r.default_image, "allowed_images": r.allowed_images,
        "registry_url": r.registry_url, "max_sessions": r.max_sessions,
        "exit_ttl_seconds": r.exit_ttl_s, "replay_buffer_bytes": r.replay_buffer_bytes,
    })  # fmt: skip
    if r.allowed_images is None:
        # Imported here: capabilities imports this module.
        from runnerd.capabilities import allowed_images

        effective = allowed_images(config)
        shown = ", ".join(effective) if effective else f"{r.default_image} only"
        out.insert(len(out) - 1, f"# allowed_images not set; accepted images: {shown}")
    if config.terms is not None:
        t = config.terms
        out += _section("terms", {"version": t.version, "title": t.title, "body": MASK})
    return out


def render_config(config: Config) -> str:
    """The effective config as TOML (defaults filled in, paths absolute).

    Catalog env values and the terms body are masked as `"***"`: the output
    goes to terminals and logs. It parses back with the same shape.
    """
    out = [f"# effective config of {config.source or '<memory>'}", ""]
    out += _render_head(config)
    for tier, lim in (("session", config.session_limits), ("app", config.app_limits)):
        out += _section(f"limits.{tier}", {
            "cpu": lim.cpu, "memory": lim.memory,
            "ephemeral_storage": lim.ephemeral_storage, "ttl_seconds": lim.ttl_s,
        })  # fmt: skip
    for app in config.apps.values():
        out += _section(f"apps.{_key(app.name)}", {
            "image": app.image, "pull_policy": app.pull_policy, "title": app.title,
            "description": app.description, "env": {k: MASK for k in app.env},
        })  # fmt: skip
    loc = config.local
    out += _section("local", {"workdir": loc.workdir, "stop_grace_seconds": loc.stop_grace_s})
    for rt in loc.runtimes.values():
        out += _section(f"local.runtimes.{_key(rt.name)}", {
            "command": rt.command, "inspect_args": rt.inspect_args,
        })  # fmt: skip
    return "\n".join(out)
