"""Pods with several containers: one host process each, their own statuses in spec order,
the kubelet's phase for restartPolicy Never, per-container logs/attach, and deletion or a
deadline stopping every one of them."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim
from tests.kubesim.table import build_pod_status
from tests.kubesim.test_attach import Frames, open_stream
from tests.kubesim.test_kubelet import create_pod, phase_is, pod_volumes, wait_pod

NS = "runnerd"
PODS = f"/api/v1/namespaces/{NS}/pods"
Obj = dict[str, Any]
WAIT_GO = "while [ ! -f /shared/go ]; do sleep 0.05; done; "


@pytest.fixture
async def kube(kubesim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    async with build_client(kubesim) as client:
        yield client


def multi_pod(name: str, scripts: dict[str, str], **spec: Any) -> Obj:
    """One busybox container per script, each mounting the shared emptyDir at /shared."""
    containers = [
        {
            "name": cname,
            "image": "busybox:1.36",
            "command": ["sh", "-c", script],
            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
        }
        for cname, script in scripts.items()
    ]
    volumes = [{"name": "shared", "emptyDir": {}}]
    body = {"restartPolicy": "Never", "containers": containers, "volumes": volumes, **spec}
    return {"metadata": {"name": name}, "spec": body}


def states(pod: Obj) -> list[str]:
    return [next(iter(c["state"])) for c in pod["status"]["containerStatuses"]]


async def log_of(kube: httpx.AsyncClient, pod: str, container: str | None) -> httpx.Response:
    params = {"container": container} if container else {}
    return await kube.get(f"{PODS}/{pod}/log", params=params)


async def test_each_container_runs_and_reports_on_its_own(
    kubesim: KubeSim, kube: httpx.AsyncClient
) -> None:
    scripts = {
        "first": "echo one > /shared/one; echo first-out",
        "second": WAIT_GO + "echo second-out; exit 3",
        "third": WAIT_GO + "cat /shared/one",
    }
    created = await create_pod(kube, multi_pod("trio", scripts))
    pod = await wait_pod(
        kube, "trio", lambda _t, p: states(p) == ["terminated", "running", "running"]
    )
    assert pod["status"]["phase"] == "Running"  # Running while any container runs
    statuses = pod["status"]["containerStatuses"]
    assert [c["name"] for c in statuses] == ["first", "second", "third"]  # spec order
    first = statuses[0]["state"]["terminated"]
    assert (first["exitCode"], first["reason"]) == (0, "Completed")
    assert first["startedAt"] and first["finishedAt"] and first["containerID"]
    assert [c["ready"] for c in statuses] == [False, True, True]
    assert len({c["containerID"] for c in statuses}) == 3  # a process (container) each
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "containers with unready status: [first]"
    assert build_pod_status(pod) == "NotReady"  # what `kubectl get pods` prints for it

    (pod_volumes(kubesim, created) / "shared" / "go").touch()  # the shared emptyDir
    pod = await wait_pod(kube, "trio", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Failed"  # one exited non-zero
    second, third = (c["state"]["terminated"] for c in pod["status"]["containerStatuses"][1:])
    assert (second["exitCode"], second["reason"]) == (3, "Error")
    assert (third["exitCode"], third["reason"]) == (0, "Completed")

    assert (await log_of(kube, "trio", "first")).text == "first-out\n"
    assert (await log_of(kube, "trio", "third")).text == "one\n"  # saw first's file
    r = await log_of(kube, "trio", None)
    assert r.status_code == 400 and r.json()["message"] == (
        "a container name must be specified for pod trio, choose one of: [first second third]"
    )
    r = await log_of(kube, "trio", "nope")
    assert (
        r.status_code == 400 and r.json()["message"] == "container nope is not valid for pod trio"
    )


async def test_all_zero_is_succeeded(kube: httpx.AsyncClient) -> None:
    await create_pod(kube, multi_pod("pair", {"a": "true", "b": "echo b"}))
    pod = await wait_pod(kube, "pair", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded" and states(pod) == ["terminated"] * 2
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "PodCompleted"


async def pids_of(kube: httpx.AsyncClient, pod: str, containers: list[str]) -> list[int]:
    """Each container prints its shell's pid first: read it from its log as it comes."""
    pids: list[int] = []
    with trio.fail_after(15):
        for name in containers:
            params = {"container": name, "follow": "true"}
            async with kube.stream("GET", f"{PODS}/{pod}/log", params=params) as resp:
                async for line in resp.aiter_lines():
                    pids.append(int(line))
                    break
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_deletion_stops_every_container_sigkill_after_grace(
    kube: httpx.AsyncClient,
) -> None:
    scripts = {
        "polite": "echo $$$$; trap 'exit 0' TERM; while true; do sleep 0.05; done",
        "stubborn": "echo $$$$; trap '' TERM; while true; do sleep 0.05; done",
    }
    await create_pod(kube, multi_pod("doomed", scripts))  # `$$$$`: Kubernetes makes it `$$`
    await wait_pod(kube, "doomed", lambda _t, p: states(p) == ["running", "running"])
    pids = await pids_of(kube, "doomed", ["polite", "stubborn"])
    assert all(alive(pid) for pid in pids)
    r = await kube.delete(f"{PODS}/doomed", params={"gracePeriodSeconds": "1"})
    assert r.status_code == 200
    await wait_deleted(kube, "doomed", r.json()["metadata"]["resourceVersion"])
    assert not any(alive(pid) for pid in pids)
    params = {"fieldSelector": "reason=Killing,involvedObject.name=doomed"}
    events = (await kube.get(f"/api/v1/namespaces/{NS}/events", params=params)).json()["items"]
    assert sorted(e["message"] for e in events) == [
        "Stopping container polite",
        "Stopping container stubborn",
    ]


