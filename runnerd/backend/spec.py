"""What a backend is given for one session, and what it finds again.

The seam's data in (`runnerd.backend` re-exports every name here, the one
name callers import): a `RunSpec` is a session's `SessionIdentity` (id,
created_at, limits, ports, inspect, app: never a secret, what a backend may
store with the workload and rebuild) plus its `CreationSpec` (image, env
with secrets, bundle: needed once, never stored); `Recovered` is what
`Backend.recover()` rebuilds from the identity it stored. Pure and frozen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from runnerd.contract import PortMapping, PullPolicy, RunStatus


@dataclass(frozen=True)
class BundleSpec:
    """A bundle with every path already normalised (no `..`, no leading `/`)."""

    entry: str
    files: tuple[tuple[str, str], ...]  # (relative path, contents)


@dataclass(frozen=True)
class ImageSpec:
    image: str
    pull_policy: PullPolicy


@dataclass(frozen=True)
class Limits:
    """Effective resource limits (the session's tier's), as Kubernetes quantities."""

    cpu: str
    memory: str
    ephemeral_storage: str
    ttl_s: float


@dataclass(frozen=True)
class SessionIdentity:
    """Who a session is: everything a backend may store with the workload
    (a pod's annotations, say) and rebuild on `recover()`. Never a secret.

    `created_at` (epoch seconds) is None only in a spec not yet started: the
    manager stamps it when it registers the session, so `run()` always sees
    it set, and the TTL is a deadline from it (`created_at + limits.ttl_s`).
    """

    session_id: str
    limits: Limits
    app: str | None = None
    ports: tuple[PortMapping, ...] = ()
    inspect: bool = False
    created_at: float | None = None


@dataclass(frozen=True)
class CreationSpec:
    """What creating the workload needs and nothing after: the image, the
    final env (catalog values merged, TELO_REGISTRY_URL added; it may hold
    catalog secrets, so it is kept out of repr and never stored by a
    backend) and the bundle (None for an app session: the catalog image runs
    its own entrypoint). The backend passes `env` on as is and adds only its
    own plumbing."""

    image: ImageSpec
    env: Mapping[str, str] = field(repr=False)
    bundle: BundleSpec | None = None


@dataclass(frozen=True)
class RunSpec:
    """Everything a backend needs to run one session. Immutable, validated.

    `creation` is None for an adopted session (`SessionManager.adopt`): the
    workload exists already and `run()` re-attaches to it. The read-only
    properties below are shorthands for the two parts.
    """

    identity: SessionIdentity
    creation: CreationSpec | None

    @classmethod
    def create(
        cls,
        *,
        session_id: str,
        image: ImageSpec,
        env: Mapping[str, str],
        limits: Limits,
        bundle: BundleSpec | None = None,
        app: str | None = None,
        ports: tuple[PortMapping, ...] = (),
        inspect: bool = False,
    ) -> RunSpec:
        """A spec for a new workload (`created_at` is stamped on start)."""
        identity = SessionIdentity(session_id, limits, app, ports, inspect)
        return cls(identity, CreationSpec(image, env, bundle))

    @property
    def session_id(self) -> str:
        return self.identity.session_id

    @property
    def limits(self) -> Limits:
        return self.identity.limits

    @property
    def app(self) -> str | None:
        return self.identity.app

    @property
    def ports(self) -> tuple[PortMapping, ...]:
        return self.identity.ports

    @property
    def inspect(self) -> bool:
        return self.identity.inspect

    def _creation(self) -> CreationSpec:
        if self.creation is None:
            raise ValueError(f"session {self.session_id} was adopted: nothing to create")
        return self.creation

    @property
    def image(self) -> ImageSpec:
        """Raises ValueError for an adopted session (nothing to create)."""
        return self._creation().image

    @property
    def env(self) -> Mapping[str, str]:
        """Raises ValueError for an adopted session (nothing to create)."""
        return self._creation().env

    @property
    def bundle(self) -> BundleSpec | None:
        """Raises ValueError for an adopted session (nothing to create)."""
        return self._creation().bundle


@dataclass(frozen=True)
class Recovered:
    """A workload `recover()` found: the identity it stored (with its
    original `created_at`) and its status now: `running` for a live one
    (adopted and re-attached), or terminal for one that ended while no
    daemon ran (registered for replay, never run). `image`: the image a
    bundle session's client asked for, as listings show it (None for a
    catalog app, whose image is the operator's and never listed)."""

    identity: SessionIdentity
    status: RunStatus
    image: str | None = None
