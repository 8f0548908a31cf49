"""The simulated kubelet through the apiserver: pods run as real processes, statuses read as real.

Every pod is created over HTTPS with httpx and followed with a real watch; the
containers are real host processes (the stand-in kernel, the host shell).
"""

from __future__ import annotations

import gzip
import io
import json
import re
import socket
import tarfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.kubesim.conftest import build_client
from tests.kubesim.images import ImageMap, build_app_image
from tests.kubesim.server import KubeSim, open_kubesim

Obj = dict[str, Any]
NS = "runnerd"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


# ---- helpers (shared with test_attach.py) ---------------------------------------------


def build_kernel_pod(name: str, entry: str, **container: Any) -> Obj:
    """A session-like pod: one `telorun/node` container running `telo run ENTRY`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "session",
                    "image": "telorun/node:0.30.1-slim",
                    "command": ["telo", "run", entry],
                    **container,
                }
            ],
        },
    }


async def create_pod(kube: httpx.AsyncClient, pod: Obj) -> Obj:
    resp = await kube.post(f"/api/v1/namespaces/{NS}/pods", json=pod)
    assert resp.status_code == 201, resp.text
    return resp.json()


async def wait_pod(
    kube: httpx.AsyncClient, name: str, until: Callable[[str, Obj], bool], timeout_s: float = 15
) -> Obj:
    """Watch the pod (ADDED for its current state first) until `until(type, pod)` holds."""
    params = {"watch": "1", "fieldSelector": f"metadata.name={name}"}
    with trio.fail_after(timeout_s):
        async with kube.stream("GET", f"/api/v1/namespaces/{NS}/pods", params=params) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line:
                    event = json.loads(line)
                    if until(event["type"], event["object"]):
                        return event["object"]
    raise AssertionError(f"watch on pod {name} ended")


def phase_is(*phases: str) -> Callable[[str, Obj], bool]:
    return lambda _type, pod: pod.get("status", {}).get("phase") in phases


def waiting_reason(pod: Obj, *, init: bool = False) -> str | None:
    key = "initContainerStatuses" if init else "containerStatuses"
    statuses = pod.get("status", {}).get(key) or [{}]
    return statuses[0].get("state", {}).get("waiting", {}).get("reason")


async def wait_listening(ip: str, port: int, timeout_s: float = 10) -> None:
    """Running is not listening (no readiness probes here): retry until it accepts."""
    with trio.fail_after(timeout_s):
        while True:
            try:
                stream = await trio.open_tcp_stream(ip, port)
            except OSError:
                await trio.sleep(0.02)
            else:
                await stream.aclose()
                return


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def kube(kubesim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the cluster WITH a kubelet (conftest's `kube` has none)."""
    async with build_client(kubesim) as client:
        yield client


# ---- lifecycle --------------------------------------------------------------------------


