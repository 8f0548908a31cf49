"""Parsing `[kubernetes]` into `KubeSettings`. Pure.

Owns the section's keys (the names operators' files and external checks rely
on: kubeconfig, context, namespace, self_url, bundle_listen, init_image,
runtime_class, image_pull_secret, managed_by, start_deadline_seconds,
pull_backoff_grace_seconds, ingress_base_domain, ingress_class,
ingress_tls_secret) and their shape. What the backend requires on
top (a `self_url` when `runner.backend = "kubernetes"`) is the backend's
`check_config`. Defaults and why are on `KubeSettings` and in
config/runnerd.toml.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Literal, cast
from urllib.parse import urlsplit

from runnerd.config.listen import format_listen, parse_listen
from runnerd.config.model import ConfigError, KubeSettings
from runnerd.config.table import Table, show

KUBERNETES_KEYS = (
    "kubeconfig", "context", "namespace", "self_url", "bundle_listen", "init_image",
    "runtime_class", "image_pull_secret", "managed_by", "start_deadline_seconds",
    "pull_backoff_grace_seconds", "ingress_base_domain", "ingress_class", "ingress_tls_secret",
    "on_restart",
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


def _base_domain(t: Table) -> str | None:
    """A DNS name under which `<port>-<session id>.` still fits DNS limits."""
    value = t.optional_string("ingress_base_domain")
    if value is None:
        return None
    key = t.key("ingress_base_domain")
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
    return value


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _ingress(t: Table) -> tuple[str | None, str | None, str | None]:
    """The three ingress keys; a class or TLS secret without a base domain is
    an error, not silently nothing: the operator meant to publish something."""
    domain = _base_domain(t)
    ingress_class = _name(t, "ingress_class", _DNS_SUBDOMAIN, "an IngressClass name")
    tls_secret = _name(t, "ingress_tls_secret", _DNS_SUBDOMAIN, "a Secret name")
    for key, value in (("ingress_class", ingress_class), ("ingress_tls_secret", tls_secret)):
        if value is not None and domain is None:
            raise ConfigError(
                t.key(key),
                "has no effect without kubernetes.ingress_base_domain"
                " (no Ingress is created without it): set both or"
                " neither",
            )
    return domain, ingress_class, tls_secret


def parse_kubernetes(t: Table, base_dir: Path) -> KubeSettings:
    """`[kubernetes]` as `KubeSettings`; a relative `kubeconfig` resolves
    against `base_dir` (the config file's directory), as every path does.

    Raises:
        ConfigError: naming the key.
    """
    d = KubeSettings()
    domain, ingress_class, tls_secret = _ingress(t)
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
        ingress_base_domain=domain,
        ingress_class=ingress_class,
        ingress_tls_secret=tls_secret,
        on_restart=cast(
            Literal["adopt", "reap"], t.choice("on_restart", d.on_restart, ("adopt", "reap"))
        ),
    )
