"""kubectl against ConfigMaps and pods with several containers: `create configmap`
(protobuf), `get cm`, `describe pod`, `logs -c`, `attach -c`."""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_kubectl import KUBECTL, kubectl
from tests.kubesim.test_kubelet import create_pod, wait_pod
from tests.kubesim.test_kubelet_multi import multi_pod, states

Result = subprocess.CompletedProcess[bytes]


@pytest.fixture
async def kube(kubesim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    async with build_client(kubesim) as client:
        yield client


async def test_configmaps_with_kubectl(apiserver: KubeSim, tmp_path: Path) -> None:
    literal = ["--from-literal=a=1", "--from-literal=b=two words"]
    made = await kubectl(apiserver, tmp_path, "create", "configmap", "app", *literal)
    assert made.returncode == 0, made.stderr  # client-go sent it as protobuf
    assert made.stdout == b"configmap/app created\n"
    results: dict[str, Result] = {}

    async def run(key: str, *args: str) -> None:
        results[key] = await kubectl(apiserver, tmp_path, *args)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "table", "get", "cm")
        nursery.start_soon(run, "json", "get", "configmap", "app", "-o", "json")
        nursery.start_soon(run, "again", "create", "configmap", "app", "--from-literal=x=1")
        nursery.start_soon(run, "long", "create", "configmap", "x" * 254, "--from-literal=a=1")
    header, row = results["table"].stdout.decode().splitlines()
    assert header.split() == ["NAME", "DATA", "AGE"] and row.split()[:2] == ["app", "2"]
    assert json.loads(results["json"].stdout)["data"] == {"a": "1", "b": "two words"}
    assert results["again"].returncode == 1
    assert results["again"].stderr == (  # kubectl create's own wording around the 409
        b'error: failed to create configmap: configmaps "app" already exists\n'
    )
    assert results["long"].returncode == 1  # the server's 422, through protobuf
    assert results["long"].stderr.endswith(b": must be no more than 253 characters\n")
    assert b'is invalid: metadata.name: Invalid value: "xxx' in results["long"].stderr
    gone = await kubectl(apiserver, tmp_path, "delete", "cm", "app")
    assert gone.stdout.startswith(b'configmap "app" deleted'), gone.stderr
    assert apiserver.store.list("configmaps", "runnerd") == []


async def test_describe_logs_and_attach_with_several_containers(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    scripts = {
        "first": "echo first-out",
        "reader": "while read l; do echo got $l; done",
        "idle": "while true; do sleep 0.05; done",
    }
    pod: dict[str, Any] = multi_pod("trio", scripts)
    pod["spec"]["containers"][1]["stdin"] = True
    await create_pod(kube, pod)
    await wait_pod(kube, "trio", lambda _t, p: states(p) == ["terminated", "running", "running"])
    results: dict[str, Result] = {}

    async def run(key: str, *args: str) -> None:
        results[key] = await kubectl(kubesim, tmp_path, *args)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "describe", "describe", "pod", "trio")
        nursery.start_soon(run, "logs", "logs", "trio", "-c", "first")
        nursery.start_soon(run, "default", "logs", "trio")
        nursery.start_soon(run, "unknown", "logs", "trio", "-c", "nope")
        nursery.start_soon(run, "table", "get", "pod", "trio")
    describe = results["describe"].stdout.decode()
    assert results["describe"].returncode == 0, results["describe"].stderr
    section = describe.split("\nContainers:\n", 1)[1].split("\nConditions:", 1)[0]
    assert [line.strip() for line in section.splitlines() if line[2:3] != " "] == [
        "first:",
        "reader:",
        "idle:",
    ]
    assert "Reason:       Completed" in section and "Exit Code:    0" in section
    assert section.count("State:          Running") == 2
    assert results["logs"].stdout == b"first-out\n"
    # kubectl itself picks the first container and says so; the server is asked for it.
    assert results["default"].stdout == b"first-out\n"
    assert b'Defaulted container "first" out of: first, reader, idle' in results["default"].stderr
    assert results["unknown"].returncode == 1
    assert b"container nope is not valid for pod trio" in results["unknown"].stderr
    assert results["table"].stdout.decode().splitlines()[1].split()[1:3] == ["2/3", "NotReady"]

    cmd = [
        KUBECTL,
        "--kubeconfig",
        str(kubesim.write_kubeconfig(tmp_path / "kubeconfig")),
        "--cache-dir",
        str(tmp_path / "cache"),
        "attach",
        "-i",
        "trio",
        "-c",
        "reader",
        "--pod-running-timeout=10s",
    ]
    async with trio.open_nursery() as nursery:
        with trio.fail_after(30):
            attach = await nursery.start(
                functools.partial(
                    trio.run_process,
                    cmd,
                    stdin=b"hello\n",
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
            )
            seen = await _read_log_until(kube, "trio", "reader", "got hello")
            attach.kill()
    assert seen  # the line typed into kubectl reached the `reader` container's stdin


async def _read_log_until(kube: httpx.AsyncClient, pod: str, container: str, text: str) -> bool:
    params = {"container": container, "follow": "true"}
    path = f"/api/v1/namespaces/runnerd/pods/{pod}/log"
    async with kube.stream("GET", path, params=params) as resp:
        async for line in resp.aiter_lines():
            if text in line:
                return True
    return False
