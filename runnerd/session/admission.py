"""Session admission: from a validated request body to a `RunSpec` (a run
session) or a `WatchSessionSpec` (`mode: "watch"`). Pure.

Owns the checks of `POST /v1/sessions` and `POST /v1/apps/{name}/sessions`
that come after the schema (msgspec's, in `contract.parse_body`) and before
capacity (the registry's), in the contract's order, each with its own answer:

  2. terms: `x-telo-accepted-terms` must equal the terms version → 428
  3. `app` names no catalog entry → 400 unknown_app
  4. no `app`, and `bundle` or `config` missing, or `mode: "watch"` with
     `app` → 400 invalid_request
  5. a bundle path escapes the bundle → 400 invalid_bundle
  6. `config.image` not allowed → 400 invalid_config (not for app sessions)
  7. `mode: "watch"` while watch sessions are off → 400 watch_disabled
  8. `agent` without `mode: "watch"` → 400 agent_requires_watch; not a
     catalog name → 400 unknown_agent; its entry has no `port` → 400
     agent_port_undeclared
  9. watch sessions `starting` or `running` already number
     `watch.max_sessions` → 409 too_many_watch_sessions (the caller passes
     the count: `watch_live`)
 10. each app's checks (`runnerd.watch.apps.build_apps`) → 400

and what the workload then gets: its image, its final env (catalog values
win over the client's, TELO_REGISTRY_URL added; a watch session's apps
without a client `TELO_CACHE_DIR`), and its tier's limits (no request field
asks for less, so a session runs at its tier's ceilings; a watch session at
the app tier's, with `watch.max_ttl_seconds` as its TTL). A watch
session's agent gets its catalog env plus a fresh token under `token_env`.

A rejection raises `AdmissionError` and has touched nothing: admission only
reads the config, so a rejected request changes no state.

One check comes later: `Catalog.recheck`, made by the session's task just
before the backend runs (a SIGHUP reload may have withdrawn the app since
the POST), so no backend ever sees the catalog.
"""

from __future__ import annotations

import base64
import dataclasses
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from runnerd.backend import (
    BundleSpec,
    CreationSpec,
    ImageSpec,
    Limits,
    RunSpec,
    SessionIdentity,
    StartError,
)
from runnerd.backend.watch import AgentLaunch, WatchSpec
from runnerd.config import AppEntry, Config, TermsConfig, TierLimits
from runnerd.config.envnames import is_env_name
from runnerd.config.images import Offered, check_image
from runnerd.contract import (
    ACCEPTED_TERMS_HEADER,
    IoMode,
    RunBundle,
    SessionConfig,
    StartAppSessionRequest,
    StartSessionRequest,
    error_body,
)
from runnerd.errors import RunnerdError
from runnerd.session.paths import BundlePathError, normalise_bundle_path
from runnerd.session.watchspec import WatchSessionSpec
from runnerd.watch.apps import build_apps, check_agent, check_shape
from runnerd.watch.errors import WatchError

REGISTRY_ENV = "TELO_REGISTRY_URL"
# A watch session's apps share one workspace for hours; a client's cache
# directory would point them outside it (the contract drops it).
CACHE_ENV = "TELO_CACHE_DIR"


class Catalog:
    """The names of the apps the runner offers now (`config.apps`): the
    session manager's, replaced on reload (`offer`)."""

    def __init__(self, apps: Iterable[str] = ()) -> None:
        self._apps = frozenset(apps)

    def offer(self, apps: Iterable[str]) -> None:
        """From now on, these apps (and no others) may start."""
        self._apps = frozenset(apps)

    def recheck(self, spec: RunSpec) -> None:
        """Admission's last check, just before the backend runs `spec`: its
        app is still offered. An adopted workload (`spec.creation` None)
        exists already and is never refused.

        Raises:
            StartError: ("provision") the app was withdrawn since admission.
        """
        if spec.creation is not None and spec.app is not None and spec.app not in self._apps:
            raise StartError("provision", f"app '{spec.app}' is no longer offered by this runner")


class AdmissionError(RunnerdError):
    """A request the runner refuses: its status, code and message (and extra
    body fields) are the answer. `to_body()` is the JSON error body."""

    def __init__(
        self, status: int, code: str, message: str, extra: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message, status_hint=status, code=code, extra=extra)

    @property
    def status(self) -> int:
        return self.status_hint

    def to_body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, **self.extra)


def new_session_id() -> str:
    """12 characters of lowercase RFC 4648 base32 (`a-z2-7`) from the CSPRNG:
    60 random bits, valid in DNS labels and Kubernetes names."""
    # 10 bytes encode to exactly 16 base32 characters (no padding); keep 12.
    return base64.b32encode(secrets.token_bytes(10)).decode("ascii")[:12].lower()


