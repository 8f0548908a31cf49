"""What a session reaches of the network, through the real daemon, as an
attacker inside it would try: runnerd's TCP listener, a service the test
opens on the host's loopback, the host's loopback traffic, and slirp4netns's
gateway (which maps to the host's loopback unless told not to). Per
`[local] network` mode; the declared-port side (published on the host's
loopback, reported `reachable`) is here too.

Nothing here sends a packet off the machine: the only addresses dialled are
127.0.0.1 and slirp4netns's gateway 10.0.2.2, which slirp4netns answers
itself (it would map it to the host's 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.e2e.contract_client import SSE_TIMEOUT
from tests.e2e.edge import tcp_daemon
from tests.harness import (
    SESSION_PYTHON,
    Daemon,
    iter_sse,
    open_ws,
    read_pty_until,
    session_body,
    start_daemon,
)

# CI installs slirp4netns (.ci/run): there, this never skips.
needs_slirp = pytest.mark.skipif(
    shutil.which("slirp4netns") is None and not os.environ.get("CI"),
    reason="slirp4netns is not installed (apt-get install slirp4netns); CI installs it",
)

# Prints `name=open …` / `name=refused …` per probe, what the namespace has
# (interfaces, a default route, whether runnerd's port is listening in
# it), then `done`.
ATTACKER = """\
import os, socket

def connect(host, port):
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(b"GET /v1/sessions HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n")
            return "open " + repr(s.recv(60))
    except OSError as exc:
        return "refused " + (exc.strerror or type(exc).__name__)

