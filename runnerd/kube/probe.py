"""`POST /v1/probe` on the kubernetes backend: could a session start now?

Owns the probe's questions to the apiserver (list the session pods, read the
session namespace) and their answers as the contract's `AvailabilityReport`:
ready, or unavailable with one remediation line the operator can act on
(unreachable, forbidden, namespace missing). Bounded: a client is waiting.
"""

from __future__ import annotations

from urllib.parse import quote

import trio

import runnerd.kube.errors as errors
from runnerd.contract import AvailabilityReport, ready, unavailable
from runnerd.kube.client import KubeClient, Retry

# A probe is a client's request: answered within this, whatever the apiserver does.
PROBE_TIMEOUT_S = 5.0
RBAC_REMEDY = (
    "grant the runner's identity the RBAC in the README (pods, pods/log,"
    " pods/attach in the session namespace)"
)


async def probe_cluster(client: KubeClient) -> AvailabilityReport:
    """Ready, or unavailable with a remediation line; within PROBE_TIMEOUT_S
    whatever the apiserver does."""
    with trio.move_on_after(PROBE_TIMEOUT_S):
        return await _probe(client)
    return unavailable(
        f"the Kubernetes API did not answer within {PROBE_TIMEOUT_S:g} s",
        "check that the apiserver is up and reachable from this host",
    )


async def _probe(client: KubeClient) -> AvailabilityReport:
    namespace = client.namespace
    try:
        await client.request(
            "GET",
            client.pods_path(),
            operation="could not list the session pods",
            retry=Retry.READ,
            params={"limit": "1"},
        )
        # A list in a missing namespace is an empty list: ask for the
        # namespace itself. Reading it may be forbidden (the RBAC in the
        # README does not need it): then it is taken to exist.
        await client.request(
            "GET",
            f"/api/v1/namespaces/{quote(namespace, safe='')}",
            operation="could not read the session namespace",
            retry=Retry.READ,
        )
    except errors.Forbidden as exc:
        if exc.operation == "could not read the session namespace":
            return ready()
        return unavailable(str(exc), RBAC_REMEDY)
    except errors.NotFound:
        return unavailable(
            f"the session namespace {namespace!r} does not exist",
            f"create it (kubectl create namespace {namespace}) or set kubernetes.namespace",
        )
    except errors.Unauthorized as exc:
        return unavailable(str(exc), RBAC_REMEDY)
    except errors.KubeError as exc:
        return unavailable(
            str(exc),
            "check that the apiserver is up and that kubernetes.kubeconfig / context point at it",
        )
    return ready()