def _check_env(env: Mapping[str, str]) -> None:
    """A name outside the one env-name rule (`runnerd.config.envnames`, the rule the
    config and the backends apply too) or a value execve cannot carry is a
    schema error, caught up front (before terms, like every schema error)
    rather than as a start failure."""
    for key, value in env.items():
        if not is_env_name(key):
            raise AdmissionError(
                400, "invalid_request", f"body.env key {key!r} is not a valid variable name"
            )
        if "\0" in value:
            raise AdmissionError(400, "invalid_request", f"body.env.{key} contains a NUL byte")


def _check_terms(terms: TermsConfig | None, accepted: str | None) -> None:
    if terms is None or accepted == terms.version:
        return
    raise AdmissionError(
        428,
        "terms_required",
        f"this runner requires accepting its terms (version {terms.version}): resend with "
        f"the header {ACCEPTED_TERMS_HEADER}: {terms.version}",
        {"terms": {"version": terms.version, "title": terms.title, "body": terms.body}},
    )


def _unknown_app(name: str, config: Config, status: int) -> AdmissionError:
    offered = ", ".join(config.apps)
    where = f"offered apps: {offered}" if offered else "it offers no predefined applications"
    return AdmissionError(
        status,
        "unknown_app",
        f"app {name!r} is not offered by this runner; {where} (see /v1/capabilities)",
    )


def new_agent_token() -> str:
    """32 characters of lowercase RFC 4648 base32 (`a-z2-7`) from the CSPRNG:
    160 random bits, the co-resident agent's per-session token."""
    return base64.b32encode(secrets.token_bytes(20)).decode("ascii").lower()


def _check_watch(body: StartSessionRequest, config: Config, watch_io: tuple[IoMode, ...]) -> None:
    """Check 7, then check 8's shape (and check 4's watch part, which an app
    session meets: `runnerd.watch.apps.check_shape`). Watch is on when the
    config enables it and the backend offers watch io (`watch_io`): the
    config refuses `enabled = true` on a backend without, and a Config built
    in code that sets it there still meets `watch_disabled`, so a watch
    request is never run as a run session."""
    if body.mode == "watch" and body.app is None and not (config.watch.enabled and watch_io):
        raise AdmissionError(
            400,
            "watch_disabled",
            "watch sessions are not enabled on this runner (see /v1/capabilities: no "
            "features.watch); start a run session instead (mode 'run')",
        )
    try:
        check_shape(body)
    except WatchError as exc:
        raise AdmissionError(exc.status_hint, exc.code, exc.message) from None


def _bundle_spec(bundle: RunBundle) -> BundleSpec:
    """Every path normalised; duplicates and a file nested under another file
    are refused too, since writing them would silently lose one."""
    try:
        entry = normalise_bundle_path(bundle.entryRelativePath)
        files: dict[str, str] = {}
        for file in bundle.files:
            path = normalise_bundle_path(file.relativePath)
            if path in files:
                raise BundlePathError(f"bundle path {file.relativePath!r} is given twice")
            files[path] = file.contents
    except BundlePathError as exc:
        raise AdmissionError(400, "invalid_bundle", str(exc)) from None
    for path in files:
        parent = path.rpartition("/")[0]
        while parent:
            if parent in files:
                raise AdmissionError(
                    400, "invalid_bundle", f"bundle path {path!r} is inside file {parent!r}"
                )
            parent = parent.rpartition("/")[0]
    return BundleSpec(entry=entry, files=tuple(files.items()))


def _registry_env(
    env: dict[str, str], session_config: SessionConfig | None, config: Config
) -> dict[str, str]:
    """Add TELO_REGISTRY_URL unless the env has it: `config.registryUrl`
    (trimmed, blank = unset), else the runner's default, else nothing."""
    if REGISTRY_ENV in env:
        return env
    requested = (session_config.registryUrl or "").strip() if session_config else ""
    url = requested or config.runner.registry_url
    return {**env, REGISTRY_ENV: url} if url else env


def _tier_limits(tier: TierLimits) -> Limits:
    return Limits(
        cpu=tier.cpu, memory=tier.memory, ephemeral_storage=tier.ephemeral_storage, ttl_s=tier.ttl_s
    )


def _app_spec(
    app: AppEntry,
    client_env: Mapping[str, str],
    body: StartSessionRequest | StartAppSessionRequest,
    config: Config,
    session_id: str,
) -> RunSpec:
    # Drop every client key the catalog defines, then add the operator's
    # values: a client can never override (or learn) an operator value.
    env = {k: v for k, v in client_env.items() if k not in app.env}
    env.update(app.env)
    return RunSpec.create(
        session_id=session_id,
        image=ImageSpec(app.image, app.pull_policy),
        env=_registry_env(env, None, config),
        limits=_tier_limits(config.app_limits),
        bundle=None,
        app=app.name,
        ports=tuple(body.ports or ()),
        inspect=bool(body.inspect),
    )


