"""`runnerd watch`'s live part: one watch session followed until it ends or we leave.

Owns `Watcher.run`, five tasks in one nursery (the first that knows how the
watch ends returns it as a `WatchEnd`; the rest are cancelled):
- the event stream (SSE): `run` and `endpoints` events become lines on the
  screen (`runnerd.client.watchview`), statuses become notes; the stream
  ending after a terminal status ends the watch;
- one `/io?app=NAME` socket per app, from seq 0 (nothing printed before we
  attached is lost), each chunk shown under its app's name; a `tty` app is
  told our terminal's width less the prefix;
- stdin, line by line (the terminal stays in its normal mode: Ctrl-C is
  ours), to the `--stdin` app; its end is sent as ^D to a `tty` app;
- signals: SIGINT (Ctrl-C), SIGTERM, SIGHUP stop the session (DELETE) and
  the watch goes on until its `stopped` arrives; a second one leaves at
  once; with `--keep` the first one leaves and the session keeps running;
- the sync (`runnerd.client.syncloop`), when a directory is synced: this
  object is its `SyncTarget`.

A suspended session (idle, nobody attached) is resumed (`POST /resume`) by
the sync when a local edit needs the workspace, and by a line typed on stdin;
after a resume the sync's state is re-read from `GET /workspace` (the
checkpoint is what came back).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import os
import re
import signal
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio
import trio_websocket

from runnerd.client.pty_channel import EOF_CHAR, FINISHED, LOST_NOTICE, is_lost_output
from runnerd.client.sync import SyncState
from runnerd.client.syncloop import NotRunning, RateLimited, Syncer, SyncRefused
from runnerd.client.terminal import terminal_size
from runnerd.client.transport import NO_BODY, Api, ApiError, ClientError
from runnerd.client.watchview import Screen, endpoints_text, run_text
from runnerd.client.ws import open_channel

TERMINAL = ("exited", "failed", "stopped")
GONE = 4404  # the app (or the session) is not there: PUT /apps dropped it
DEFAULT_RETRY_S = 5.0  # a 429 without Retry-After


class How(enum.Enum):
    FINISHED = "finished"  # the session ended (status); we may have asked (stopping)
    KEPT = "kept"  # we left, the session keeps running (--keep)
    LEFT = "left"  # a second Ctrl-C while stopping: we left at once
    LOST = "lost"  # the daemon went away


@dataclass(frozen=True)
class WatchEnd:
    how: How
    status: dict[str, Any] = field(default_factory=dict)
    stopping: bool = False  # we sent the DELETE
    message: str = ""


@dataclass(frozen=True)
class AppInfo:
    name: str
    io: str  # "tty" | "streams"


class Watcher:
    """One watch session on the screen (module docstring)."""

    def __init__(
        self,
        api: Api,
        session_id: str,
        apps: list[AppInfo],
        screen: Screen,
        *,
        keep: bool,
        stdin_app: str | None,
        sync: tuple[Path, SyncState, int | None] | None,
        relist: bool = False,
        status: dict[str, Any] | None = None,
        replay_until: int = 0,
    ) -> None:
        """`status` and `replay_until` (when attaching): the session's status
        now and its last event id then; the statuses the stream replays up to
        that id are history and change nothing."""
        self.api = api
        self.session_id = session_id
        self.apps = apps
        self.screen = screen
        self.keep = keep
        self.stdin_app = stdin_app
        self.sync = sync
        self.status: dict[str, Any] = status or {"kind": "starting"}
        self.replay_until = replay_until
        self.stopping = False
        self._changed = trio.Event()
        self._sockets: dict[str, trio_websocket.WebSocketConnection] = {}
        self._attached = {app.name: trio.Event() for app in apps}  # its socket is open
        self._nursery: trio.Nursery | None = None
        self._triggers: dict[tuple[str, int], str] = {}
        self._resumed_for: int = -1  # the suspension (status count) we resumed
        self._statuses = 0
        self._relist = relist  # the sync's state comes from GET /workspace

    @property
    def kind(self) -> str:
        return str(self.status.get("kind", "?"))

    async def run(self) -> WatchEnd:
        ends: list[WatchEnd] = []
        async with trio.open_nursery() as nursery:

            async def settle(task: Any) -> None:
                end = await task()
                if end is not None:
                    ends.append(end)
                    nursery.cancel_scope.cancel()

            nursery.start_soon(settle, self._follow_events)
            nursery.start_soon(settle, self._watch_signals)
            nursery.start_soon(self._start_sockets, nursery)
            if self.stdin_app is not None:
                nursery.start_soon(self._forward_stdin)
            if self.sync is not None:
                nursery.start_soon(settle, self._run_sync)
        return ends[0]

    async def _run_sync(self) -> WatchEnd | None:
        """The sync, for as long as the watch; the daemon gone ends the watch
        (LOST), a refusal of the sync itself only the sync (said once)."""
        assert self.sync is not None
        root, state, limit = self.sync
        try:
            await Syncer(root, state, self, limit).run()
        except (ApiError, SyncRefused) as exc:
            self.screen.note(f"syncing stopped: {exc}")
        except ClientError as exc:  # unreachable: the connection, not an answer
            return WatchEnd(How.LOST, message=str(exc))
        return None

    # -- the event stream ------------------------------------------------

    async def _follow_events(self) -> WatchEnd:
        events: Iterator[tuple[int | None, str, Any]] = self.api.sse(
            f"/v1/sessions/{self.session_id}/events"
        )
        try:
            while True:
                try:  # abandoned on cancel: a read may wait a heartbeat (20 s)
                    item = await trio.to_thread.run_sync(next, events, None, abandon_on_cancel=True)
                except ClientError as exc:
                    return WatchEnd(How.LOST, message=str(exc))
                if item is None:
                    break
                self._on_event(item[0], item[1], item[2])
        finally:
            with contextlib.suppress(ValueError):  # still reading in an abandoned thread
                getattr(events, "close", lambda: None)()
        if self.kind in TERMINAL:
            return WatchEnd(How.FINISHED, self.status, self.stopping)
        return WatchEnd(How.LOST, message="lost the event stream")

    def _on_event(self, event_id: int | None, event: str, data: Any) -> None:
        if event == "gap":
            self.screen.note("some events were evicted from the replay buffer")
        if not isinstance(data, dict):
            return
        kind = data.get("type")
        if kind == "status" and isinstance(data.get("status"), dict):
            if self._live(event_id):
                self._on_status(data["status"])
        elif kind == "run" and isinstance(data.get("app"), str):
            app, generation = data["app"], data.get("generation")
            key = (app, generation if isinstance(generation, int) else -1)
            if data.get("phase") == "started":
                self._triggers[key] = str(data.get("trigger", ""))
                if app not in self._attached and self._nursery is not None:
                    self._attached[app] = trio.Event()  # new (PUT /apps): follow it too
                    self._nursery.start_soon(self._adopt_app, app)
            self.screen.app_line(app, run_text(data, self._triggers.get(key)))
        elif kind == "endpoints" and isinstance(data.get("app"), str):
            self.screen.app_line(data["app"], endpoints_text(data))
        elif kind == "progress" and self.kind == "starting" and self._live(event_id):
            where = f"{data['app']}: " if isinstance(data.get("app"), str) else ""
            self.screen.note(
                f"{self.session_id}: {where}{data.get('phase')}: {data.get('message')}"
            )

    def _live(self, event_id: int | None) -> bool:
        """Not history: after the last event there was when we attached."""
        return event_id is None or event_id > self.replay_until

    def _on_status(self, status: dict[str, Any]) -> None:
        previous, self.status = self.kind, status
        self._statuses += 1
        self._changed.set()
        self._changed = trio.Event()
        kind = self.kind
        if kind == "running" and previous != "running":
            self.screen.note(f"{self.session_id} running" + _agent_text(status))
        elif kind == "suspended":
            self.screen.note(
                f"{self.session_id} suspended (idle); a local edit or a line typed resumes it"
            )
        elif kind == "failed":
            self.screen.note(f"{self.session_id} failed: {status.get('message', '')}")
        elif kind in TERMINAL:
            self.screen.note(f"{self.session_id} {kind}")

    # -- per-app sockets -------------------------------------------------

    async def _start_sockets(self, nursery: trio.Nursery) -> None:
        while self.kind == "starting":  # an app's channel is there once it runs
            await self._changed.wait()
        for app in self.apps:
            nursery.start_soon(self._follow_app, app)
        self._nursery = nursery  # from now on a new app is followed as it appears

    async def _adopt_app(self, name: str) -> None:
        """Follow an app the session gained after we attached (`PUT /apps`)."""
        try:
            entry = await trio.to_thread.run_sync(self.api.get, f"/v1/sessions/{self.session_id}")
        except ClientError:
            return
        io = next((str(a.get("io")) for a in entry.get("apps") or [] if a.get("name") == name), "")
        if io:
            app = AppInfo(name, io)
            self.apps.append(app)
            await self._follow_app(app)

    async def _follow_app(self, app: AppInfo) -> None:
        resource = f"/v1/sessions/{self.session_id}/io?app={quote(app.name)}&lastSeq=0"
        try:
            async with open_channel(self.api.endpoint, resource) as ws:
                self._sockets[app.name] = ws
                self._attached[app.name].set()
                await self._send_width(ws, app)
                await self._receive(ws, app)
        except ClientError as exc:
            self.screen.note(f"{app.name}: cannot attach to its output: {exc}")
        finally:
            self._sockets.pop(app.name, None)

    async def _receive(self, ws: trio_websocket.WebSocketConnection, app: AppInfo) -> None:
        try:
            while True:
                message = await ws.get_message()
                if isinstance(message, str):
                    if is_lost_output(message):
                        self.screen.note(f"{app.name}: {LOST_NOTICE}")
                elif len(message) >= 5:
                    (_seq,) = struct.unpack(">I", message[:4])
                    self.screen.output(app.name, message[4], bytes(message[5:]))
        except trio_websocket.ConnectionClosed as closed:
            code = closed.reason.code if closed.reason is not None else 1006
            if code == GONE and self.kind not in TERMINAL:
                self.screen.note(f"{app.name} is no longer an app of {self.session_id}")
            elif code not in FINISHED and code != GONE:
                self.screen.note(f"{app.name}: its output channel closed ({code})")

    async def _send_width(self, ws: trio_websocket.WebSocketConnection, app: AppInfo) -> None:
        size = terminal_size(1) if app.io == "tty" else None
        if size is not None:
            cols = max(size[0] - self.screen.width - 3, 20)  # less the `name | ` prefix
            with contextlib.suppress(trio_websocket.ConnectionClosed):
                await ws.send_message(json.dumps({"type": "resize", "cols": cols, "rows": size[1]}))

    # -- stdin and signals -----------------------------------------------

    async def _forward_stdin(self) -> None:
        app = next(a for a in self.apps if a.name == self.stdin_app)
        while True:
            try:
                data = await trio.to_thread.run_sync(os.read, 0, 65536, abandon_on_cancel=True)
            except OSError:  # no stdin at all (closed): nothing to send
                return
            if self.kind == "suspended" and data:
                await self._resume("a line was typed")
            await self._attached[app.name].wait()  # typed early: held until attached
            ws = self._sockets.get(app.name)
            if ws is None:
                continue  # its socket closed (the app is gone): dropped, as the daemon would
            with contextlib.suppress(trio_websocket.ConnectionClosed):
                if data:
                    await ws.send_message(data)
                elif app.io == "tty":
                    await ws.send_message(EOF_CHAR)  # as typed: the app's reader sees the end
            if not data:
                return  # stdin ended (a streams app's pipe stays open: /io cannot close it)

    async def _watch_signals(self) -> WatchEnd:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async for _ in signals:
                if self.keep:
                    return WatchEnd(How.KEPT, self.status)
                if self.stopping:
                    return WatchEnd(How.LEFT, self.status, stopping=True)
                self.stopping = True
                self.screen.note(f"stopping {self.session_id} (Ctrl-C again leaves at once)")
                try:
                    await trio.to_thread.run_sync(
                        self.api.request, "DELETE", f"/v1/sessions/{self.session_id}", NO_BODY
                    )
                except ClientError as exc:
                    return WatchEnd(How.LOST, message=f"cannot stop {self.session_id}: {exc}")
        raise AssertionError("a signal receiver never ends")

    # -- SyncTarget ------------------------------------------------------

    async def post_changes(self, body: dict[str, Any]) -> None:
        path = f"/v1/sessions/{self.session_id}/workspace"
        try:
            await trio.to_thread.run_sync(self.api.request, "POST", path, body)
        except ApiError as exc:
            if exc.status == 429:
                raise RateLimited(_retry_after_s(exc)) from None
            if exc.status == 409 and exc.code == "not_running":
                raise NotRunning from None
            raise SyncRefused(str(exc)) from None

    async def wait_running(self, refused: bool) -> None:
        if refused:  # the daemon knows better than the last status we saw
            await self._changed.wait()
        while True:
            waited = False
            while self.kind != "running":
                waited = True
                if self.kind == "suspended":
                    await self._resume("a local file changed")
                await self._changed.wait()
            if not (waited or self._relist) or self.sync is None:
                return
            # Whatever the workspace holds now (a resume restores the checkpoint).
            path = f"/v1/sessions/{self.session_id}/workspace"
            try:
                listing = await trio.to_thread.run_sync(self.api.get, path)
            except ApiError as exc:
                if exc.code != "not_running":
                    raise SyncRefused(f"cannot list the workspace: {exc}") from None
                await self._changed.wait()  # suspended meanwhile: its status follows
                continue
            self._relist = False
            self.sync[1].files = SyncState.seed_from_listing(listing).files
            return

    def note(self, text: str) -> None:
        self.screen.note(text)

    async def _resume(self, why: str) -> None:
        """`POST /resume`, once per suspension."""
        if self._resumed_for == self._statuses:
            return
        self._resumed_for = self._statuses
        self.screen.note(f"resuming {self.session_id} ({why})")
        try:
            await trio.to_thread.run_sync(
                functools.partial(self.api.request, ok=(202,)),
                "POST", f"/v1/sessions/{self.session_id}/resume", NO_BODY,
            )  # fmt: skip
        except ClientError as exc:  # an answer, or none: the event stream tells the rest
            self.screen.note(f"cannot resume {self.session_id}: {exc}")


def _retry_after_s(error: ApiError) -> float:
    """A 429's wait: its `Retry-After`, else the `try again in N s` its message
    says (runnerd's words today), else `DEFAULT_RETRY_S`."""
    value = error.headers.get("retry-after", "")
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    said = re.search(r"try again in (\d+) s", error.message)
    return float(said.group(1)) if said else DEFAULT_RETRY_S


def _agent_text(status: dict[str, Any]) -> str:
    agent = status.get("agent")
    if not isinstance(agent, dict):
        return ""
    return f" (agent on port {agent.get('port')})"
