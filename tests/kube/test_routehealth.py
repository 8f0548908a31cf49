"""runnerd.kube.routehealth's verdicts and runnerd.kube.routing's pure
reads: what an HTTPRoute's or Ingress's status says, which Gateway API
version is used, which IngressClass is the default."""

from __future__ import annotations

from typing import Any

import pytest

from runnerd.kube.routehealth import GatewayRef, httproute_verdict, ingress_verdict
from runnerd.kube.routing import pick_classes, pick_gateway_version


def parent(*conditions: tuple[str, str, str, str]) -> dict[str, Any]:
    return {
        "parentRef": {"name": "gw", "namespace": "infra"},
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions
        ],
    }


ACCEPTED = ("Accepted", "True", "Accepted", "")
RESOLVED = ("ResolvedRefs", "True", "ResolvedRefs", "")


@pytest.mark.parametrize(
    ("route", "verdict"),
    [
        (None, ("pending", None)),  # not found yet (a 404)
        ({"status": {}}, ("pending", None)),
        ({"status": {"parents": []}}, ("pending", None)),
        (
            {"status": {"parents": [parent(("Accepted", "Unknown", "Pending", ""))]}},
            ("pending", None),
        ),
        ({"status": {"parents": [parent(ACCEPTED)]}}, ("programmed", None)),
        ({"status": {"parents": [parent(ACCEPTED, RESOLVED)]}}, ("programmed", None)),
        (
            {
                "status": {
                    "parents": [
                        parent(ACCEPTED, ("ResolvedRefs", "False", "BackendNotFound", "no svc"))
                    ]
                }
            },
            ("rejected", "BackendNotFound: no svc"),
        ),
        (
            {"status": {"parents": [parent(("Accepted", "False", "NotAllowedByListeners", ""))]}},
            ("rejected", "NotAllowedByListeners"),
        ),
        # One parent accepted, another still pending: programmed.
        (
            {"status": {"parents": [parent(), parent(ACCEPTED)]}},
            ("programmed", None),
        ),
    ],
)
def test_httproute_verdicts(route: dict[str, Any] | None, verdict: tuple[str, str | None]) -> None:
    assert httproute_verdict(route, GW) == verdict


GW = GatewayRef("gw", "infra", None, "v1")


def accepted_by(ref: dict[str, Any], observed: int | None = None) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": "Accepted", "status": "True", "reason": "Accepted"}
    if observed is not None:
        condition["observedGeneration"] = observed
    return {"parentRef": ref, "conditions": [condition]}


@pytest.mark.parametrize(
    ("ref", "observed", "gateway", "verdict"),
    [
        # Status written for the Gateway the route attaches to now, at its generation.
        ({"name": "gw", "namespace": "infra"}, 3, GW, "programmed"),
        # The namespace defaults to the route's own.
        ({"name": "gw"}, None, GatewayRef("gw", "runnerd", None, "v1"), "programmed"),
        # Written for an older parentRef: another Gateway, namespace, listener.
        ({"name": "old", "namespace": "infra"}, 3, GW, "pending"),
        ({"name": "gw", "namespace": "other"}, 3, GW, "pending"),
        (
            {"name": "gw", "namespace": "infra"},
            3,
            GatewayRef("gw", "infra", "https", "v1"),
            "pending",
        ),
        ({"name": "gw", "namespace": "infra", "sectionName": "http"}, 3, GW, "pending"),
        ({"name": "gw", "namespace": "infra", "kind": "Service"}, 3, GW, "pending"),
        # Written for an older spec of the route.
        ({"name": "gw", "namespace": "infra"}, 2, GW, "pending"),
    ],
)
def test_only_status_about_the_route_as_it_is_counts(
    ref: dict[str, Any], observed: int | None, gateway: GatewayRef, verdict: str
) -> None:
    route = {
        "metadata": {"namespace": "runnerd", "generation": 3},
        "status": {"parents": [accepted_by(ref, observed)]},
    }
    assert httproute_verdict(route, gateway) == (verdict, None)


def test_ingress_verdict_needs_an_address() -> None:
    assert ingress_verdict(None) == ("pending", None)
    assert ingress_verdict({"status": {"loadBalancer": {}}}) == ("pending", None)
    assert ingress_verdict({"status": {"loadBalancer": {"ingress": [{}]}}}) == ("pending", None)
    lb = {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.test"}]}}}
    assert ingress_verdict(lb) == ("programmed", None)


def test_v1_is_preferred_over_v1beta1() -> None:
    both = {"versions": [{"version": "v1beta1"}, {"version": "v1"}]}
    assert pick_gateway_version(both) == "v1"
    assert pick_gateway_version({"versions": [{"version": "v1beta1"}]}) == "v1beta1"
    assert pick_gateway_version({"versions": [{"version": "v1alpha2"}]}) is None


def test_the_default_class_is_the_annotated_one() -> None:
    note = {"ingressclass.kubernetes.io/is-default-class": "true"}
    listing = {
        "items": [
            {"metadata": {"name": "a"}},
            {"metadata": {"name": "b", "annotations": note}},
        ]
    }
    assert pick_classes(listing) == (("a", "b"), "b")
    assert pick_classes({"items": []}) == ((), None)


def test_of_several_default_classes_the_newest_is_the_one_admission_uses() -> None:
    note = {"ingressclass.kubernetes.io/is-default-class": "true"}

    def cls(name: str, created: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "annotations": note, "creationTimestamp": created}}

    old, new = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"
    listing = {"items": [cls("a", old), cls("c", new), cls("b", new)]}
    assert pick_classes(listing) == (("a", "c", "b"), "b")
