"""A stand-in `telo` kernel for the simulated cluster (stdlib only; run as a program).

Usage, as the session pod runs it:
    telo run ENTRY [--watch] [--inspect HOST:PORT] [--no-open] [--no-cache-write]

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
    port PORT [PROTO] declare a port (tcp unless PROTO is udp): announced by
                      `Kernel.PortsResolved` under --watch; nothing at run time

On SIGWINCH it prints `resize COLSxROWS`. `--inspect HOST:PORT` serves the
debug stream at `GET /events` (Server-Sent Events, `data: JSON` frames, every
frame since start replayed to each new client): `{"kind":"event",...}` for
kernel events and directives' `event`, `{"kind":"log","stream":...,"text":...}`
for each line printed. A host of `0.0.0.0` binds the pod's own address
(`$POD_IP`), as each pod has its own network namespace in a real cluster.

`--watch` is `telo run --watch`: the kernel stays up and runs the script
again whenever a file under the entry's directory changes (mtimes and sizes
polled every `kernel_watch.POLL_S`, the change let settle for one more poll;
`node_modules`, `.git` and `.telo` are not watched, and a file the script
itself writes there restarts it like any other change). Each run is a child
process (`--frames-fd`, internal: its frames go to the watcher, which owns
the one debug stream), so a restart ends everything the run started. The
debug stream then carries the real kernel's lifecycle events, with its
shapes (`{"kind":"event","event":NAME,"payload":{...}}`): on each load
`Kernel.PortsResolved {ports:[{port,protocol}]}` (the `port` directives),
`Kernel.Starting {telo: VERSION}` and `Kernel.Started`; when the run ends
by itself `Kernel.Stopped {exitCode}`, when a change stops it `Kernel.Stopped
{exitCode: 0}`; a script that cannot be loaded (unreadable, an unknown
directive) emits no `Kernel.Starting` but `Kernel.RunFailed {phase: "load",
code, message}` (and its message on stderr), and waits for the next change.
The `kernel.started`/`kernel.exited` frames of a plain run are not sent.

When ENTRY is runnerd's workspace application (a Telo manifest whose
`Telo.Application` is named `RunnerdWorkspaceApp`: what a watch pod's
`workspace` container runs), the kernel serves it as `workspace_server.py`
does: the workspace API over `$WORKSPACE_DIR` (see that module).

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

USAGE = "usage: telo run ENTRY [--watch] [--inspect HOST:PORT] [--no-open] [--no-cache-write]"
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
    "port",
}


class DebugStream:
    """Every frame since start, and the condition live SSE clients wait on."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        self.pipe: Any = None  # a watched run's child: its frames go to the watcher

    def publish(self, frame: dict[str, Any]) -> None:
        if self.pipe is not None:
            with self.changed:
                self.pipe.write(json.dumps(frame) + "\n")
                self.pipe.flush()
            return
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


class LoadError(Exception):
    """A script that cannot run: `str()` says why; `exit_code` is a plain run's."""

    def __init__(self, message: str, exit_code: int, code: str) -> None:
        super().__init__(message)
        self.exit_code, self.code = exit_code, code


