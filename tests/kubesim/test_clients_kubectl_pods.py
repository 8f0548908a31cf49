"""kubectl 1.37 against pods the kubelet runs: deleting stuck pods, logs, events, describe.

What operators reach for first when a pod misbehaves; each test drives the real
kubectl binary against the whole simulated cluster (kubelet included).
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable
from typing import Any

import trio

from tests.kubesim.conftest import build_pod
from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_kubectl import KUBECTL, kubectl
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


def terminated(pod: Obj | None) -> bool:
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
    return "terminated" in statuses[0].get("state", {})


async def test_logs_plain_tail_timestamps_and_errors(kubesim: KubeSim, tmp_path: Any) -> None:
    await create_pod(kubesim, "done", command="echo one; echo two; printf 'three\\nfour'")
    await create_pod(kubesim, "err", command="echo oops >&2")
    await create_pod(kubesim, "pending", image="acme/absent:2", imagePullPolicy="Never")
    await wait_stored(kubesim, "done", terminated)
    await wait_stored(kubesim, "err", terminated)
    await wait_stored(kubesim, "pending", lambda p: waiting_reason(p) == "ErrImageNeverPull")
    results: dict[str, Any] = {}

    async def run(key: str, *args: str) -> None:
        results[key] = await kubectl(kubesim, tmp_path, "logs", *args)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "plain", "done")
        nursery.start_soon(run, "stderr", "err")
        nursery.start_soon(run, "tail", "done", "--tail=2")
        nursery.start_soon(run, "limit", "pod/done", "--limit-bytes=6")
        nursery.start_soon(run, "stamped", "done", "--timestamps", "--tail=1")
        nursery.start_soon(run, "previous", "done", "--previous")
        nursery.start_soon(run, "waiting", "pending")
        nursery.start_soon(run, "missing", "nope")
    assert results["plain"].stdout == b"one\ntwo\nthree\nfour", results["plain"].stderr
    assert results["stderr"].stdout == b"oops\n"
    assert results["tail"].stdout == b"three\nfour"
    assert results["limit"].stdout == b"one\ntw"
    stamp, text = results["stamped"].stdout.split(b" ", 1)
    assert re.fullmatch(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", stamp) and text == b"four"
    assert results["previous"].returncode == 1
    assert results["previous"].stderr == (
        b'Error from server (BadRequest): previous terminated container "app" in pod "done" '
        b"not found\n"
    )
    assert results["waiting"].stderr == (
        b'Error from server (BadRequest): container "app" in pod "pending" is waiting to start: '
        b"ErrImageNeverPull\n"
    )
    assert (
        results["missing"].stderr
        == b'error: error from server (NotFound): pods "nope" not found in namespace "runnerd"\n'
    )


async def test_logs_follow_streams_until_the_container_ends(
    kubesim: KubeSim, tmp_path: Any
) -> None:
    # The container prints, then waits for a file the test creates once kubectl has
    # shown the first line: the second line can only arrive through the open stream.
    gate = tmp_path / "go"
    await create_pod(
        kubesim, "chatty", command=f"echo one; until [ -e {gate} ]; do sleep 0.02; done; echo two"
    )
    await wait_stored(
        kubesim, "chatty", lambda p: p is not None and p["status"]["phase"] == "Running"
    )
    kubeconfig = kubesim.write_kubeconfig(tmp_path / "kubeconfig")
    cmd = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            run = functools.partial(
                trio.run_process, [*cmd, "logs", "-f", "chatty"], stdout=subprocess.PIPE
            )
            proc: trio.Process = await nursery.start(run)
            assert proc.stdout is not None
            seen = b""
            while b"one\n" not in seen:
                seen += await proc.stdout.receive_some(1024)
            gate.touch()
            while chunk := await proc.stdout.receive_some(1024):
                seen += chunk
    assert seen == b"one\ntwo\n"


def event_rows(text: bytes) -> list[list[str]]:
    """`kubectl get events` rows as [type, reason, object, message] (LAST SEEN dropped)."""
    rows = []
    for line in text.decode().splitlines()[1:]:
        _age, type_, reason, obj, message = line.split(None, 4)
        rows.append([type_, reason, obj, message])
    return rows


async def test_get_events_and_describe_show_what_the_kubelet_did(
    kubesim: KubeSim, tmp_path: Any
) -> None:
    assert kubesim.kubelet is not None
    kubesim.kubelet.image_pull_backoff_s = 0.05
    await create_pod(kubesim, "ok", command="echo hi")
    await create_pod(kubesim, "bad", image="acme/missing:1")
    await wait_stored(kubesim, "ok", terminated)
    for reason in ("ImagePullBackOff", "ErrImagePull", "ImagePullBackOff"):  # pulled twice
        await wait_stored(kubesim, "bad", lambda p, r=reason: waiting_reason(p) == r)
    results: dict[str, Any] = {}

    async def run(key: str, *args: str) -> None:
        results[key] = await kubectl(kubesim, tmp_path, *args)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            run, "events", "get", "events", "--field-selector=involvedObject.name=ok"
        )
        nursery.start_soon(run, "describe", "describe", "pod", "bad")
    rows = event_rows(results["events"].stdout)
    assert [row[:3] for row in rows] == [
        ["Normal", reason, "pod/ok"]
        for reason in ("Scheduled", "Pulling", "Pulled", "Created", "Started")
    ], results["events"].stderr
    assert [row[3] for row in rows[:2] + rows[3:]] == [
        "Successfully assigned runnerd/ok to kubesim-node",
        'Pulling image "busybox:1.36"',
        "Created container: app",
        "Started container app",
    ]
    assert re.fullmatch(
        r'Successfully pulled image "busybox:1\.36" in (\S+) \(\1 including waiting\)\. '
        r"Image size: \d+ bytes\.",
        rows[2][3],
    )
    describe = results["describe"].stdout.decode()
    events = describe.split("\nEvents:\n", 1)[1].splitlines()
    assert events[0].split() == ["Type", "Reason", "Age", "From", "Message"]
    table = [line.split(None, 1)[1] for line in events[2:]]
    assert (
        table[0].startswith("Scheduled ") and "default-scheduler  Successfully assigned" in table[0]
    )
    pulls = [line for line in table if line.startswith("Pulling ")]
    assert len(pulls) == 1 and re.search(r"\(x[2-9] over", pulls[0])  # aggregated, counted
    assert any(
        line.startswith("Failed ")
        and "kubelet" in line
        and line.endswith("Error: ImagePullBackOff")
        for line in table
    )
    assert any(line.startswith("BackOff ") for line in table)
