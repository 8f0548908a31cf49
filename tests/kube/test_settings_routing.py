"""`[kubernetes]` routing keys (issue 21): the mode, the base domain under its
new name and its old one (with check-config's deprecation warning), the
Gateway keys, the ready timeout, and every key that could have no effect
refused with its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runnerd.backends import check_config, parse_config, provider_for
from tests.harness import build_config, dump_toml, run_runnerd
from tests.kube.test_settings import BASE, error_of, kube, no_files, settings

DOMAIN = {"routing_base_domain": "sessions.example.com"}


def test_defaults_and_the_gateway_keys() -> None:
    d = settings()
    assert (d.routing, d.routing_base_domain, d.route_ready_timeout_s) == ("auto", None, 60.0)
    assert (d.gateway_name, d.gateway_namespace, d.gateway_section) == (None, None, None)
    got = settings(
        **DOMAIN,
        routing="gateway",
        gateway_name="public",
        gateway_namespace="infra",
        gateway_section="https",
        route_ready_timeout_seconds=5,
    )
    assert (got.routing, got.gateway_name, got.gateway_namespace, got.gateway_section) == (
        "gateway",
        "public",
        "infra",
        "https",
    )
    assert got.route_ready_timeout_s == 5.0 and not got.base_domain_alias


def test_the_old_name_is_an_alias_that_check_config_warns_about() -> None:
    config = check_config(
        parse_config(kube(ingress_base_domain="old.example.com"), base_dir=BASE, read_text=no_files)
    )
    assert config.settings.routing_base_domain == "old.example.com"
    warnings = provider_for(config).config_warnings(config, None)
    assert (
        "kubernetes.ingress_base_domain is deprecated: rename it routing_base_domain"
        " (it applies to Gateway routing too)"
    ) in warnings
    fresh = check_config(parse_config(kube(**DOMAIN), base_dir=BASE, read_text=no_files))
    assert not any("deprecated" in w for w in provider_for(fresh).config_warnings(fresh, None))


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"routing": "istio"},
            "kubernetes.routing: must be one of auto, ingress, gateway, none, got 'istio'",
        ),
        (
            {**DOMAIN, "ingress_base_domain": "old.example.com"},
            "kubernetes.ingress_base_domain: is the old name of kubernetes.routing_base_domain:"
            " set only routing_base_domain",
        ),
        (
            {**DOMAIN, "routing": "gateway", "gateway_name": "gw", "ingress_tls_secret": "tls"},
            "kubernetes.ingress_tls_secret: is for Ingress routing only; with Gateway routing"
            " TLS is terminated by the Gateway's listener (a certificateRef there): remove it",
        ),
        (
            {**DOMAIN, "gateway_name": "gw", "ingress_tls_secret": "tls"},
            "kubernetes.ingress_tls_secret: is for Ingress routing only; with Gateway routing"
            " TLS is terminated by the Gateway's listener (a certificateRef there): remove it",
        ),
        (
            {**DOMAIN, "routing": "gateway"},
            'kubernetes.gateway_name: is required with routing = "gateway": the Gateway the'
            " HTTPRoutes attach to",
        ),
        (
            {**DOMAIN, "routing": "ingress", "gateway_name": "gw"},
            'kubernetes.gateway_name: has no effect with routing = "ingress": remove it',
        ),
        (
            {**DOMAIN, "routing": "gateway", "gateway_name": "gw", "ingress_class": "nginx"},
            'kubernetes.ingress_class: has no effect with routing = "gateway": remove it',
        ),
        (
            {**DOMAIN, "routing": "none", "gateway_section": "https"},
            'kubernetes.gateway_section: has no effect with routing = "none": remove it',
        ),
        (
            {**DOMAIN, "gateway_name": "gw", "ingress_class": "nginx"},
            "kubernetes.ingress_class: names an IngressClass and kubernetes.gateway_name a"
            ' Gateway with routing = "auto": set routing = "gateway" or "ingress" (and remove'
            " the other key)",
        ),
        (
            {**DOMAIN, "gateway_section": "https"},
            "kubernetes.gateway_section: has no effect without kubernetes.gateway_name (it"
            " qualifies the Gateway named there): set gateway_name or remove it",
        ),
        (
            {**DOMAIN, "routing": "auto", "gateway_namespace": "infra"},
            "kubernetes.gateway_namespace: has no effect without kubernetes.gateway_name (it"
            " qualifies the Gateway named there): set gateway_name or remove it",
        ),
        (
            {"gateway_name": "gw"},
            "kubernetes.gateway_name: has no effect without kubernetes.routing_base_domain"
            " (nothing is routed without it): set both or neither",
        ),
        (
            {**DOMAIN, "gateway_name": "Public_GW"},
            "kubernetes.gateway_name: must be a Gateway name, got 'Public_GW'",
        ),
        (
            {**DOMAIN, "gateway_name": "gw", "gateway_namespace": "in.fra"},
            "kubernetes.gateway_namespace: must be a namespace name (RFC 1123 label), got 'in.fra'",
        ),
        (
            {"route_ready_timeout_seconds": 0},
            "kubernetes.route_ready_timeout_seconds: must be a positive number of seconds, got 0",
        ),
    ],
)
def test_bad_routing_keys_name_their_key(keys: dict[str, Any], message: str) -> None:
    assert error_of(**keys) == message


def kube_file(tmp_path: Path, **keys: Any) -> Path:
    overrides = {
        "runner": {"backend": "kubernetes"},
        "local": None,
        "kubernetes": {"self_url": "http://10.0.0.5:8063", **keys},
    }
    config = tmp_path / "runnerd.toml"
    config.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", overrides)))
    return config


async def test_check_config_prints_the_keys_and_warns_of_the_old_name(tmp_path: Path) -> None:
    config = kube_file(tmp_path, ingress_base_domain="old.example.com", routing="ingress")
    result = await run_runnerd("check-config", "--config", str(config))
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, stderr
    assert 'routing = "ingress"' in stdout
    assert 'routing_base_domain = "old.example.com"' in stdout
    assert "route_ready_timeout_seconds = 60" in stdout
    assert (
        "runnerd: warning: kubernetes.ingress_base_domain is deprecated: rename it"
        " routing_base_domain (it applies to Gateway routing too)"
    ) in stderr


async def test_check_config_names_the_key_and_its_line(tmp_path: Path) -> None:
    config = kube_file(
        tmp_path,
        routing="gateway",
        routing_base_domain="s.example.com",
        gateway_name="public",
        ingress_tls_secret="wildcard",
    )
    result = await run_runnerd("check-config", "--config", str(config))
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    line = next(
        n
        for n, text in enumerate(config.read_text().splitlines(), 1)
        if text.startswith("ingress_tls_secret")
    )
    assert f"line {line}" in stderr, stderr
    assert "kubernetes.ingress_tls_secret: is for Ingress routing only" in stderr


async def test_a_gateway_listener_without_a_gateway_names_its_line(tmp_path: Path) -> None:
    config = kube_file(tmp_path, routing_base_domain="s.example.com", gateway_section="https")
    result = await run_runnerd("check-config", "--config", str(config))
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    line = next(
        n
        for n, text in enumerate(config.read_text().splitlines(), 1)
        if text.startswith("gateway_section")
    )
    assert f"line {line}" in stderr, stderr
    assert "kubernetes.gateway_section: has no effect without kubernetes.gateway_name" in stderr
