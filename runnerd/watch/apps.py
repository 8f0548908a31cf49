"""The app checks of `POST /v1/sessions` (watch) and `PUT /apps`. Pure.

Owns the watch parts of the start checks, each with its own answer, in the
contract's order (its checks 1 to 11; the rest are admission's and the
registry's):

  1. the schema (`runnerd.contract.StartSessionRequest`, `SessionAppSpec`,
     `ReplaceAppsRequest`: `mode`/`io` outside their enums, an empty `apps`,
     a name over 63 characters → `400 invalid_request`) — msgspec's, before
     this module is reached;
  4. `mode: "watch"` with `app` → `400 invalid_request` (`check_shape`);
  8. `agent` without `mode: "watch"` → `400 agent_requires_watch`
     (`check_shape`); not a catalog name → `400 unknown_agent`; its entry
     declares no `port` → `400 agent_port_undeclared` (`check_agent`);
 10. each app in the order given, each check in this order (`build_apps`,
     `build_app_set`): name not a DNS label → `invalid_app_name`; `workspace`
     or `agent` → `reserved_app_name`; a name already given →
     `duplicate_app_name`; its entry escapes the bundle → `invalid_bundle`;
     a (protocol, port) already declared by any app, this one included →
     `port_conflict`; an `io` not offered → `io_unsupported` (all 400).

and the defaults: `apps` omitted is one app `app` on the bundle's entry
with the top-level ports (with `apps` given, those are ignored); an app
without `io` is `tty`. A refusal raises `WatchError` before anything is
built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from runnerd.config import AppEntry
from runnerd.contract import IoMode, PortMapping, SessionAppSpec, StartSessionRequest
from runnerd.watch.errors import WatchError

DEFAULT_APP_NAME = "app"
RESERVED_APP_NAMES = ("workspace", "agent")
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


@dataclass(frozen=True)
class AppSpec:
    """One app as it will run: `entry` is the normal bundle path."""

    name: str
    entry: str
    ports: tuple[PortMapping, ...] = ()
    io: IoMode = "tty"


def check_shape(body: StartSessionRequest) -> None:
    """Check 4's watch part and check 8's shape (no catalog needed).

    Raises:
        WatchError: `400 invalid_request` (watch with `app`) or
            `400 agent_requires_watch`.
    """
    if body.mode == "watch" and body.app is not None:
        raise WatchError(
            400,
            "invalid_request",
            "body.app: a watch session takes no 'app'; send 'bundle' and 'config'",
        )
    if body.agent is not None and body.mode != "watch":
        raise WatchError(
            400,
            "agent_requires_watch",
            "'agent' runs beside the apps of a watch session: send mode 'watch', or no 'agent'",
        )


def check_agent(name: str, catalog: Mapping[str, AppEntry]) -> AppEntry:
    """Check 8's catalog part: `name` is a catalog entry that declares a `port`.

    Raises:
        WatchError: `400 unknown_agent` (the message lists the catalog's
            names) or `400 agent_port_undeclared`.
    """
    entry = catalog.get(name)
    if entry is None:
        offered = ", ".join(catalog) if catalog else "none (the runner has no catalog)"
        raise WatchError(
            400, "unknown_agent", f"agent {name!r} is not a catalog app; catalog apps: {offered}"
        )
    if entry.port is None:
        raise WatchError(
            400,
            "agent_port_undeclared",
            f"catalog app {name!r} declares no port, so it cannot run as an agent",
        )
    return entry


def build_apps(
    body: StartSessionRequest,
    *,
    io_offered: Collection[str],
    normalise_entry: Callable[[str], str],
) -> tuple[AppSpec, ...]:
    """Check 10 and the defaults for a watch `POST /v1/sessions` whose
    `bundle` is present (check 4 passed).

    `io_offered` is `features.io`; `normalise_entry` is the bundle path rule
    (`runnerd.session.paths.normalise_bundle_path`, from the layer above),
    raising ValueError for a path that escapes the bundle.

    Raises:
        WatchError: the first failing check-10 answer, naming the app.
    """
    if body.bundle is None:
        raise ValueError("build_apps needs a body with a bundle (check 4 first)")
    specs = body.apps
    if specs is None:
        specs = [
            SessionAppSpec(
                name=DEFAULT_APP_NAME,
                entryRelativePath=body.bundle.entryRelativePath,
                ports=body.ports,
            )
        ]
    return _check_apps(specs, io_offered, normalise_entry)


def build_app_set(
    specs: Sequence[SessionAppSpec],
    *,
    io_offered: Collection[str],
    normalise_entry: Callable[[str], str],
) -> tuple[AppSpec, ...]:
    """`PUT /apps` (`ReplaceAppsRequest.apps`): check 10, evaluated as for
    `POST /v1/sessions`.

    Raises:
        WatchError: the first failing check-10 answer, naming the app.
    """
    return _check_apps(specs, io_offered, normalise_entry)


def _check_apps(
    specs: Sequence[SessionAppSpec],
    io_offered: Collection[str],
    normalise_entry: Callable[[str], str],
) -> tuple[AppSpec, ...]:
    apps: list[AppSpec] = []
    declared: dict[tuple[str, int], str] = {}
    for i, spec in enumerate(specs):
        apps.append(_check_app(i, spec, apps, declared, io_offered, normalise_entry))
    return tuple(apps)


def _check_app(
    i: int,
    spec: SessionAppSpec,
    earlier: Sequence[AppSpec],
    declared: dict[tuple[str, int], str],
    io_offered: Collection[str],
    normalise_entry: Callable[[str], str],
) -> AppSpec:
    """One app's check 10; records its ports in `declared`."""
    where, name = f"body.apps[{i}]", spec.name
    if not _DNS_LABEL.fullmatch(name):
        raise WatchError(
            400,
            "invalid_app_name",
            f"{where}.name {name!r} is not a DNS label (lowercase letters, digits and '-', "
            "starting and ending with a letter or digit)",
        )
    if name in RESERVED_APP_NAMES:
        raise WatchError(400, "reserved_app_name", f"{where}.name {name!r} is reserved")
    if any(app.name == name for app in earlier):
        raise WatchError(400, "duplicate_app_name", f"{where}.name {name!r} is already given")
    try:
        entry = normalise_entry(spec.entryRelativePath)
    except ValueError as exc:
        raise WatchError(400, "invalid_bundle", f"{where}.entryRelativePath: {exc}") from None
    for port in spec.ports or ():
        owner = declared.get((port.protocol, port.port))
        if owner is not None:
            by = "this app" if owner == name else f"app {owner!r}"
            raise WatchError(
                400,
                "port_conflict",
                f"{where}: {port.protocol} port {port.port} is already declared by {by}",
            )
        declared[(port.protocol, port.port)] = name
    io: IoMode = spec.io or "tty"
    if io not in io_offered:
        offered = ", ".join(io_offered) or "none"
        raise WatchError(
            400, "io_unsupported", f"{where}.io {io!r} is not offered here (offered: {offered})"
        )
    return AppSpec(name=name, entry=entry, ports=tuple(spec.ports or ()), io=io)
