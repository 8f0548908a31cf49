"""The stand-in kernel's `--watch` (kernel.py's docstring): runs one after
another, each a child process, restarted on a change of the entry's directory.

Stdlib only; imported by kernel.py, which hands it the pieces it needs (how
to start a run, where frames go, how a load is checked), so the debug stream
stays the one kernel.py serves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

POLL_S = 0.1
UNWATCHED = {"node_modules", ".git", ".telo"}
# A run stopped by a change: SIGTERM, then SIGKILL after this.
STOP_GRACE_S = 2.0

Publish = Callable[[dict[str, Any]], None]
# A load check: the entry's declared ports, or an exception with `.code`
# (a diagnostic code) whose `str()` is the message.
Load = Callable[[Path], list[dict[str, Any]]]


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every watched file under `root` → (mtime_ns, size)."""
    state: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in UNWATCHED]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                info = os.stat(path)
            except OSError:
                continue  # gone between the listing and the stat: the next poll sees it
            state[path] = (info.st_mtime_ns, info.st_size)
    return state


def exit_code(returncode: int) -> int:
    """A child's return code as an exit status (a signal N as 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


class Watcher:
    """Run `run` (argv of a plain run of the entry) again on every change."""

    def __init__(
        self, entry: Path, run: list[str], publish: Publish, load: Load, version: str
    ) -> None:
        self.entry, self.root, self.run_argv = entry, entry.parent, run
        self.publish, self.load, self.version = publish, load, version
        self.child: subprocess.Popen[bytes] | None = None
        self.relay: threading.Thread | None = None

    def event(self, name: str, payload: dict[str, Any]) -> None:
        self.publish({"kind": "event", "event": name, "payload": payload})

    def run(self) -> int:
        signal.signal(signal.SIGWINCH, signal.SIG_IGN)  # the run's child prints resizes
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        try:
            while True:
                before = tree_state(self.root)
                self.start_run()
                self.await_change(before)
                self.stop_run()
        finally:
            self.stop_run(report=False)

    def start_run(self) -> None:
        try:
            ports = self.load(self.entry)
        except Exception as exc:  # the load check's refusal: this run failed to load
            print(exc, file=sys.stderr, flush=True)
            code = getattr(exc, "code", "ERR_LOAD_FAILED")
            self.event("Kernel.RunFailed", {"phase": "load", "code": code, "message": str(exc)})
            return
        self.event("Kernel.PortsResolved", {"ports": ports})
        self.event("Kernel.Starting", {"telo": self.version})
        read, write = os.pipe()
        self.child = subprocess.Popen(
            [*self.run_argv, "--frames-fd", str(write)], pass_fds=(write,)
        )
        os.close(write)
        threading.Thread(target=self.relay_frames, args=(read,), daemon=True).start()
        self.event("Kernel.Started", {})

    def relay_frames(self, fd: int) -> None:
        """A run's frames, read from its pipe, onto the debug stream."""
        with os.fdopen(fd, "r") as frames:
            for line in frames:
                self.publish(json.loads(line))

    def await_change(self, before: dict[str, tuple[int, int]]) -> None:
        """Until the watched tree differs from `before` and has settled; a
        run that ends by itself meanwhile is reported `Kernel.Stopped`."""
        while True:
            time.sleep(POLL_S)
            if self.child is not None and self.child.poll() is not None:
                self.stop_run()
            now = tree_state(self.root)
            if now != before:
                while True:  # a burst of writes is one change
                    time.sleep(POLL_S)
                    now, settled = tree_state(self.root), now
                    if now == settled:
                        return

    def stop_run(self, *, report: bool = True) -> None:
        """End the run (if one is up): `Kernel.Stopped` with its own exit
        status when it had ended by itself, 0 when this stopped it; after
        every frame it wrote (the relay drained first)."""
        child, self.child = self.child, None
        if child is None:
            return
        code = child.poll()
        if code is None:
            child.terminate()
            try:
                child.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self.relay is not None:
            self.relay.join(STOP_GRACE_S)  # its pipe ends with the child
        if report:
            self.event("Kernel.Stopped", {"exitCode": 0 if code is None else exit_code(code)})
