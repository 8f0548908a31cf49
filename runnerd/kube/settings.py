"""`[kubernetes]`: the Kubernetes backend's settings, parsed and rendered. Pure.

Owns `KubeSettings` (what the backend is configured with; every default is
justified where it is set) and the provider's settings functions
(`runnerd.backends.Provider`): `KEYS` (its table's keys:
`runnerd.backends` refuses any other, naming it), `parse_settings` (the
table as `runnerd.config` kept it), `render` (what `check-config` prints)
and, for a reload, `keep_bound` / `bound_changes` (the whole table is bound
at start). The table's keys are
the names operators' files and external checks rely on: kubeconfig,
context, namespace, self_url, bundle_listen, init_image, runtime_class,
image_pull_secret, managed_by, start_deadline_seconds,
pull_backoff_grace_seconds, routing, routing_base_domain (alias
ingress_base_domain), ingress_class, ingress_tls_secret, gateway_name,
gateway_namespace, gateway_section, route_ready_timeout_seconds, on_restart,
watch_adopt_grace_seconds.
Which routing layer is used is resolved at start (`runnerd.kube.routing`).
What the backend requires on top (a `self_url`) is
`runnerd.kube.provider.check_config`. Imports neither trio nor httpx: it is
read before the backend is opened.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast
from urllib.parse import urlsplit

from runnerd.config import ConfigError, Table, format_listen, parse_listen, show


@dataclass(frozen=True)
class KubeSettings:
    """`[kubernetes]`: what the Kubernetes backend is configured with. The
    field names follow the operator-facing keys (`start_deadline_seconds`
    becomes `start_deadline_s`, as durations are named `*_s` in code)."""

    # Path to a kubeconfig. None: `$KUBECONFIG` (merged), else in-cluster files,
    # else `~/.kube/config` — the order kubectl users expect, with in-cluster
    # ahead of the home file because a daemon in a pod has no useful home.
    kubeconfig: str | None = None
    # Context name. None: the kubeconfig's `current-context`.
    context: str | None = None
    # Session namespace. None: the context's namespace (or the in-cluster
    # namespace file), else "default", as kubectl resolves it.
    namespace: str | None = None
    # The URL pods use to reach runnerd's bundle endpoint (`bundle_listen`).
    # No default can be right: it depends on the cluster's network.
    self_url: str = ""
    # The listener serving `/internal/bundles/`. Separate from the API listeners
    # so the API never has to be reachable from pods; all interfaces by default
    # because pods reach it over the pod network.
    bundle_listen: str = "tcp:0.0.0.0:8063"
    # The body-fetch init container's image: it needs only `sh`, `wget`, `tar`.
    # A pinned busybox: small, on every registry mirror, and its wget is enough.
    init_image: str = "busybox:1.36"
    # A sandbox RuntimeClass (gVisor, Kata) when the cluster offers one; unset
    # means the cluster default, since a wrong name makes every pod unschedulable.
    runtime_class: str | None = None
    # Pull secret for the kernel image, in the session namespace. Unset: public images.
    image_pull_secret: str | None = None
    # The `app.kubernetes.io/managed-by` label value on every pod runnerd
    # creates: the shared watch selects on it, and the reaper deletes by it.
    # One value per runnerd instance sharing a namespace.
    managed_by: str = "runnerd"
    # A pod not Running by then fails its start and is deleted. Two minutes:
    # a cold pull of the kernel image on a slow node takes tens of seconds;
    # a session the user waits longer for than this is better reported failed.
    start_deadline_s: float = 120.0
    # How long an image pull may back off (ErrImagePull / ImagePullBackOff)
    # before the start fails. A registry hiccup heals within the kubelet's
    # first retries (10 s, 20 s); a wrong image name never does.
    pull_backoff_grace_s: float = 30.0
    # Once an attach is up, how long a silent container waits before its
    # log is read for what it wrote before the attach joined. An attach that
    # delivers output first has the read sent at once, after that output,
    # so one read finds where the attach joined (a read sent before the
    # join needs a second); 0 reads at once.
    attach_quiet_s: float = 0.2
    # How sessions' tcp ports are routed from outside the cluster: "auto"
    # (resolved once at start from what the cluster serves:
    # `runnerd.kube.routing.resolve_routing`), "ingress" (one Ingress per
    # session), "gateway" (one Gateway API HTTPRoute per port) or "none". Auto:
    # the layer a cluster offers is the one its operator set up.
    routing: Literal["auto", "ingress", "gateway", "none"] = "auto"
    # The DNS name session endpoints are published under: a session's tcp
    # port P is `https://P-<session id>.<routing_base_domain>`. Unset: nothing
    # is published (the ports are reachable only inside the cluster), since
    # only the operator knows a name whose wildcard record points at the
    # cluster's ingress controller or Gateway. `ingress_base_domain` is its
    # old name, still accepted (`base_domain_alias`: check-config warns).
    routing_base_domain: str | None = None
    # Not a setting (how it was spelled): two configs that differ only in
    # the key's spelling configure the same thing.
    base_domain_alias: bool = field(default=False, compare=False)
    # The Ingress's `ingressClassName`. Unset: the cluster's default class.
    ingress_class: str | None = None
    # A TLS Secret (a wildcard certificate for `*.<routing_base_domain>`) in the
    # session namespace, named in the Ingress for every host. Unset: no TLS
    # block (the controller's default certificate, if it has one, applies).
    # Ingress only: a Gateway terminates TLS on its listener.
    ingress_tls_secret: str | None = None
    # The Gateway HTTPRoutes attach to. No default: a cluster may run several
    # and only the operator knows which one serves the wildcard domain.
    gateway_name: str | None = None
    # Its namespace. Unset: the session namespace (a parentRef's own default).
    gateway_namespace: str | None = None
    # The Gateway listener (`sectionName`) to attach to. Unset: every listener
    # whose hostname matches, as the Gateway API defines an absent one.
    gateway_section: str | None = None
    # How long a new route may stay unprogrammed before its `route` event says
    # so. A minute: controllers program routes in seconds; a load balancer's
    # first address can take tens of seconds on a cloud provider.
    route_ready_timeout_s: float = 60.0
    # What a starting runnerd does with the session pods a previous process
    # left: "adopt" them (live ones become sessions again, finished ones are
    # reported and deleted), or "reap" them (delete every one). Adopt: a
    # restart or an upgrade should not cost users their running sessions.
    on_restart: Literal["adopt", "reap"] = "adopt"
    # After a restart ("adopt"), how long a watch pod the previous process
    # left may wait for its session to adopt it before it is deleted. A
    # minute: the sessions' own adoption runs within seconds of the start; a
    # pod still unclaimed then has no record (a lost state dir) to come back for.
    watch_adopt_grace_s: float = 60.0


KEYS = (
    "kubeconfig", "context", "namespace", "self_url", "bundle_listen", "init_image",
    "runtime_class", "image_pull_secret", "managed_by", "start_deadline_seconds",
    "pull_backoff_grace_seconds", "attach_quiet_seconds", "routing", "routing_base_domain",
    "ingress_base_domain", "ingress_class", "ingress_tls_secret", "gateway_name",
    "gateway_namespace", "gateway_section", "route_ready_timeout_seconds",
    "on_restart", "watch_adopt_grace_seconds",
)  # fmt: skip
# RFC 1123 label (namespaces, secret and runtime class names).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
# The longest first label a session host puts under the base domain:
# `<port>-<session id>.`, a port of up to 5 digits and a 12-character id
# (`runnerd.session.admission.new_session_id`).
HOST_PREFIX_MAX = len("65535-") + 12 + len(".")
# A DNS name's limit (RFC 1035: 255 octets on the wire, 253 as text).
_DNS_NAME_MAX = 253
# A label value (managed_by is one): 63 characters, alphanumeric at both ends.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def _name(t: Table, key: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = t.optional_string(key)
    if value is not None and not pattern.fullmatch(value):
        raise ConfigError(t.key(key), f"must be {what}, got {show(value)}")
    return value


def _self_url(t: Table) -> str:
    value = (t.optional_string("self_url") or "").rstrip("/")
    if value:
        url = urlsplit(value)
        try:
            url.port  # noqa: B018 (raises on a port that is not one)
            port_ok = True
        except ValueError:
            port_ok = False
        if (
            url.scheme not in ("http", "https")
            or not url.hostname
            or url.query
            or url.fragment
            or not port_ok
            or any(c.isspace() or ord(c) < 0x21 for c in value)
        ):
            raise ConfigError(
                t.key("self_url"),
                f"must be an http(s) URL pods can reach (e.g. http://10.0.0.5:8063), got"
                f" {show(value)}",
            )
    return value


def _bundle_listen(t: Table) -> str:
    value = t.string("bundle_listen", KubeSettings.bundle_listen)
    try:
        address = parse_listen(value)
    except ValueError as exc:
        raise ConfigError(t.key("bundle_listen"), str(exc)) from None
    if address.kind != "tcp":
        # Pods reach it over the pod network: a unix socket or an inherited
        # fd could not be what `self_url` names.
        raise ConfigError(t.key("bundle_listen"), f"must be tcp:HOST:PORT, got {show(value)}")
    return format_listen(address)


def _base_domain(t: Table) -> tuple[str | None, bool]:
    """A DNS name under which `<port>-<session id>.` still fits DNS limits,
    and whether it came from the old key (`ingress_base_domain`)."""
    new, old = t.optional_string("routing_base_domain"), t.optional_string("ingress_base_domain")
    if new is not None and old is not None:
        raise ConfigError(
            t.key("ingress_base_domain"),
            "is the old name of kubernetes.routing_base_domain: set only routing_base_domain",
        )
    value, name = (old, "ingress_base_domain") if old is not None else (new, "routing_base_domain")
    if value is None:
        return None, False
    key = t.key(name)
    labels = value.split(".")
    if not all(_DNS_LABEL.fullmatch(label) for label in labels):
        raise ConfigError(
            key,
            "must be a DNS name of lowercase RFC 1123 labels (e.g."
            f" sessions.example.com, no trailing dot), got {show(value)}",
        )
    if _is_ip(value):
        raise ConfigError(key, f"must be a DNS name, not an IP address, got {show(value)}")
    longest = _DNS_NAME_MAX - HOST_PREFIX_MAX
    if len(value) > longest:
        raise ConfigError(
            key,
            f"is {len(value)} characters, at most {longest} fit: session hosts"
            f" <port>-<session id>.<domain> must fit a DNS name's"
            f" {_DNS_NAME_MAX}",
        )
    return value, old is not None


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _Routing:
    mode: Literal["auto", "ingress", "gateway", "none"]
    domain: str | None
    alias: bool
    ingress_class: str | None
    tls_secret: str | None
    gateway_name: str | None
    gateway_namespace: str | None
    gateway_section: str | None


_MODES = ("auto", "ingress", "gateway", "none")
_INGRESS_KEYS = ("ingress_class", "ingress_tls_secret")
_GATEWAY_KEYS = ("gateway_name", "gateway_namespace", "gateway_section")


def _routing(t: Table) -> _Routing:
    """The routing keys. A key that can have no effect (no domain, `none`,
    the other layer's key with a fixed mode, a TLS secret with a Gateway) is
    an error, not silently nothing: the operator meant something by it."""
    mode = cast(Literal["auto", "ingress", "gateway", "none"], t.choice("routing", "auto", _MODES))
    domain, alias = _base_domain(t)
    r = _Routing(
        mode,
        domain,
        alias,
        _name(t, "ingress_class", _DNS_SUBDOMAIN, "an IngressClass name"),
        _name(t, "ingress_tls_secret", _DNS_SUBDOMAIN, "a Secret name"),
        _name(t, "gateway_name", _DNS_SUBDOMAIN, "a Gateway name"),
        _name(t, "gateway_namespace", _DNS_LABEL, "a namespace name (RFC 1123 label)"),
        _name(t, "gateway_section", _DNS_SUBDOMAIN, "a Gateway listener name"),
    )
    given = {
        "ingress_class": r.ingress_class,
        "ingress_tls_secret": r.tls_secret,
        "gateway_name": r.gateway_name,
        "gateway_namespace": r.gateway_namespace,
        "gateway_section": r.gateway_section,
    }
    for key in (k for k, value in given.items() if value is not None):
        _check_effect(t, r, key)
    if r.mode == "gateway" and r.domain is not None and r.gateway_name is None:
        raise ConfigError(
            t.key("gateway_name"),
            'is required with routing = "gateway": the Gateway the HTTPRoutes attach to',
        )
    return r


def _check_effect(t: Table, r: _Routing, key: str) -> None:
    """Raise a `ConfigError` on `key` when it cannot take effect."""
    if r.mode == "none":
        raise ConfigError(t.key(key), 'has no effect with routing = "none": remove it')
    if r.domain is None:
        raise ConfigError(
            t.key(key),
            "has no effect without kubernetes.routing_base_domain (nothing is routed"
            " without it): set both or neither",
        )
    gateway = r.mode == "gateway" or (r.mode == "auto" and r.gateway_name is not None)
    if key == "ingress_tls_secret" and gateway:
        raise ConfigError(
            t.key(key),
            "is for Ingress routing only; with Gateway routing TLS is terminated by the"
            " Gateway's listener (a certificateRef there): remove it",
        )
    if key in _GATEWAY_KEYS and r.mode == "ingress":
        raise ConfigError(t.key(key), 'has no effect with routing = "ingress": remove it')
    if key in ("gateway_namespace", "gateway_section") and r.gateway_name is None:
        raise ConfigError(
            t.key(key),
            "has no effect without kubernetes.gateway_name (it qualifies the Gateway"
            " named there): set gateway_name or remove it",
        )
    if key == "ingress_class" and r.mode == "auto" and r.gateway_name is not None:
        raise ConfigError(
            t.key(key),
            'names an IngressClass and kubernetes.gateway_name a Gateway with routing = "auto":'
            ' set routing = "gateway" or "ingress" (and remove the other key)',
        )
    if key in _INGRESS_KEYS and r.mode == "gateway":
        raise ConfigError(t.key(key), 'has no effect with routing = "gateway": remove it')


def parse_settings(t: Table, base_dir: Path) -> KubeSettings:
    """`[kubernetes]` as `KubeSettings`; a relative `kubeconfig` resolves
    against `base_dir` (the config file's directory), as every path does.

    Raises:
        ConfigError: naming the key (`kubernetes.namespace: ...`).
    """
    d = KubeSettings()
    r = _routing(t)
    kubeconfig = t.optional_string("kubeconfig")
    if kubeconfig is not None:
        kubeconfig = os.path.normpath(base_dir / os.path.expanduser(kubeconfig))
    return KubeSettings(
        kubeconfig=kubeconfig,
        context=t.optional_string("context"),
        namespace=_name(t, "namespace", _DNS_LABEL, "a namespace name (RFC 1123 label)"),
        self_url=_self_url(t),
        bundle_listen=_bundle_listen(t),
        init_image=t.string("init_image", d.init_image),
        runtime_class=_name(t, "runtime_class", _DNS_SUBDOMAIN, "a RuntimeClass name"),
        image_pull_secret=_name(t, "image_pull_secret", _DNS_SUBDOMAIN, "a Secret name"),
        managed_by=_name(t, "managed_by", _LABEL_VALUE, "a label value (1-63 characters)")
        or d.managed_by,
        start_deadline_s=t.seconds("start_deadline_seconds", d.start_deadline_s),
        pull_backoff_grace_s=t.seconds("pull_backoff_grace_seconds", d.pull_backoff_grace_s),
        attach_quiet_s=t.seconds("attach_quiet_seconds", d.attach_quiet_s, zero_ok=True),
        routing=r.mode,
        routing_base_domain=r.domain,
        base_domain_alias=r.alias,
        ingress_class=r.ingress_class,
        ingress_tls_secret=r.tls_secret,
        gateway_name=r.gateway_name,
        gateway_namespace=r.gateway_namespace,
        gateway_section=r.gateway_section,
        route_ready_timeout_s=t.seconds("route_ready_timeout_seconds", d.route_ready_timeout_s),
        on_restart=cast(
            Literal["adopt", "reap"], t.choice("on_restart", d.on_restart, ("adopt", "reap"))
        ),
        watch_adopt_grace_s=t.seconds("watch_adopt_grace_seconds", d.watch_adopt_grace_s),
    )


def render(settings: KubeSettings) -> list[tuple[str, Mapping[str, object]]]:
    """The `[kubernetes]` table as `check-config` prints it (unset keys left out)."""
    k = settings
    return [("kubernetes", {
        "kubeconfig": k.kubeconfig, "context": k.context, "namespace": k.namespace,
        "self_url": k.self_url, "bundle_listen": k.bundle_listen, "init_image": k.init_image,
        "runtime_class": k.runtime_class, "image_pull_secret": k.image_pull_secret,
        "managed_by": k.managed_by, "start_deadline_seconds": k.start_deadline_s,
        "pull_backoff_grace_seconds": k.pull_backoff_grace_s,
        "attach_quiet_seconds": k.attach_quiet_s,
        "routing": k.routing, "routing_base_domain": k.routing_base_domain,
        "ingress_class": k.ingress_class, "ingress_tls_secret": k.ingress_tls_secret,
        "gateway_name": k.gateway_name, "gateway_namespace": k.gateway_namespace,
        "gateway_section": k.gateway_section,
        "route_ready_timeout_seconds": k.route_ready_timeout_s,
        "on_restart": k.on_restart,
        "watch_adopt_grace_seconds": k.watch_adopt_grace_s,
    })]  # fmt: skip


def keep_bound(old: KubeSettings, new: KubeSettings) -> KubeSettings:
    """What a reload runs on: `old`, all of it (the client, the informer and
    the bundle listener are opened with it at start)."""
    return old


def bound_changes(old: KubeSettings, new: KubeSettings) -> list[str]:
    """`["kubernetes"]` when the table changed: a restart applies it."""
    return ["kubernetes"] if old != new else []
