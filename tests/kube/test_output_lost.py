"""Output the Kubernetes backend cannot recover, through a real daemon: the
attach drops while the pod keeps writing and `pods/log` is denied, so the
lines written meanwhile are nowhere runnerd can read them. An `/io` client
gets `{"type":"gap","reason":"output_lost"}` where they are missing, live
and on every replay from before that place, and `runnerd logs` says so.
A detach-restart keeps the gap in its place; the adopted session has no
log to backfill from, so a drop there is a gap too."""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import jsonschema
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from runnerd.client.pty_channel import LOST_NOTICE
from runnerd.kube.terminal import DROPPED_LINE, LOST_LINE
from tests.cli.helpers import cli
from tests.e2e.contract_client import wait_terminal
from tests.harness import open_ws
from tests.kube.daemon import kube_daemon, start_telo, wait_no_pods
from tests.kubesim.kubelet_logs import ContainerLog
from tests.kubesim.server import KubeSim

TIMEOUT_S = 30.0
LINES = 8
# A line every 0.5 s, then input echoed until `quit`.
TICKING = (
    "print ready\n"
    + "".join(f"sleep 0.5\nprint line {n}\n" for n in range(1, LINES + 1))
    + "echo got:\n"
)
LOST = {"type": "gap", "reason": "output_lost"}


def numbered(output: bytes) -> list[int]:
    return [int(n) for n in re.findall(rb"line (\d+)\r?\n", output)]


@dataclass
class Channel:
    """Every message of one `/io` connection, in the order it came."""

    messages: list[dict[str, object] | tuple[int, bytes]] = field(default_factory=list)
    closed: bool = False

    def output(self, messages: list[dict[str, object] | tuple[int, bytes]] | None = None) -> bytes:
        return b"".join(m[1] for m in (messages or self.messages) if isinstance(m, tuple))

    def split_at_gap(self) -> tuple[list[int], list[int]]:
        """The numbered lines before and after the one `output_lost` frame."""
        (at,) = [i for i, m in enumerate(self.messages) if m == LOST]
        before, after = self.messages[:at], self.messages[at + 1 :]
        return numbered(self.output(before)), numbered(self.output(after))

    def seq_before_gap(self) -> int:
        at = self.messages.index(LOST)
        return max(m[0] for m in self.messages[:at] if isinstance(m, tuple))


async def read(ws: WebSocketConnection, channel: Channel, until: bytes | None = None) -> None:
    """Read until `until` is in the output, or (None) until the server closes."""
    with trio.fail_after(TIMEOUT_S):
        while until is None or until not in channel.output():
            try:
                message = await ws.get_message()
            except ConnectionClosed:
                assert until is None, f"closed before {until!r}: {channel.messages!r}"
                channel.closed = True
                return
            if isinstance(message, str):
                channel.messages.append(json.loads(message))
            else:
                channel.messages.append((int.from_bytes(message[:4], "big"), message[4:]))


def container_log(sim: KubeSim) -> ContainerLog:
    """The session container's output, as the cluster's kubelet holds it."""
    assert sim.kubelet is not None
    (pod,) = sim.store.list("pods", "runnerd")
    log = sim.kubelet.container_log(pod["metadata"]["uid"], "session")
    assert log is not None
    return log


def lines_in(log: ContainerLog) -> int:
    return len(numbered(b"".join(line.text for line in log.lines)))


async def lose_a_line(sim: KubeSim) -> int:
    """Drop the attach with `pods/log` denied and re-attaching refused, until
    the container has written a line after the drop; allow attaching again.
    Returns that line's number: it reached no attach and cannot be read back."""
    sim.faults.deny("get", "pods/log")
    sim.faults.deny("create", "pods/attach")
    assert await sim.faults.drop_attaches() == 1
    log = container_log(sim)
    written = lines_in(log)  # every later line is written unattached
    with trio.fail_after(TIMEOUT_S):
        while lines_in(log) <= written:
            await log.changed()
    sim.faults.allow("create", "pods/attach")
    return written + 1


async def assert_documented(client: httpx.AsyncClient, channel: Channel) -> None:
    """Every text frame as `/v1/openapi.json` describes `/io`'s (`x-runnerd-ws-text`)."""
    doc = (await client.get("/v1/openapi.json")).json()
    schema = doc["paths"]["/v1/sessions/{id}/io"]["get"]["responses"]["101"]["x-runnerd-ws-text"]
    validator = jsonschema.Draft202012Validator(
        {"components": doc["components"], "allOf": [schema]}
    )
    for message in channel.messages:
        if isinstance(message, dict):
            assert not list(validator.iter_errors(message)), message