api, service = int(os.environ["API_PORT"]), int(os.environ["SERVICE_PORT"])
print("api=" + connect("127.0.0.1", api))
print("service=" + connect("127.0.0.1", service))
print("gateway=" + connect("10.0.2.2", service))
rows = [line.split() for line in open("/proc/net/tcp").readlines()[1:]]
listening = {int(row[1].split(":")[1], 16) for row in rows if row[3] == "0A"}
print("sees-api=" + str(api in listening))
print("interfaces=" + ",".join(sorted(name for _, name in socket.if_nameindex())))
routes = [line.split() for line in open("/proc/net/route").readlines()[1:]]
print("default-route=" + ",".join(r[0] for r in routes if r[1] == "00000000"))
print("done")
"""


@contextlib.asynccontextmanager
async def host_service() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP service on the host's loopback; yields its port and what each
    connection to it sent (so a connection that got through is seen)."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    received: list[bytes] = []

    async def serve(stream: trio.SocketStream) -> None:
        async with stream:
            with trio.move_on_after(5):
                received.append(await stream.receive_some(4096))

    async with listener, trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, serve, [listener])
        yield listener.socket.getsockname()[1], received
        nursery.cancel_scope.cancel()


async def run_attacker(daemon: Daemon, api_port: int, service_port: int) -> dict[str, str]:
    """Start the attacker session and return its `name=value` report."""
    env = {"API_PORT": str(api_port), "SERVICE_PORT": str(service_port)}
    body = session_body(ATTACKER, image="python", entry="main.py", env=env)
    async with daemon.client() as client:
        response = await client.post("/v1/sessions", json=body)
        assert response.status_code == 201, response.text
        session_id = response.json()["sessionId"]
        output = await read_pty_until(daemon.socket_path, session_id, rb"done", timeout_s=30)
        await client.delete(f"/v1/sessions/{session_id}")
    text = output.decode(errors="replace").replace("\r\n", "\n")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


async def description(daemon: Daemon) -> str:
    async with daemon.client() as client:
        document: dict[str, Any] = (await client.get("/v1/capabilities")).json()
    return str(document["description"])


@needs_slirp
async def test_an_isolated_session_reaches_neither_runnerd_nor_the_hosts_loopback(
    tmp_path: Path,
) -> None:
    with trio.fail_after(60):
        async with tcp_daemon(tmp_path) as (daemon, api_port), host_service() as (port, got):
            report = await run_attacker(daemon, api_port, port)
            assert "share the host's network" not in await description(daemon)
    assert report["api"].startswith("refused"), report
    assert report["service"].startswith("refused"), report
    assert not report["gateway"].startswith("open"), report  # --disable-host-loopback
    assert got == [], "a connection from inside the session reached the host's service"
    assert report["sees-api"] == "False", report
    # With slirp4netns: its interface and a default route (outbound).
    assert report["interfaces"] == "lo,tap0", report
    assert report["default-route"] == "tap0", report
    assert "outbound through" in daemon.stderr_text()


async def test_network_none_leaves_a_session_its_loopback_only(tmp_path: Path) -> None:
    overrides = {"local": {"network": "none"}}
    with trio.fail_after(60):
        async with tcp_daemon(tmp_path, overrides) as (daemon, api), host_service() as (port, got):
            report = await run_attacker(daemon, api, port)
    assert report["interfaces"] == "lo", report
    assert report["default-route"] == "", report
    assert report["api"].startswith("refused") and report["service"].startswith("refused")
    assert got == []


async def test_without_slirp4netns_sessions_stay_isolated_and_one_line_says_how_to_get_outbound(
    tmp_path: Path,
) -> None:
    # The daemon's PATH finds no slirp4netns (the runtimes are absolute paths).
    with trio.fail_after(60):
        async with tcp_daemon(tmp_path, {}, env={"PATH": str(tmp_path)}) as (daemon, api):
            async with host_service() as (port, got):
                report = await run_attacker(daemon, api, port)
    assert report["api"].startswith("refused") and report["service"].startswith("refused")
    assert got == []
    assert report["interfaces"] == "lo", report
    lines = [line for line in daemon.stderr_text().splitlines() if "slirp4netns" in line]
    assert len(lines) == 1, lines
    assert "no outbound network" in lines[0] and "apt-get install slirp4netns" in lines[0]


async def test_network_host_is_announced_as_unisolated(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with tcp_daemon(tmp_path, {"local": {"network": "host"}}) as (daemon, api):
            async with host_service() as (port, got):
                said = await description(daemon)
                report = await run_attacker(daemon, api, port)
    assert 'local.network = "host"' in said and "reach runnerd's TCP listener" in said
    assert re.search(r"WARNING.*share the host's network", daemon.stderr_text())
    # Today's behaviour, as announced: the workload reaches both.
    assert report["api"].startswith("open") and report["service"].startswith("open"), report
    assert len(got) == 1


async def test_process_group_containment_announces_the_hosts_network(tmp_path: Path) -> None:
    overrides = {"local": {"containment": "process-group"}}
    with trio.fail_after(60):
        async with tcp_daemon(tmp_path, overrides) as (daemon, _):
            said = await description(daemon)
    assert "share the host's network (no network namespace: sessions have no PID" in said


SNIFFER = """\
import select, socket, sys
try:
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
except OSError as exc:
    print("raw=refused", exc.strerror)
    print("done")
    sys.exit()
# A control: the sniffer does see this namespace's own loopback traffic.
server = socket.create_server(("127.0.0.1", 0))
with socket.create_connection(server.getsockname()) as c:
    c.sendall(b"inside-marker-9c1e")
print("sniffing", flush=True)
seen = {"inside": 0, "host": 0}
while True:
    ready, _, _ = select.select([raw, sys.stdin], [], [])
    if raw in ready:  # drain what was captured before reading stdin
        packet = raw.recv(65535)
        seen["inside"] += b"inside-marker-9c1e" in packet
        seen["host"] += b"host-marker-4d2b" in packet
        continue
    sys.stdin.readline()
    break