def admit(
    body: StartSessionRequest,
    config: Config,
    *,
    accepted_terms: str | None,
    session_id: str,
    offered: Offered,
    watch_io: tuple[IoMode, ...] = (),
    watch_live: int = 0,
) -> RunSpec | WatchSessionSpec:
    """Admit a `POST /v1/sessions` body (already schema-valid) or refuse it.

    `offered`: the backend's images, for the image allowlist
    (`runnerd.config.images`). `watch_io`: the backend's watch io modes
    (`features.io`; none: no watch sessions). `watch_live`: the watch
    sessions `starting` or `running` now (check 9).

    Anonymous (bundle) sessions get the session tier's limits; the contract's
    "session pods run with the app tier's ceilings" is about the Kubernetes
    pod's resources, which the Kubernetes backend applies itself. An app
    session ignores `bundle` and `config` if the client also sent them, as
    the original runner does.

    Raises:
        AdmissionError: the first failing check, in the contract's order.
    """
    _check_env(body.env)
    _check_terms(config.terms, accepted_terms)
    if body.app is not None:
        app = config.apps.get(body.app)
        if app is None:
            raise _unknown_app(body.app, config, 400)
        _check_watch(body, config, watch_io)
        return _app_spec(app, body.env, body, config, session_id)
    if body.bundle is None or body.config is None:
        raise AdmissionError(
            400,
            "invalid_request",
            "'bundle' and 'config' are required unless launching a predefined app via 'app'",
        )
    bundle = _bundle_spec(body.bundle)
    problem = check_image(config, body.config.image, offered)
    if problem is not None:
        raise AdmissionError(400, "invalid_config", problem)
    _check_watch(body, config, watch_io)
    if body.mode == "watch":
        return _watch_spec(body, bundle, config, session_id, watch_io, watch_live)
    return RunSpec.create(
        session_id=session_id,
        image=ImageSpec(body.config.image, body.config.pullPolicy),
        env=_registry_env(dict(body.env), body.config, config),
        limits=_tier_limits(config.session_limits),
        bundle=bundle,
        ports=tuple(body.ports or ()),
        inspect=bool(body.inspect),
    )


def _watch_spec(
    body: StartSessionRequest,
    bundle: BundleSpec,
    config: Config,
    session_id: str,
    watch_io: tuple[IoMode, ...],
    watch_live: int,
) -> WatchSessionSpec:
    """Checks 8 (catalog part), 9 and 10 of a watch body, then its spec."""
    assert body.config is not None  # check 4
    agent = _watch_agent(body.agent, config)
    if watch_live >= config.watch.max_sessions:
        raise AdmissionError(
            409,
            "too_many_watch_sessions",
            f"this runner already has {watch_live} watch sessions starting or running (its "
            f"limit is watch.max_sessions = {config.watch.max_sessions}); stop one, or let "
            "one suspend, and retry",
        )
    try:
        apps = build_apps(body, io_offered=watch_io, normalise_entry=normalise_bundle_path)
    except WatchError as exc:
        raise AdmissionError(exc.status_hint, exc.code, exc.message) from None
    env = {k: v for k, v in body.env.items() if k != CACHE_ENV}
    limits = dataclasses.replace(
        _tier_limits(config.app_limits), ttl_s=float(config.watch.max_ttl_seconds)
    )
    watch = WatchSpec(
        identity=SessionIdentity(session_id, limits, inspect=True),
        creation=CreationSpec(
            ImageSpec(body.config.image, body.config.pullPolicy),
            _registry_env(env, body.config, config),
            bundle,
        ),
    )
    launch, token = agent if agent is not None else (None, None)
    return WatchSessionSpec(watch=watch, apps=apps, agent=launch, agent_token=token)


def _watch_agent(name: str | None, config: Config) -> tuple[AgentLaunch, str | None] | None:
    """Check 8's catalog part; the agent's launch (its catalog env, plus a
    new token under `token_env` when the entry has one) and that token."""
    if name is None:
        return None
    try:
        entry = check_agent(name, config.apps)
    except WatchError as exc:
        raise AdmissionError(exc.status_hint, exc.code, exc.message) from None
    assert entry.port is not None  # check_agent refuses an entry without one
    env = dict(entry.env)
    token = None
    if entry.token_env is not None:
        token = new_agent_token()
        env[entry.token_env] = token
    image = ImageSpec(entry.image, entry.pull_policy)
    return AgentLaunch(name=entry.name, image=image, port=entry.port, env=env), token


def admit_app(
    name: str,
    body: StartAppSessionRequest,
    config: Config,
    *,
    accepted_terms: str | None,
    session_id: str,
) -> RunSpec:
    """Admit `POST /v1/apps/{name}/sessions`. An unknown name is `404
    unknown_app`, checked before terms (the path names a resource).

    Raises:
        AdmissionError: 404 unknown_app, 428 terms_required, 400 invalid_request.
    """
    app = config.apps.get(name)
    if app is None:
        raise _unknown_app(name, config, 404)
    env = body.env or {}
    _check_env(env)
    _check_terms(config.terms, accepted_terms)
    return _app_spec(app, env, body, config, session_id)
