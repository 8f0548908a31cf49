"""Teardown of N concurrent sessions on the Kubernetes backend, against a reference.

`teardown(sim, client, n)` starts N sessions (`print up` then `wait`: a
program that ends on SIGTERM) and, once every one is `running`, sends N
concurrent `DELETE /v1/sessions/{id}`: timed to the last 204 and to the last
pod gone from the cluster. The reference, in the same run on the same
cluster: N more sessions started the same way, their pods deleted directly
by httpx (N concurrent raw pod DELETEs, the grace runnerd sends) and timed
until the last is gone. The ratio of the two is the figure to compare across
machines; both are printed with the load average beside them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import httpx
import trio

from runnerd.kube.podstop import STOP_GRACE_S
from tests.e2e.contract_client import wait_status
from tests.kube.daemon import session_pods, telo_body, wait_no_pods
from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim

SCRIPT = "print up\nwait\n"
TIMEOUT_S = 120.0


@dataclass
class Teardown:
    sessions: int
    all_204_s: float  # the last DELETE answered
    all_gone_s: float  # the last pod gone from the cluster
    reference_s: float  # N raw pod DELETEs until the last pod is gone
    load: tuple[float, float, float]

    def lines(self) -> list[str]:
        ratio = self.all_gone_s / self.reference_s if self.reference_s else float("nan")
        load = " ".join(f"{x:.2f}" for x in self.load)
        return [
            f"  teardown, {self.sessions} concurrent DELETE(s): last 204 {self.all_204_s:.2f} s,"
            f" last pod gone {self.all_gone_s:.2f} s",
            f"  reference, {self.sessions} raw pod DELETE(s) (httpx) until gone"
            f" {self.reference_s:.2f} s; ratio {ratio:.2f} (load average {load})",
        ]


async def _start(client: httpx.AsyncClient, n: int) -> list[str]:
    ids: list[str] = []

    async def one() -> None:
        response = await client.post("/v1/sessions", json=telo_body(SCRIPT))
        response.raise_for_status()
        ids.append(response.json()["sessionId"])
        await wait_status(client, ids[-1], "running", timeout_s=TIMEOUT_S)

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)
    return ids


async def _delete_sessions(client: httpx.AsyncClient, ids: list[str]) -> None:
    async def one(session_id: str) -> None:
        response = await client.delete(f"/v1/sessions/{session_id}", timeout=TIMEOUT_S)
        if response.status_code != 204:
            raise RuntimeError(f"DELETE answered {response.status_code}: {response.text}")

    async with trio.open_nursery() as nursery:
        for session_id in ids:
            nursery.start_soon(one, session_id)


async def _delete_pods(sim: KubeSim, names: list[str]) -> None:
    body = {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Background",
        "gracePeriodSeconds": STOP_GRACE_S,
    }
    async with build_client(sim) as kube, trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(
                lambda n=name: kube.request(
                    "DELETE", f"/api/v1/namespaces/runnerd/pods/{n}", json=body
                )
            )


async def teardown(sim: KubeSim, client: httpx.AsyncClient, n: int) -> Teardown:
    """See the module docstring. Leaves no session running and no pod."""
    ids = await _start(client, n)
    t0 = time.perf_counter()
    await _delete_sessions(client, ids)
    all_204 = time.perf_counter() - t0
    await wait_no_pods(sim, TIMEOUT_S)
    all_gone = time.perf_counter() - t0
    await _start(client, n)
    names = session_pods(sim)
    t0 = time.perf_counter()
    await _delete_pods(sim, names)
    await wait_no_pods(sim, TIMEOUT_S)
    reference = time.perf_counter() - t0
    return Teardown(n, all_204, all_gone, reference, os.getloadavg())