async def test_output_lost_in_an_attach_drop_is_a_gap_frame_in_its_place(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as daemon, daemon.client() as client:
        session_id = await start_telo(client, TICKING)
        path = f"/v1/sessions/{session_id}/io"
        live = Channel()
        async with open_ws(daemon.socket_path, path) as ws:
            await read(ws, live, until=b"ready")
            await kubesim.stats.wait_until(lambda stats: stats.attaches_open == 1)
            lost_line = await lose_a_line(kubesim)
            await read(ws, live, until=LOST_LINE)
            await read(ws, live, until=f"line {LINES}\r\n".encode())
            await ws.send_message(b"after\n")  # the terminal works through the new attach
            await read(ws, live, until=b"got:after")
            await ws.send_message(b"quit\n")
            await read(ws, live)
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 0}

        # One gap frame, where the lost line would have been; seqs stay a
        # count of chunks (the frame takes none).
        before, after = live.split_at_gap()
        assert lost_line not in before + after, live.messages
        assert all(n < lost_line for n in before) and all(n > lost_line for n in after)
        assert after[-1] == LINES
        at = live.messages.index(LOST)
        assert live.output(live.messages[at + 1 :]).startswith(LOST_LINE)  # for a human
        seqs = [m[0] for m in live.messages if isinstance(m, tuple)]
        assert seqs == list(range(1, len(seqs) + 1))
        await assert_documented(client, live)

        # After the fact: a replay from the start, and from the chunk right
        # before the gap, get it in the same place; one from past it does not.
        place = live.seq_before_gap()
        for last_seq in (0, place):
            replay = Channel()
            async with open_ws(daemon.socket_path, f"{path}?lastSeq={last_seq}") as ws:
                await read(ws, replay)
            assert replay.messages[0] == {"type": "seq", "seq": last_seq}
            expected = [m for m in live.messages if not isinstance(m, tuple) or m[0] > last_seq]
            assert replay.messages[1:] == [m for m in expected if m != {"type": "seq", "seq": 0}]
        past = Channel()
        async with open_ws(daemon.socket_path, f"{path}?lastSeq={place + 1}") as ws:
            await read(ws, past)
        assert LOST not in past.messages

        # The CLI says it, in its place among the output.
        logs = await cli(daemon, "logs", session_id)
        assert logs.returncode == 0, logs.stderr
        assert logs.stderr.decode().count(LOST_NOTICE) == 1, logs.stderr
        await wait_no_pods(kubesim)


async def test_a_gap_survives_a_detach_restart_and_an_adopted_sessions_drop_is_one(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    async with kube_daemon(kubesim, tmp_path) as first, first.client() as client:
        session_id = await start_telo(client, "print ready\necho got:\n")
        path = f"/v1/sessions/{session_id}/io"
        before = Channel()
        async with open_ws(first.socket_path, path) as ws:
            await read(ws, before, until=b"ready")
            await kubesim.stats.wait_until(lambda stats: stats.attaches_open == 1)
            kubesim.faults.deny("get", "pods/log")  # the drop cannot be backfilled
            assert await kubesim.faults.drop_attaches() == 1
            await read(ws, before, until=LOST_LINE)
        assert LOST in before.messages
        assert await first.stop(signal.SIGUSR2) == 75
    kubesim.faults.allow("get", "pods/log")
    async with kube_daemon(kubesim, tmp_path) as second, second.client() as client:
        # The saved replay has the gap in its place.
        replay = Channel()
        async with open_ws(second.socket_path, path) as ws:
            await read(ws, replay, until=LOST_LINE)
            assert replay.messages == before.messages
            # Adopted: its log is what the first daemon delivered, so a drop
            # now cannot be backfilled, and is a gap where it happened.
            await kubesim.stats.wait_until(lambda stats: stats.attaches_open == 1)
            total = kubesim.stats.attaches_total
            assert await kubesim.faults.drop_attaches() == 1
            await read(ws, replay, until=DROPPED_LINE)
            at = len(replay.messages) - replay.messages[::-1].index(LOST)
            assert replay.output(replay.messages[at:]) == DROPPED_LINE
            await kubesim.stats.wait_until(
                lambda s: s.attaches_total > total and s.attaches_open == 1
            )
            await ws.send_message(b"after\n")
            await read(ws, replay, until=b"got:after")
            await ws.send_message(b"quit\n")
            await read(ws, replay)
        assert replay.messages.count(LOST) == 2
        assert await wait_terminal(client, session_id) == {"kind": "exited", "code": 0}
        await wait_no_pods(kubesim)