async def wait_deleted(kube: httpx.AsyncClient, name: str, rv: str) -> None:
    """Watch from the delete's RV (so a removal that came first is replayed) until DELETED."""
    params = {"watch": "1", "fieldSelector": f"metadata.name={name}", "resourceVersion": rv}
    with trio.fail_after(15):
        async with kube.stream("GET", PODS, params=params) as resp:
            async for line in resp.aiter_lines():
                if line and json.loads(line)["type"] == "DELETED":
                    return
    raise AssertionError("watch ended")


async def test_active_deadline_kills_every_container(kube: httpx.AsyncClient) -> None:
    loop = "while true; do sleep 0.05; done"
    pod = multi_pod("late", {"a": loop, "b": loop}, activeDeadlineSeconds=1)
    await create_pod(kube, pod)
    pod = await wait_pod(
        kube, "late", lambda _t, p: states(p) == ["terminated", "terminated"], timeout_s=20
    )
    assert pod["status"]["phase"] == "Failed" and pod["status"]["reason"] == "DeadlineExceeded"
    codes = [c["state"]["terminated"]["exitCode"] for c in pod["status"]["containerStatuses"]]
    assert codes == [143, 143]


async def test_attach_and_tty_are_per_container(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    pod = multi_pod("duo", {"term": "cat", "pipe": "while read l; do echo got $l; done"})
    pod["spec"]["containers"][0] |= {"tty": True, "stdin": True}
    pod["spec"]["containers"][1] |= {"stdin": True}
    await create_pod(kube, pod)
    await wait_pod(kube, "duo", lambda _t, p: states(p) == ["running", "running"])
    query = "stdin=true&stdout=true&stderr=true&container=pipe"
    async with open_stream(kubesim, "duo", "attach", query) as ws:
        frames = Frames(ws)
        await ws.send_message(b"\x00hello\n")
        await frames.until(lambda f: "got hello" in f.text())
    assert not any(c == 1 and b"\r\n" in d for c, d in frames.log)  # pipes, not a PTY
    async with open_stream(kubesim, "duo", "attach", query.replace("pipe", "term")) as ws:
        frames = Frames(ws)
        await ws.send_message(b"\x00typed\n")
        await frames.until(lambda f: "typed\r\n" in f.text())  # the PTY's echo and ONLCR
    r = await kube.get(f"{PODS}/duo/attach", params={"stdout": "true"})
    assert r.status_code == 400 and r.json()["message"] == (
        "a container name must be specified for pod duo, choose one of: [term pipe]"
    )
