"""Parsing `[kubernetes]` into `KubeSettings`. Pure.

Owns the section's keys (the names operators' files and external checks rely
on: kubeconfig, context, namespace, self_url, bundle_listen, init_image,
runtime_class, image_pull_secret, managed_by, start_deadline_seconds,
pull_backoff_grace_seconds) and their shape. What the backend requires on
top (a `self_url` when `runner.backend = "kubernetes"`) is the backend's
`check_config`. Defaults and why are on `KubeSettings` and in
config/runnerd.toml.
"""

from __future__ import annotations

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
    "pull_backoff_grace_seconds", "on_restart",
)  # fmt: skip
# RFC 1123 label (namespaces, secret and runtime class names).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
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
        if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
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


def parse_kubernetes(t: Table, base_dir: Path) -> KubeSettings:
    """`[kubernetes]` as `KubeSettings`; a relative `kubeconfig` resolves
    against `base_dir` (the config file's directory), as every path does.

    Raises:
        ConfigError: naming the key.
    """
    d = KubeSettings()
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
        on_restart=cast(Literal["adopt", "reap"],
                        t.choice("on_restart", d.on_restart, ("adopt", "reap"))),
    )