async def test_kernel_pod_runs_on_its_own_ip_and_reads_as_running(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    port = free_port()
    entry = tmp_path / "serve.telo"
    entry.write_text(f"listen {port} hello from the pod\nwait\n")
    for name in ("a", "b"):
        await create_pod(kube, build_kernel_pod(name, str(entry), stdin=True, tty=True))
    pods = [await wait_pod(kube, n, phase_is("Running")) for n in ("a", "b")]

    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == 2 and all(ip.startswith("127.") for ip in ips)
    status = pods[0]["status"]
    assert pods[0]["spec"]["nodeName"] == "kubesim-node"
    assert status["podIPs"] == [{"ip": status["podIP"]}] and status["hostIP"] == "127.0.0.1"
    assert TS.match(status["startTime"])
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    (session,) = status["containerStatuses"]
    assert session["ready"] is True and session["started"] is True
    assert TS.match(session["state"]["running"]["startedAt"])
    assert re.match(r"^containerd://[0-9a-f]{64}$", session["containerID"])
    assert session["image"] == "docker.io/telorun/node:0.30.1-slim"
    # Each pod's port is reachable on its own address, as on a pod network.
    for ip in ips:
        await wait_listening(ip, port)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://{ip}:{port}/")).text == "hello from the pod"


async def test_pod_exit_code_becomes_terminated_status(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    entry = tmp_path / "fail.telo"
    entry.write_text("print working\nexit 3\n")
    await create_pod(kube, build_kernel_pod("failing", str(entry)))
    pod = await wait_pod(kube, "failing", phase_is("Succeeded", "Failed"))

    assert pod["status"]["phase"] == "Failed"
    (session,) = pod["status"]["containerStatuses"]
    term = session["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")
    assert term["containerID"] == session["containerID"]
    assert TS.match(term["startedAt"]) and TS.match(term["finishedAt"])
    assert session["ready"] is False and session["started"] is False
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ContainersNotReady"
    assert ready["message"] == "containers with unready status: [session]"

    entry.write_text("print done\n")
    await create_pod(kube, build_kernel_pod("passing", str(entry)))
    pod = await wait_pod(kube, "passing", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (0, "Completed")


async def test_kernel_serves_its_inspect_stream_on_the_pod_ip(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    port = free_port()
    entry = tmp_path / "inspect.telo"
    entry.write_text('print hello\nevent session.ready {"ok": true}\nwait\n')
    pod = build_kernel_pod("insp", str(entry), stdin=True, tty=True)
    pod["spec"]["containers"][0]["command"] += ["--inspect", f"0.0.0.0:{port}", "--no-open"]
    await create_pod(kube, pod)
    ip = (await wait_pod(kube, "insp", phase_is("Running")))["status"]["podIP"]
    await wait_listening(ip, port)

    frames: list[Obj] = []
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(5, read=None)) as http,
        http.stream("GET", f"http://{ip}:{port}/events") as resp,
    ):
        assert resp.headers["content-type"] == "text/event-stream"
        with trio.fail_after(10):
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    frames.append(json.loads(line[6:]))
                if frames and frames[-1].get("event") == "session.ready":
                    break
    assert frames[0]["kind"] == "event" and frames[0]["event"] == "kernel.started"
    assert {"kind": "log", "stream": "stdout", "text": "hello"} in frames
    assert frames[-1] == {"kind": "event", "event": "session.ready", "data": {"ok": True}}
    # 0.0.0.0 means the pod's own address, not every address of the host.
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", port)


def build_bundle(files: dict[str, str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


async def serve_once(body: bytes, seen: list[str], *, task_status: Any) -> None:
    """A tiny real HTTP server: answers every GET with `body`, recording request paths."""

    async def answer(stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            head += chunk
        seen.append(head.split(b" ")[1].decode())
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await stream.aclose()

    await trio.serve_tcp(answer, 0, host="127.0.0.1", task_status=task_status)


def build_session_pod(name: str, bundle_url: str, *, init_image: str = "busybox:1.36") -> Obj:
    """The shape runnerd's Kubernetes backend creates (seed 000: pod-spec.ts buildSessionPod)."""
    mounts = [
        {"name": "app", "mountPath": "/app"},
        {"name": "telo-cache", "mountPath": "/telo-cache"},
        {"name": "work", "mountPath": "/work"},
        {"name": "home", "mountPath": "/home/telo"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 600,
            "automountServiceAccountToken": False,
            "initContainers": [
                {
                    "name": "body-fetch",
                    "image": init_image,
                    "command": ["sh", "-c"],
                    "args": [f"wget -qO- '{bundle_url}' | tar -xz -C /app"],
                    "volumeMounts": [{"name": "app", "mountPath": "/app"}],
                    "securityContext": {"readOnlyRootFilesystem": True},
                }
            ],
            "containers": [
                {
                    "name": "session",
                    "image": "telorun/node:0.30.1-slim",
                    "workingDir": "/work",
                    "command": ["telo", "run", "/app/telo.yaml", "--inspect", "0.0.0.0:9230"],
                    "env": [
                        {"name": "TELO_CACHE_DIR", "value": "/telo-cache"},
                        {"name": "HOME", "value": "/home/telo"},
                        {"name": "API_TOKEN", "value": "tok"},
                    ],
                    "stdin": True,
                    "tty": True,
                    "securityContext": {"readOnlyRootFilesystem": True},
                    "volumeMounts": mounts,
                }
            ],
            "volumes": [{"name": v["name"], "emptyDir": {}} for v in mounts],
        },
    }


async def test_init_container_fetches_the_bundle_over_http_and_the_kernel_runs_it(
    kubesim: KubeSim, kube: httpx.AsyncClient, nursery: trio.Nursery
) -> None:
    script = "write out.txt $POD_IP $TELO_CACHE_DIR $API_TOKEN\nwrite $HOME/marker ran\n"
    seen: list[str] = []
    (listener,) = await nursery.start(serve_once, build_bundle({"telo.yaml": script}), seen)
    port = listener.socket.getsockname()[1]
    url = f"http://127.0.0.1:{port}/internal/bundles/abc123?token=t"
    created = await create_pod(kube, build_session_pod("sess", url))
    pending = await wait_pod(kube, "sess", lambda _t, p: bool(p.get("status", {}).get("podIP")))
    assert pending["status"]["phase"] in ("Pending", "Running", "Succeeded")

    pod = await wait_pod(kube, "sess", phase_is("Succeeded", "Failed"))
    assert seen == ["/internal/bundles/abc123?token=t"]
    (fetch,) = pod["status"]["initContainerStatuses"]
    assert fetch["state"]["terminated"]["reason"] == "Completed" and fetch["ready"] is True
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    # Container paths landed in the pod's own emptyDirs on the host: the bundle in
    # /app, the cwd in /work, $HOME in /home/telo; env carries the pod's IP.
    volumes = pod_volumes(kubesim, created)
    assert (volumes / "app" / "telo.yaml").read_text() == script
    env_line = (volumes / "work" / "out.txt").read_text()
    assert env_line == f"{pod['status']['podIP']} {volumes / 'telo-cache'} tok\n"
    assert (volumes / "home" / "marker").read_text() == "ran\n"


def pod_volumes(kubesim: KubeSim, pod: Obj) -> Path:
    return kubesim.kubelet.workdir / "pods" / pod["metadata"]["uid"] / "volumes"


async def test_failing_init_container_fails_the_pod(
    kubesim: KubeSim, kube: httpx.AsyncClient
) -> None:
    pod = build_session_pod("bad-init", "http://127.0.0.1:9/nothing")
    pod["spec"]["initContainers"][0]["args"] = ["echo fetching; exit 7"]
    await create_pod(kube, pod)
    initializing = await wait_pod(kube, "bad-init", lambda _t, p: "podIP" in p.get("status", {}))
    assert waiting_reason(initializing) == "PodInitializing"

    pod = await wait_pod(kube, "bad-init", phase_is("Failed", "Succeeded"))
    assert pod["status"]["phase"] == "Failed"
    term = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (7, "Error")
    assert waiting_reason(pod) == "PodInitializing"
    initialized = next(c for c in pod["status"]["conditions"] if c["type"] == "Initialized")
    assert initialized["status"] == "False"
    assert initialized["message"] == "containers with incomplete status: [body-fetch]"


# ---- image errors -------------------------------------------------------------------------


@pytest.fixture
async def fast_backoff_sim(tmp_path: Path) -> Any:
    async with open_kubesim(tmp_path) as sim:
        sim.kubelet.image_pull_backoff_s = 0.2  # real kubelets start at 10 s
        yield sim


async def test_unknown_image_errs_then_backs_off(fast_backoff_sim: KubeSim) -> None:
    async with build_client(fast_backoff_sim) as kube:
        pod = build_kernel_pod("nope", "/x", image="acme/missing:1")
        await create_pod(kube, pod)
        pulled = await wait_pod(kube, "nope", lambda _t, p: waiting_reason(p) == "ErrImagePull")
        backoff = await wait_pod(
            kube, "nope", lambda _t, p: waiting_reason(p) == "ImagePullBackOff"
        )
    waiting = pulled["status"]["containerStatuses"][0]["state"]["waiting"]
    assert pulled["status"]["phase"] == "Pending"
    assert 'failed to pull and unpack image "docker.io/acme/missing:1"' in waiting["message"]
    message = backoff["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert message.startswith('Back-off pulling image "acme/missing:1"')
    assert backoff["status"]["phase"] == "Pending"


async def test_malformed_and_never_pulled_images(kubesim: KubeSim, kube: httpx.AsyncClient) -> None:
    invalid = build_kernel_pod("invalid", "/x")
    invalid["spec"]["containers"][0]["image"] = "Acme/Tool:1"
    never = build_kernel_pod("never", "/x")
    never["spec"]["containers"][0].update(image="acme/absent:2", imagePullPolicy="Never")
    await create_pod(kube, invalid)
    await create_pod(kube, never)

    pod = await wait_pod(kube, "invalid", lambda _t, p: waiting_reason(p) == "InvalidImageName")
    message = pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert message.startswith('Failed to apply default image tag "Acme/Tool:1"')
    pod = await wait_pod(kube, "never", lambda _t, p: waiting_reason(p) == "ErrImageNeverPull")
    message = pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert message == 'Container image "acme/absent:2" is not present with pull policy of Never'


# ---- deadline, deletion, shutdown ---------------------------------------------------------


async def test_active_deadline_fails_the_pod(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    entry = tmp_path / "forever.telo"
    entry.write_text("wait\n")
    pod = build_kernel_pod("slow", str(entry))
    pod["spec"]["activeDeadlineSeconds"] = 1
    await create_pod(kube, pod)
    # On a loaded machine the 1 s deadline may pass before this watch opens: Running is
    # not required to be seen; exit 143 below proves the container ran and was killed.
    await wait_pod(kube, "slow", phase_is("Running", "Failed"))

    failed = await wait_pod(kube, "slow", phase_is("Failed"))
    assert failed["status"]["reason"] == "DeadlineExceeded"
    assert failed["status"]["message"] == (
        "Pod was active on the node longer than the specified deadline"
    )
    killed = await wait_pod(
        kube, "slow", lambda _t, p: "terminated" in p["status"]["containerStatuses"][0]["state"]
    )
    assert killed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    assert killed["status"]["phase"] == "Failed"


async def test_delete_kills_the_processes_then_removes_the_pod(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    port = free_port()
    entry = tmp_path / "serve.telo"
    entry.write_text(f"listen {port}\nwait\n")
    created = await create_pod(kube, build_kernel_pod("doomed", str(entry)))
    ip = (await wait_pod(kube, "doomed", phase_is("Running")))["status"]["podIP"]
    await wait_listening(ip, port)
    pod_dir = pod_volumes(kubesim, created).parent
    assert pod_dir.is_dir()

    events: list[str] = []
    listed = trio.Event()

    def deleted(kind: str, _pod: Obj) -> bool:
        events.append(kind)
        listed.set()
        return kind == "DELETED"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_pod, kube, "doomed", deleted)
        await listed.wait()  # the watch is open: it will see the deletion happen
        resp = await kube.delete(f"/api/v1/namespaces/{NS}/pods/doomed")
        assert resp.status_code == 200
        assert resp.json()["metadata"]["deletionTimestamp"]
    assert events[0] == "ADDED" and events[-1] == "DELETED"
    assert "MODIFIED" in events[1:-1]
    with pytest.raises(OSError):
        await trio.open_tcp_stream(ip, port)
    assert not pod_dir.exists()


async def test_shutdown_kills_every_container_and_removes_its_files(tmp_path: Path) -> None:
    port = free_port()
    entry = tmp_path / "serve.telo"
    entry.write_text(f"listen {port}\nwait\n")
    async with open_kubesim(tmp_path) as sim, build_client(sim) as kube:
        created = await create_pod(kube, build_kernel_pod("left", str(entry)))
        ip = (await wait_pod(kube, "left", phase_is("Running")))["status"]["podIP"]
        await wait_listening(ip, port)
        pod_dir = pod_volumes(sim, created).parent
        assert pod_dir.is_dir()
    with pytest.raises(OSError):
        await trio.open_tcp_stream(ip, port)
    assert not pod_dir.exists()


async def test_app_image_runs_its_own_entrypoint(tmp_path: Path) -> None:
    entry = tmp_path / "app.telo"
    entry.write_text("write ran.txt $HOSTNAME\nexit 5\n")
    images = ImageMap([("acme/tool", build_app_image(entry))])
    async with open_kubesim(tmp_path, images=images) as sim, build_client(sim) as kube:
        pod = build_kernel_pod("app", "/unused")
        del pod["spec"]["containers"][0]["command"]
        pod["spec"]["containers"][0]["image"] = "acme/tool:1"
        await create_pod(kube, pod)
        done = await wait_pod(kube, "app", phase_is("Succeeded", "Failed"))
        workdir = sim.kubelet.workdir / "pods" / done["metadata"]["uid"] / "root"
        assert (workdir / "ran.txt").read_text() == "app\n"
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 5


async def test_simulators_running_at_once_never_share_a_pod_ip(tmp_path: Path) -> None:
    entry = tmp_path / "idle.telo"
    entry.write_text("wait\n")
    ips = []
    async with (
        open_kubesim(tmp_path / "one") as one,
        open_kubesim(tmp_path / "two") as two,
        build_client(one) as kube_one,
        build_client(two) as kube_two,
    ):
        for kube in (kube_one, kube_two):
            await create_pod(kube, build_kernel_pod("same-name", str(entry)))
            pod = await wait_pod(kube, "same-name", phase_is("Running"))
            ips.append(pod["status"]["podIP"])
    assert ips[0] != ips[1]  # both would bind :9230 on it in a session pod
