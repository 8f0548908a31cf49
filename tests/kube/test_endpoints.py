"""runnerd.kube.endpoints: the Service and the Ingress, validated against the
strict Kubernetes 1.37 schema (kubernetes-validate), and what `running`
announces for each port."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from runnerd.backend import Limits, SessionIdentity
from runnerd.contract import PortMapping
from runnerd.kube.endpoints import announced, build_ingress, build_service, endpoint_host
from runnerd.kube.podspec import INSPECT_PORT
from runnerd.kube.settings import KubeSettings

K8S_VERSION = "1.37"
SID = "abcdefgh2345"
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": f"runnerd-{SID}", "uid": "6f0e7c1a-2b3d-4e5f-8a9b-0c1d2e3f4a5b"},
}
DOMAIN = "sessions.example.com"
SETTINGS = KubeSettings(self_url="http://10.0.0.5:8063", routing_base_domain=DOMAIN)
FULL = replace(SETTINGS, ingress_class="nginx", ingress_tls_secret="wildcard-sessions")
PORTS = (PortMapping(8080, "tcp"), PortMapping(9000, "tcp"), PortMapping(5353, "udp"))
IDENTITY = SessionIdentity(SID, Limits("500m", "512Mi", "1Gi", 3600.0), ports=PORTS)
OWNER = [
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": f"runnerd-{SID}",
        "uid": "6f0e7c1a-2b3d-4e5f-8a9b-0c1d2e3f4a5b",
        "controller": True,
        "blockOwnerDeletion": True,
    }
]
LABELS = {"app.kubernetes.io/managed-by": "runnerd", "runnerd.telo.run/session-id": SID}


def validate(obj: dict[str, Any] | None) -> dict[str, Any]:
    assert obj is not None
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    return obj


def test_both_are_valid_in_strict_mode_with_and_without_every_option() -> None:
    for settings in (SETTINGS, FULL):
        validate(build_service(settings, IDENTITY, POD))
        validate(build_ingress(settings, IDENTITY, POD))


def test_strict_validation_catches_a_typo() -> None:
    # The guard the other tests rely on: strict mode rejects unknown fields.
    ingress = validate(build_ingress(FULL, IDENTITY, POD))
    ingress["spec"]["ingresClassName"] = "nginx"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(ingress)


def test_the_service_selects_the_pod_and_carries_every_port_under_its_protocol() -> None:
    service = validate(build_service(FULL, IDENTITY, POD))
    assert service["metadata"] == {
        "name": f"runnerd-{SID}",
        "labels": LABELS,
        "ownerReferences": OWNER,
    }
    assert service["spec"]["selector"] == LABELS
    assert service["spec"]["ports"] == [
        {"name": "tcp-8080", "protocol": "TCP", "port": 8080, "targetPort": 8080},
        {"name": "tcp-9000", "protocol": "TCP", "port": 9000, "targetPort": 9000},
        {"name": "udp-5353", "protocol": "UDP", "port": 5353, "targetPort": 5353},
    ]


def test_the_ingress_routes_each_tcp_port_by_its_own_host_with_class_and_tls() -> None:
    ingress = validate(build_ingress(FULL, IDENTITY, POD))
    assert ingress["metadata"] == {
        "name": f"runnerd-{SID}",
        "labels": LABELS,
        "ownerReferences": OWNER,
    }
    hosts = [f"8080-{SID}.{DOMAIN}", f"9000-{SID}.{DOMAIN}"]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": hosts, "secretName": "wildcard-sessions"}]
    assert [r["host"] for r in ingress["spec"]["rules"]] == hosts
    [path] = ingress["spec"]["rules"][1]["http"]["paths"]
    assert path == {
        "path": "/",
        "pathType": "Prefix",
        "backend": {"service": {"name": f"runnerd-{SID}", "port": {"number": 9000}}},
    }
    bare = validate(build_ingress(SETTINGS, IDENTITY, POD))
    assert "ingressClassName" not in bare["spec"] and "tls" not in bare["spec"]


def test_a_host_is_one_dns_label_under_the_base_domain() -> None:
    host = endpoint_host(65535, SID, DOMAIN)
    label, _, rest = host.partition(".")
    assert rest == DOMAIN and label == f"65535-{SID}" and len(label) <= 63


def test_nothing_is_built_without_a_domain_or_without_ports() -> None:
    plain = KubeSettings(self_url="http://10.0.0.5:8063")
    assert build_service(plain, IDENTITY, POD) is None
    assert build_ingress(plain, IDENTITY, POD) is None
    assert build_service(SETTINGS, replace(IDENTITY, ports=()), POD) is None
    udp_only = replace(IDENTITY, ports=(PortMapping(5353, "udp"),))
    assert validate(build_service(SETTINGS, udp_only, POD))["spec"]["ports"][0]["protocol"] == "UDP"
    assert build_ingress(SETTINGS, udp_only, POD) is None


def test_the_debug_port_is_never_published() -> None:
    debug = replace(
        IDENTITY, inspect=True, ports=(PortMapping(INSPECT_PORT, "tcp"), PortMapping(8080, "tcp"))
    )
    service = validate(build_service(FULL, debug, POD))
    assert [p["port"] for p in service["spec"]["ports"]] == [8080]
    ingress = validate(build_ingress(FULL, debug, POD))
    assert [r["host"] for r in ingress["spec"]["rules"]] == [f"8080-{SID}.{DOMAIN}"]
    assert announced(FULL, debug, published=True)[0] == {
        "host": "",
        "port": INSPECT_PORT,
        "protocol": "tcp",
    }
    # Only the kernel's debug server holds that port: without inspect it is the app's.
    assert [
        p["port"]
        for p in validate(build_service(FULL, replace(debug, inspect=False), POD))["spec"]["ports"]
    ] == [INSPECT_PORT, 8080]


def test_running_announces_hosts_and_urls_for_tcp_only_once_published() -> None:
    assert announced(FULL, IDENTITY, published=True) == (
        {
            "host": f"8080-{SID}.{DOMAIN}",
            "port": 8080,
            "protocol": "tcp",
            "url": f"https://8080-{SID}.{DOMAIN}",
        },
        {
            "host": f"9000-{SID}.{DOMAIN}",
            "port": 9000,
            "protocol": "tcp",
            "url": f"https://9000-{SID}.{DOMAIN}",
        },
        {"host": "", "port": 5353, "protocol": "udp"},
    )
    unpublished = tuple({"host": "", "port": p.port, "protocol": p.protocol} for p in PORTS)
    assert announced(FULL, IDENTITY, published=False) == unpublished
    assert announced(KubeSettings(), IDENTITY, published=True) == unpublished


def test_an_owner_without_a_uid_is_refused() -> None:
    with pytest.raises(ValueError, match="uid"):
        build_service(SETTINGS, IDENTITY, {"metadata": {"name": f"runnerd-{SID}"}})
