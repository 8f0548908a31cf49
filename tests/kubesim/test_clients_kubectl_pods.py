"""kubectl 1.37 against pods the kubelet runs: deleting stuck pods, logs, events, describe.

What operators reach for first when a pod misbehaves; each test drives the real
kubectl binary against the whole simulated cluster (kubelet included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from tests.kubesim.conftest import build_pod
from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_kubectl import kubectl
from tests.kubesim.validation import default_pod

Obj = dict[str, Any]
NS = "runnerd"


async def wait_stored(
    sim: KubeSim, name: str, until: Callable[[Obj | None], bool], timeout_s: float = 10
) -> Obj | None:
    """Wait (on store changes, no polling) until `until(pod or None)` holds; the pod."""
    with trio.fail_after(timeout_s):
        async with sim.store.subscribe() as changes:
            while not until(pod := sim.store.get("pods", NS, name)):
                await changes.receive()
    return pod


def waiting_reason(pod: Obj | None) -> str | None:
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
    return str(statuses[0].get("state", {}).get("waiting", {}).get("reason"))


async def create_pod(sim: KubeSim, name: str, *, command: str = "", **container: Any) -> None:
    pod = build_pod(name)
    if command:
        container["command"] = ["sh", "-c", command]
    pod["spec"]["containers"][0].update(container)
    await sim.store.create("pods", NS, default_pod(pod))


async def test_delete_pods_stuck_on_image_errors(kubesim: KubeSim, tmp_path: Any) -> None:
    # Both keep the default 30 s grace period: nothing runs, so the kubelet has nothing to
    # wait for, and a real cluster removes them within about a second.
    assert kubesim.kubelet is not None
    kubesim.kubelet.image_pull_backoff_s = 0.05
    await create_pod(kubesim, "backoff", image="acme/missing:1")
    await create_pod(kubesim, "never", image="acme/absent:2", imagePullPolicy="Never")
    await wait_stored(kubesim, "backoff", lambda p: waiting_reason(p) == "ImagePullBackOff")
    await wait_stored(kubesim, "never", lambda p: waiting_reason(p) == "ErrImageNeverPull")

    done = await kubectl(kubesim, tmp_path, "delete", "pod", "backoff", "never", "--timeout=10s")
    assert done.returncode == 0, done.stderr
    assert kubesim.store.get("pods", NS, "backoff") is None
    assert kubesim.store.get("pods", NS, "never") is None
