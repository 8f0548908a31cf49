"""`[kubernetes]` ingress keys: a base domain whose session hosts fit DNS, a
class and a TLS secret that are valid names and need the domain, rendered by
check-config and bound at start like the rest of the section."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from runnerd.backends import check_config, load_config, parse_config, provider_for, render_config
from runnerd.kube.settings import HOST_PREFIX_MAX, KEYS
from tests.kube.test_settings import BASE, error_of, kube, no_files, settings


def test_the_three_keys_are_read_and_default_to_unset() -> None:
    assert settings().routing_base_domain is None
    assert settings().ingress_class is None and settings().ingress_tls_secret is None
    got = settings(
        ingress_base_domain="sessions.example.com",
        ingress_class="nginx",
        ingress_tls_secret="wildcard-sessions",
    )
    assert (got.routing_base_domain, got.ingress_class, got.ingress_tls_secret) == (
        "sessions.example.com",
        "nginx",
        "wildcard-sessions",
    )


def test_the_longest_base_domain_still_fits_a_session_host() -> None:
    label = "a" * 63
    longest = ".".join([label, label, label, "b" * (253 - HOST_PREFIX_MAX - 3 * 64)])
    assert len(longest) == 253 - HOST_PREFIX_MAX
    assert settings(ingress_base_domain=longest).routing_base_domain == longest
    # The host a session would get, at its longest: a DNS name's 253 exactly.
    assert len(f"65535-{'x' * 12}.{longest}") == 253
    assert error_of(ingress_base_domain=longest + "c") == (
        f"kubernetes.ingress_base_domain: is {len(longest) + 1} characters, at most"
        f" {len(longest)} fit: session hosts <port>-<session id>.<domain> must fit a DNS"
        " name's 253"
    )


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"ingress_base_domain": "Sessions.Example.com"},
            "kubernetes.ingress_base_domain: must be a DNS name of lowercase RFC 1123 labels (e.g."
            " sessions.example.com, no trailing dot), got 'Sessions.Example.com'",
        ),
        (
            {"ingress_base_domain": "example.com."},
            "kubernetes.ingress_base_domain: must be a DNS name of lowercase RFC 1123 labels (e.g."
            " sessions.example.com, no trailing dot), got 'example.com.'",
        ),
        (
            {"ingress_base_domain": "*.example.com"},
            "kubernetes.ingress_base_domain: must be a DNS name of lowercase RFC 1123 labels (e.g."
            " sessions.example.com, no trailing dot), got '*.example.com'",
        ),
        (
            {"ingress_base_domain": f"{'a' * 64}.example.com"},
            "kubernetes.ingress_base_domain: must be a DNS name of lowercase RFC 1123 labels (e.g."
            f" sessions.example.com, no trailing dot), got '{'a' * 64}.example.com'",
        ),
        (
            {"ingress_base_domain": "10.0.0.5"},
            "kubernetes.ingress_base_domain: must be a DNS name, not an IP address, got '10.0.0.5'",
        ),
        (
            {"ingress_base_domain": "example.com", "ingress_class": "Nginx_Class"},
            "kubernetes.ingress_class: must be an IngressClass name, got 'Nginx_Class'",
        ),
        (
            {"ingress_base_domain": "example.com", "ingress_tls_secret": "tls/secret"},
            "kubernetes.ingress_tls_secret: must be a Secret name, got 'tls/secret'",
        ),
        (
            {"ingress_class": "nginx"},
            "kubernetes.ingress_class: has no effect without kubernetes.routing_base_domain"
            " (nothing is routed without it): set both or neither",
        ),
        (
            {"ingress_tls_secret": "wildcard"},
            "kubernetes.ingress_tls_secret: has no effect without"
            " kubernetes.routing_base_domain (nothing is routed without it):"
            " set both or neither",
        ),
    ],
)
def test_bad_values_name_their_key(keys: dict[str, Any], message: str) -> None:
    assert error_of(**keys) == message


def test_check_config_renders_them_and_they_parse_back(tmp_path: Path) -> None:
    keys = {
        "ingress_base_domain": "sessions.example.com",
        "ingress_class": "nginx",
        "ingress_tls_secret": "wildcard",
    }
    config = check_config(parse_config(kube(**keys), base_dir=BASE, read_text=no_files))
    text = render_config(config)
    # Rendered under the key's new name (the old one is an alias).
    assert 'routing_base_domain = "sessions.example.com"' in text
    assert 'ingress_class = "nginx"' in text and 'ingress_tls_secret = "wildcard"' in text
    path = tmp_path / "again.toml"
    path.write_text(text)
    assert load_config(path).settings == config.settings
    # Bound at start, as the whole section is: a reload reports and keeps them.
    changed = check_config(
        parse_config(
            kube(**{**keys, "ingress_class": "traefik"}), base_dir=BASE, read_text=no_files
        )
    )
    assert provider_for(config).bound_changes(config, changed) == ["kubernetes"]
    assert provider_for(config).keep_bound(config, changed).settings.ingress_class == "nginx"


def test_every_key_of_the_section_is_documented_in_the_shipped_config() -> None:
    text = (Path(__file__).parents[2] / "config" / "runnerd.toml").read_text()
    section = text.split("\n[kubernetes]\n", 1)[1]
    for key in KEYS:
        assert re.search(rf"^(# )?{key} = ", section, re.M), key
