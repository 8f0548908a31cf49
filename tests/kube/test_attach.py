"""runnerd.kube.attach against real pods the test cluster's kubelet runs: output,
stdin, resize, the end of the container, v4, drops, and refused attaches as
classified, client-safe errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from runnerd.kube import errors
from runnerd.kube.attach import AttachEnd, Terminal, run_attach
from runnerd.kube.client import KubeClient, open_kube_client
from runnerd.kube.kubeconfig import load_connection
from runnerd.kube.settings import KubeSettings
from tests.kube.helpers import FAST, open_black_hole, open_client
from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim
from tests.kubesim.test_attach import start_kernel_pod
from tests.kubesim.test_kubelet import phase_is, wait_pod

OP = "could not attach to the session terminal"


class Screen:
    """What the terminal showed, with a wake-up on every write."""

    def __init__(self) -> None:
        self.data = b""
        self._lot = trio.lowlevel.ParkingLot()

    def write(self, data: bytes) -> None:
        self.data += data
        self._lot.unpark_all()

    async def until(self, text: str) -> None:
        while text.encode() not in self.data:
            await self._lot.park()


@asynccontextmanager
async def kernel_pod(
    kubesim: KubeSim, tmp_path: Path, name: str, script: str
) -> AsyncIterator[KubeClient]:
    async with build_client(kubesim) as raw:
        await start_kernel_pod(raw, tmp_path, name, script, stdin=True, tty=True)
    async with open_client(kubesim, tmp_path) as client:
        yield client


async def attach(
    client: KubeClient, pod: str, screen: Screen, nursery: trio.Nursery, **kw: Any
) -> tuple[Terminal, list[AttachEnd]]:
    ends: list[AttachEnd] = []

    async def run(task_status: trio.TaskStatus[Terminal]) -> None:
        ends.append(
            await run_attach(client, pod, on_output=screen.write, task_status=task_status, **kw)
        )

    return await nursery.start(run), ends


async def test_attach_bridges_output_stdin_resize_until_the_container_ends(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    screen = Screen()
    async with kernel_pod(kubesim, tmp_path, "tty", "echo > \nprint bye\nexit 3\n") as client:
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                terminal, ends = await attach(client, "tty", screen, nursery)
                assert terminal.protocol == "v5.channel.k8s.io"
                terminal.write(b"hello\n")
                await screen.until("> hello")
                terminal.resize(120, 40)
                await screen.until("resize 120x40")
                terminal.write(b"quit\n")
            assert ends == [AttachEnd.ENDED]
        assert b"bye" in screen.data
        assert kubesim.stats.attaches_by_protocol["v5.channel.k8s.io"] == 1
        terminal.write(b"after the end\n")  # a no-op, never raises


async def test_attach_speaks_v4_when_that_is_what_the_server_takes(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    screen = Screen()
    async with kernel_pod(kubesim, tmp_path, "old", "echo got \n") as client:
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                terminal, ends = await attach(
                    client, "old", screen, nursery, protocols=("v4.channel.k8s.io",)
                )
                assert terminal.protocol == "v4.channel.k8s.io"
                terminal.write(b"still open\n")
                await screen.until("got still open")
                terminal.write(b"quit\n")
        assert ends == [AttachEnd.ENDED]


async def test_a_dropped_attach_is_reported_as_dropped(kubesim: KubeSim, tmp_path: Path) -> None:
    screen = Screen()
    async with kernel_pod(kubesim, tmp_path, "drop", "echo > \n") as client:
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                terminal, ends = await attach(client, "drop", screen, nursery)
                terminal.write(b"one\n")
                await screen.until("> one")
                assert await kubesim.faults.drop_attaches() == 1
            assert ends == [AttachEnd.DROPPED]
            # The pod still runs: a second attach picks the terminal up again.
            async with trio.open_nursery() as nursery:
                terminal, ends = await attach(client, "drop", screen, nursery)
                terminal.write(b"two\n")
                await screen.until("> two")
                terminal.write(b"quit\n")
            assert ends == [AttachEnd.ENDED]


async def test_a_refused_attach_is_a_classified_client_safe_error(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kernel_pod(kubesim, tmp_path, "refused", "wait\n") as client:
        with trio.fail_after(15):
            kubesim.faults.deny("get", "pods/attach")
            with pytest.raises(errors.Forbidden) as rbac:
                await run_attach(client, "refused", on_output=lambda _: None)
            assert str(rbac.value) == (
                f"{OP}: the runner is not permitted to do this (Forbidden, HTTP 403). "
                "The cluster operator must check the runner's RBAC."
            )
            assert kubesim.user not in str(rbac.value)
            kubesim.faults.allow("get", "pods/attach")
            with pytest.raises(errors.NotFound) as missing:
                await run_attach(client, "no-such-pod", on_output=lambda _: None)
            assert str(missing.value) == (
                f"{OP}: the Kubernetes API rejected the request (NotFound, HTTP 404)"
            )
            with pytest.raises(errors.KubeError) as container:
                await run_attach(client, "refused", container="nope", on_output=lambda _: None)
            assert container.value.status == 400
            with pytest.raises(errors.KubeError) as protocol:
                await run_attach(
                    client, "refused", protocols=("channel.k8s.io",), on_output=lambda _: None
                )
            assert protocol.value.status == 403


async def test_attach_to_a_finished_container_fails_on_channel_3(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kernel_pod(kubesim, tmp_path, "done", "exit 0\n") as client:
        async with build_client(kubesim) as raw:
            await wait_pod(raw, "done", phase_is("Succeeded"))
        with trio.fail_after(15), pytest.raises(errors.ServerError) as caught:
            await run_attach(client, "done", on_output=lambda _: None)
        assert str(caught.value) == (
            f"{OP}: the Kubernetes API rejected the request (InternalError, HTTP 500)"
        )
        assert "not found" in str(caught.value.__cause__)  # the kubelet's words, log only


async def test_an_unreachable_apiserver_is_classified(kubesim: KubeSim, tmp_path: Path) -> None:
    async with open_client(kubesim, tmp_path) as client:
        await kubesim.stop()
        with trio.fail_after(15), pytest.raises(errors.Unreachable):
            await run_attach(client, "x", on_output=lambda _: None)
        await kubesim.start()


async def test_a_peer_gone_silent_is_dropped_by_the_heartbeat(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    screen = Screen()
    async with build_client(kubesim) as raw:
        await start_kernel_pod(raw, tmp_path, "hb", "echo > \n", stdin=True, tty=True)
    conn = load_connection(
        KubeSettings(kubeconfig=str(kubesim.write_kubeconfig(tmp_path / "kc"))), {}, tmp_path
    )
    async with (
        open_black_hole(kubesim.port) as hole,
        open_kube_client(
            replace(conn, server=f"https://127.0.0.1:{hole.port}"), policy=FAST
        ) as client,
    ):
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                # A pong may be late on a loaded machine (the cluster runs in
                # this process): 2 s, so only the swallowed ones count.
                terminal, ends = await attach(
                    client, "hb", screen, nursery, ping_interval_s=0.1, pong_timeout_s=2.0
                )
                terminal.write(b"alive\n")
                await screen.until("> alive")  # pongs flow: the attach stays up
                await trio.sleep(0.5)  # five ping rounds answered: still attached
                assert ends == []
                hole.swallow()  # nothing more arrives, and nothing says so
            assert ends == [AttachEnd.DROPPED]


async def test_output_written_before_any_attach_is_in_the_log(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kernel_pod(kubesim, tmp_path, "early", "print first words\nexit 0\n") as client:
        async with build_client(kubesim) as raw:
            await wait_pod(raw, "early", phase_is("Succeeded"))
        log = await client.read_log("early", container="session", operation="read")
        assert b"first words" in log
        with pytest.raises(errors.NotFound):
            await client.read_log("nope", container="session", operation="read")