def parse_script(path: Path) -> list[tuple[int, str, str]]:
    """(line number, directive, rest) for each directive; SystemExit(2) on an unknown one."""
    try:
        return load_script(path)
    except LoadError as exc:
        if exc.exit_code == 1:
            raise SystemExit(str(exc)) from None
        print(exc, file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


def load_script(path: Path) -> list[tuple[int, str, str]]:
    """`parse_script`'s steps, or LoadError."""
    try:
        text = path.read_text()
    except OSError as exc:
        message = f"telo: cannot read {path}: {exc.strerror}"
        raise LoadError(message, 1, "ERR_MANIFEST_NOT_FOUND") from None
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
            message = f"telo: {path}:{number}: unknown directive {verb!r}"
            raise LoadError(message, 2, "ERR_MANIFEST_VALIDATION_FAILED")
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
    # `port` declares; nothing happens at run time.


class Options:
    """`telo run`'s arguments: options may come before or after ENTRY."""

    def __init__(self) -> None:
        self.entry: Path | None = None
        self.inspect: tuple[str, int] | None = None
        self.watch = False
        self.frames_fd: int | None = None


def parse_args(argv: list[str]) -> Options:
    if argv[:1] in (["--help"], ["-h"]):
        print(USAGE)
        raise SystemExit(0)
    if argv[:1] == ["--version"]:
        print(VERSION)
        raise SystemExit(0)
    if argv[:1] != ["run"] or len(argv) < 2:
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    options, rest = Options(), iter(argv[1:])
    for arg in rest:
        if arg == "--inspect":
            host, _, port = next(rest, "").rpartition(":")
            if not port.isdigit():
                raise SystemExit("telo: --inspect needs HOST:PORT")
            options.inspect = (host, int(port))
        elif arg == "--watch":
            options.watch = True
        elif arg == "--frames-fd":
            options.frames_fd = int(next(rest, "-1"))
        elif options.entry is None and not arg.startswith("--"):
            options.entry = Path(arg)
        elif arg not in ("--no-open", "--no-cache-write"):
            print(f"telo: unknown option {arg!r}\n{USAGE}", file=sys.stderr)
            raise SystemExit(2)
    if options.entry is None:
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    return options


def run_steps(steps: list[tuple[int, str, str]]) -> int:
    try:
        for _number, verb, rest in steps:
            run_step(verb, rest)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


WORKSPACE_APP = re.compile(
    r"^kind:\s*Telo\.Application\s*\n(?:.*\n)*?\s+name:\s*RunnerdWorkspaceApp\s*$", re.M
)


def is_workspace_app(entry: Path) -> bool:
    """Whether `entry`'s first document is runnerd's workspace application."""
    try:
        first = entry.read_text().split("\n---", 1)[0]
    except (OSError, UnicodeDecodeError):
        return False
    return WORKSPACE_APP.search(first) is not None


def serve_workspace() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import workspace_server

    return workspace_server.main()


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    assert options.entry is not None
    if is_workspace_app(options.entry):
        return serve_workspace()
    if options.watch:
        return watch(options.entry, options.inspect)
    steps = parse_script(options.entry)
    # os.write, not say(): a handler re-entering sys.stdout's buffer raises RuntimeError.
    signal.signal(signal.SIGWINCH, lambda *_: os.write(1, f"resize {terminal_size()}\n".encode()))
    if options.frames_fd is not None:  # a watched run: the watcher has the debug stream
        DEBUG.pipe = os.fdopen(options.frames_fd, "w")
        return run_steps(steps)
    if options.inspect is not None:
        INSPECTOR.start(*options.inspect)
    DEBUG.publish(
        {"kind": "event", "event": "kernel.started", "data": {"entry": str(options.entry)}}
    )
    code = run_steps(steps)
    DEBUG.publish({"kind": "event", "event": "kernel.exited", "data": {"code": code}})
    return code


def declared_ports(path: Path) -> list[dict[str, Any]]:
    """A watched load: the script's `port` directives, or LoadError."""
    ports = []
    for _number, verb, rest in load_script(path):
        if verb == "port":
            number, _, protocol = rest.partition(" ")
            ports.append({"port": int(number), "protocol": protocol.strip() or "tcp"})
    return ports


def watch(entry: Path, inspect: tuple[str, int] | None) -> int:
    # -I (isolated, as the images run this) leaves this file's directory off sys.path.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from kernel_watch import Watcher

    if inspect is not None:
        INSPECTOR.start(*inspect)
    run = [sys.executable, *(["-I"] if sys.flags.isolated else []), __file__, "run", str(entry)]
    version = VERSION.split()[-1]
    return Watcher(entry, run, DEBUG.publish, declared_ports, version).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
