"""Attaching to a named container (a watch pod's `app-<name>`): a container
without a TTY keeps its stdout and stderr apart, and `terminal.keep_attached`
splices that container's own log ahead of its attach, on real pods the test
cluster's kubelet runs."""

from __future__ import annotations

from pathlib import Path

import trio

from runnerd.kube.attach import AttachEnd, Terminal, run_attach
from runnerd.kube.terminal import Relay, Splice, keep_attached
from tests.kube.helpers import open_client
from tests.kube.test_attach import Screen
from tests.kubesim.conftest import build_client
from tests.kubesim.server import KubeSim
from tests.kubesim.test_kubelet import build_kernel_pod, create_pod, phase_is, wait_pod


async def start_app_pod(
    kubesim: KubeSim, tmp_path: Path, pod: str, script: str, **kw: object
) -> None:
    """A one-container pod whose container is named as a watch pod's app."""
    entry = tmp_path / f"{pod}.telo"
    entry.write_text(script)
    async with build_client(kubesim) as raw:
        spec = build_kernel_pod(pod, str(entry), stdin=True, **kw)
        spec["spec"]["containers"][0]["name"] = "app-web"
        await create_pod(raw, spec)
        await wait_pod(raw, pod, phase_is("Running", "Failed", "Succeeded"))


async def test_a_streams_container_keeps_stdout_and_stderr_apart(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    script = "echo > \nstderr oops\nprint bye\n"
    await start_app_pod(kubesim, tmp_path, "streams", script)
    out, err = Screen(), Screen()
    ends: list[AttachEnd] = []
    async with open_client(kubesim, tmp_path) as client:

        async def run(task_status: trio.TaskStatus[Terminal]) -> None:
            ends.append(
                await run_attach(
                    client,
                    "streams",
                    on_output=out.write,
                    on_stderr=err.write,
                    container="app-web",
                    tty=False,
                    task_status=task_status,
                )
            )

        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                terminal = await nursery.start(run)
                terminal.write(b"hi\n")
                await out.until("> hi")
                terminal.write(b"quit\n")
    assert ends == [AttachEnd.ENDED]
    assert b"oops" in err.data and b"oops" not in out.data
    assert b"bye" in out.data and b"bye" not in err.data


async def test_keep_attached_splices_a_named_containers_log_ahead_of_its_attach(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    # "early" is written before any attach is up: only the app container's
    # own log has it, and it must show exactly once, ahead of the echo.
    script = "print early\necho > \nprint bye\n"
    await start_app_pod(kubesim, tmp_path, "named", script, tty=True)
    screen, lost = Screen(), []
    splice = Splice(screen.write, lambda: lost.append(True))
    relay = Relay()
    relay.write(b"hello\nquit\n")  # held until the first attach is up
    async with open_client(kubesim, tmp_path) as client:
        with trio.fail_after(15):
            delivered = await keep_attached(
                client, "named", relay, splice, screen.write, lambda: True, container="app-web"
            )
    assert delivered
    text = screen.data.decode()
    assert text.count("early") == 1
    assert text.index("early") < text.index("> hello") < text.index("bye")
    assert not lost
