"""A stand-in `telo` kernel for the simulated cluster (stdlib only; run as a program).

Usage, as the session pod runs it:
    telo run ENTRY [--inspect HOST:PORT] [--no-open] [--no-cache-write]

ENTRY is a script of directives, one per line (`#` starts a comment line,
blank lines are skipped); the whole file is checked before anything runs, and
an unknown directive exits 2 naming the file and line. A file with any line
`# kubesim: DIRECTIVE` runs those lines only and ignores the rest, so a real
Telo manifest can carry its simulated behaviour in YAML comments:

    print TEXT        write TEXT and a newline to stdout
    stderr TEXT       write TEXT and a newline to stderr
    env NAME          print `NAME=value` (empty when unset)
    pwd               print the working directory
    size              print the terminal size as `size COLSxROWS`
    echo [PREFIX]     read stdin lines and print PREFIX+line each, until EOF or `quit`
    listen PORT [BODY]  serve HTTP on the pod IP: every GET answers 200 BODY (default `ok`)
    event NAME [JSON] publish `{"kind":"event","event":NAME,"data":JSON}` on the inspect stream
    debug-restart SECONDS  take the debug server down (its clients' streams cut, new
                      connections refused) for SECONDS, then serve it again
    write PATH TEXT   write TEXT and a newline to PATH, both with `$VAR`s expanded
                      (relative paths: the working directory; `$HOME/x`: the home mount)
    sleep SECONDS     pause
    wait              block until a signal ends the process
    exit CODE         exit now with CODE (the end of the script exits 0)

On SIGWINCH it prints `resize COLSxROWS`. `--inspect HOST:PORT` serves the
debug stream at `GET /events` (Server-Sent Events, `data: JSON` frames, every
frame since start replayed to each new client): `{"kind":"event",...}` for
kernel events and directives' `event`, `{"kind":"log","stream":...,"text":...}`
for each line printed. A host of `0.0.0.0` binds the pod's own address
(`$POD_IP`), as each pod has its own network namespace in a real cluster.

The kernel is a host process: an absolute container path written inside a
script is NOT mapped (the kubelet maps argv, env and workingDir only), so
scripts use relative paths or `$VAR`s whose values the kubelet mapped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

USAGE = "usage: telo run ENTRY [--inspect HOST:PORT] [--no-open] [--no-cache-write]"
VERSION = "telo 0.0.0-kubesim"
EMBEDDED = re.compile(r"^\s*#\s*kubesim:\s?(.*)$")  # directives inside a YAML manifest
TEXT_DIRECTIVES = {"print", "stderr", "echo"}
DIRECTIVES = {
    "debug-restart",
    "print",
    "stderr",
    "env",
    "pwd",
    "size",
    "echo",
    "listen",
    "event",
    "write",
    "sleep",
    "wait",
    "exit",
}


class DebugStream:
    """Every frame since start, and the condition live SSE clients wait on."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.changed = threading.Condition()

    def publish(self, frame: dict[str, Any]) -> None:
        with self.changed:
            self.frames.append(frame)
            self.changed.notify_all()

    def after(self, sent: int, timeout_s: float) -> list[dict[str, Any]]:
        """Frames past the first `sent`, waiting up to `timeout_s` for one."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.frames) > sent, timeout=timeout_s)
            return self.frames[sent:]


DEBUG = DebugStream()


def say(text: str, *, stream: str = "stdout") -> None:
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.write(text + "\n")
    out.flush()
    DEBUG.publish({"kind": "log", "stream": stream, "text": text})


def terminal_size() -> str:
    try:
        cols, rows = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return "0x0"
    return f"{cols}x{rows}"


def bind_host(host: str) -> str:
    return os.environ.get("POD_IP", host) if host in ("0.0.0.0", "") else host


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    address_family = socket.AF_INET


def serve(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> _Server:
    server = _Server((bind_host(host), port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Inspector:
    """The debug server (`--inspect`), and the streams it has open, so that
    `debug-restart` can take both down and bring the server back."""

    def __init__(self) -> None:
        self.server: _Server | None = None
        self.streams: set[socket.socket] = set()
        self.lock = threading.Lock()

    def start(self, host: str, port: int) -> None:
        self.server = serve(host, port, EventsHandler)

    def restart(self, down_s: float) -> None:
        if self.server is None:
            raise SystemExit("telo: debug-restart needs --inspect")
        host, port = self.server.server_address[:2]
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            for stream in self.streams:
                try:
                    stream.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        time.sleep(down_s)
        self.start(str(host), int(port))


INSPECTOR = Inspector()


def body_handler(body: bytes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class EventsHandler(BaseHTTPRequestHandler):
    """`GET /events`: the SSE debug stream; anything else is 404."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/events":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        with INSPECTOR.lock:
            INSPECTOR.streams.add(self.connection)
        try:
            while True:
                batch = DEBUG.after(sent, 15)
                sent += len(batch)
                chunk = b"".join(f"data: {json.dumps(f)}\n\n".encode() for f in batch)
                self.wfile.write(chunk or b": heartbeat\n\n")
                self.wfile.flush()
        except OSError:
            return
        finally:
            with INSPECTOR.lock:
                INSPECTOR.streams.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def parse_script(path: Path) -> list[tuple[int, str, str]]:
    """(line number, directive, rest) for each directive; SystemExit(2) on an unknown one."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SystemExit(f"telo: cannot read {path}: {exc.strerror}") from None
    lines = list(enumerate(text.splitlines(), 1))
    embedded = [(n, m.group(1)) for n, raw in lines if (m := EMBEDDED.match(raw))]
    steps = []
    for number, raw in embedded or lines:
        line = raw.lstrip()
        if not line.strip() or line.startswith("#"):
            continue
        verb, _, rest = line.partition(" ")
        verb = verb.strip()
        if verb not in DIRECTIVES:
            print(f"telo: {path}:{number}: unknown directive {verb!r}", file=sys.stderr)
            raise SystemExit(2)
        # Text keeps its trailing spaces (`echo > ` prefixes with "> "); the rest is trimmed.
        steps.append((number, verb, rest if verb in TEXT_DIRECTIVES else rest.strip()))
    return steps


def run_step(verb: str, rest: str) -> None:
    if verb == "print":
        say(rest)
    elif verb == "stderr":
        say(rest, stream="stderr")
    elif verb == "env":
        say(f"{rest}={os.environ.get(rest, '')}")
    elif verb == "pwd":
        say(os.getcwd())
    elif verb == "size":
        say(f"size {terminal_size()}")
    elif verb == "echo":
        for raw in iter(sys.stdin.buffer.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            if line == "quit":
                break
            say(f"{rest}{line}")
    elif verb == "listen":
        port, _, body = rest.partition(" ")
        serve("0.0.0.0", int(port), body_handler((body or "ok").encode()))
    elif verb == "event":
        name, _, data = rest.partition(" ")
        DEBUG.publish({"kind": "event", "event": name, "data": json.loads(data or "null")})
    elif verb == "debug-restart":
        INSPECTOR.restart(float(rest))
    elif verb == "write":
        target, _, text = rest.partition(" ")
        Path(os.path.expandvars(target)).write_text(os.path.expandvars(text) + "\n")
    elif verb == "sleep":
        time.sleep(float(rest))
    elif verb == "wait":
        while True:
            signal.pause()
    elif verb == "exit":
        raise SystemExit(int(rest or "0"))


def parse_args(argv: list[str]) -> tuple[Path, tuple[str, int] | None]:
    if argv[:1] in (["--help"], ["-h"]):
        print(USAGE)
        raise SystemExit(0)
    if argv[:1] == ["--version"]:
        print(VERSION)
        raise SystemExit(0)
    if argv[:1] != ["run"] or len(argv) < 2:
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    entry, inspect, rest = Path(argv[1]), None, iter(argv[2:])
    for arg in rest:
        if arg == "--inspect":
            host, _, port = next(rest, "").rpartition(":")
            if not port.isdigit():
                raise SystemExit("telo: --inspect needs HOST:PORT")
            inspect = (host, int(port))
        elif arg not in ("--no-open", "--no-cache-write"):
            print(f"telo: unknown option {arg!r}\n{USAGE}", file=sys.stderr)
            raise SystemExit(2)
    return entry, inspect


def main(argv: list[str]) -> int:
    entry, inspect = parse_args(argv)
    steps = parse_script(entry)
    # os.write, not say(): a handler re-entering sys.stdout's buffer raises RuntimeError.
    signal.signal(signal.SIGWINCH, lambda *_: os.write(1, f"resize {terminal_size()}\n".encode()))
    if inspect is not None:
        INSPECTOR.start(*inspect)
    DEBUG.publish({"kind": "event", "event": "kernel.started", "data": {"entry": str(entry)}})
    code = 0
    try:
        for _number, verb, rest in steps:
            run_step(verb, rest)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    DEBUG.publish({"kind": "event", "event": "kernel.exited", "data": {"code": code}})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