print("seen-inside=%d" % seen["inside"])
print("seen-host=%d" % seen["host"])
print("done")
"""


async def test_a_session_sees_no_host_loopback_traffic(runnerd: Daemon) -> None:
    body = session_body(SNIFFER, image="python", entry="main.py")
    with trio.fail_after(60):
        async with runnerd.client() as client, host_service() as (port, got):
            response = await client.post("/v1/sessions", json=body)
            assert response.status_code == 201, response.text
            session_id = response.json()["sessionId"]
            output = await read_pty_until(runnerd.socket_path, session_id, rb"sniffing|done")
            if b"sniffing" in output:
                for _ in range(5):  # host loopback traffic, while it sniffs
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    async with stream:
                        await stream.send_all(b"host-marker-4d2b")
                async with open_ws(runnerd.socket_path, f"/v1/sessions/{session_id}/io") as ws:
                    await ws.send_message(b"stop\n")
                output = await read_pty_until(runnerd.socket_path, session_id, rb"done")
            await client.delete(f"/v1/sessions/{session_id}")
    text = output.decode(errors="replace")
    if "raw=refused" in text:
        return  # no raw sockets at all (the daemon is not root): nothing to sniff with
    assert re.search(r"seen-inside=[1-9]", text), text
    assert "seen-host=0" in text, text
    assert len(got) == 5


HTTP_SERVER = """\
import functools, http.server, os
with open("hello.txt", "w") as f:
    f.write("hello from inside")
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=".")
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), handler).serve_forever()
"""


async def test_a_declared_port_is_published_on_the_hosts_loopback_and_reachable(
    runnerd: Daemon,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    body = session_body(HTTP_SERVER, image="python", entry="main.py", env={"PORT": str(port)})
    body["ports"] = [{"port": port, "protocol": "tcp"}]
    with trio.fail_after(60):
        async with runnerd.client() as client:
            response = await client.post("/v1/sessions", json=body)
            assert response.status_code == 201, response.text
            session_id = response.json()["sessionId"]
            states = []
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
            ) as stream:
                async with contextlib.aclosing(iter_sse(stream)) as events:
                    async for frame in events:
                        if frame.event == "reachability":
                            states.append(frame.data["state"])
                            if frame.data["state"] == "reachable":
                                break
            async with httpx.AsyncClient(trust_env=False) as host:
                fetched = await host.get(f"http://127.0.0.1:{port}/hello.txt")
            await client.delete(f"/v1/sessions/{session_id}")
    assert states[0] == "checking" and states[-1] == "reachable"
    assert fetched.status_code == 200 and fetched.text == "hello from inside"


DEBUG_SERVER = """\
import http.server, json, sys, time
port = int(sys.argv[sys.argv.index("--inspect-port") + 1])

class Events(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"kind": "event", "name": "boot"}\\n\\n')
        self.wfile.flush()
        time.sleep(1000)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", port), Events).serve_forever()
"""


async def test_inspect_url_and_the_debug_relay_work_through_the_published_port(
    tmp_path: Path,
) -> None:
    runtime = {
        "command": [SESSION_PYTHON, "-u", "{entry}"],
        "inspect_args": ["--inspect-port", "{inspect_port}"],
    }
    overrides = {
        "local": {"runtimes": {"debuggable": runtime}},
        "runner": {"default_image": "debuggable"},
    }
    body = session_body(DEBUG_SERVER, image="debuggable", entry="main.py")
    body["inspect"] = True
    with trio.fail_after(60):
        async with start_daemon(tmp_path, overrides) as daemon, daemon.client() as client:
            response = await client.post("/v1/sessions", json=body)
            assert response.status_code == 201, response.text
            session_id = response.json()["sessionId"]
            url, relayed = None, None
            async with client.stream(
                "GET", f"/v1/sessions/{session_id}/events", timeout=SSE_TIMEOUT
            ) as stream:
                async with contextlib.aclosing(iter_sse(stream)) as events:
                    async for frame in events:
                        data = frame.data if isinstance(frame.data, dict) else {}
                        url = data.get("status", {}).get("inspectUrl", url)
                        if data.get("type") == "debug":
                            relayed = data["frame"]
                            break
            assert url is not None and url.startswith("http://127.0.0.1:")
            # The editor's way: the inspect URL itself, from the host.
            async with httpx.AsyncClient(trust_env=False, timeout=SSE_TIMEOUT) as editor:
                async with editor.stream("GET", f"{url}/events") as direct:
                    first = await direct.aiter_lines().__anext__()
            await client.delete(f"/v1/sessions/{session_id}")
    assert relayed == {"kind": "event", "name": "boot"}
    assert first == 'data: {"kind": "event", "name": "boot"}'
