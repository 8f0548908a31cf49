"""`runnerd watch [DIR]`: a watch session of DIR, on the screen, synced as you edit.

Owns the verb's flow (the live part is `runnerd.client.watchsession`):
1. the request: DIR bundled as `run` bundles it (`.gitignore` applied); the
   apps from `--app NAME=ENTRY[:PORT[/udp][,...]]` (repeatable; without it,
   one app `app` on the bundle's entry, `--entry`, with `--port`s),
   `--streams` (every app gets pipes instead of a terminal), `--agent`,
   `--env`/`--env-file`, `--image`/`--pull`; `mode: "watch"`. A bundle over
   the daemon's body limit is refused before it is sent;
2. the start (`POST /v1/sessions`, terms asked as `run` asks them), or with
   `--attach ID` an existing watch session (resumed if it is suspended;
   DIR, when given, is synced against what its workspace holds);
3. the watch until the session ends or we leave (`Watcher.run`);
4. the exit code: Ctrl-C (the session stopped) → 0; `--keep` and Ctrl-C
   (it keeps running) → 0 with how to re-attach; the session ended by
   itself: `failed` → 125, `stopped` by someone else → 130; a second Ctrl-C
   while it stops → 130; the daemon lost → 1. Refusals of the start are
   `runnerd: <message> (<status> <code>)` and 1; bad arguments 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio_websocket

from runnerd.client.bundle import (
    WATCH_SKIPPED,
    Bundle,
    BundleError,
    collect_bundle,
    collect_tree,
)
from runnerd.client.outcome import EXIT_ERROR, EXIT_FAILED, EXIT_OK, EXIT_STOPPED, exit_code
from runnerd.client.run import check_size, parse_env, parse_ports, post_start
from runnerd.client.sync import SyncState
from runnerd.client.transport import (
    NO_BODY,
    Api,
    ApiError,
    ClientError,
    UsageError,
    default_image,
    no_session,
)
from runnerd.client.watchsession import AppInfo, How, WatchEnd, Watcher
from runnerd.client.watchview import Screen
from runnerd.client.ws import open_channel

_PORTS = re.compile(r"\d+(/[a-z]+)?(,\d+(/[a-z]+)?)*")
_NEW_SESSION_ONLY = ("app", "entry", "agent", "port", "image", "env_file")


def parse_app(spec: str, streams: bool) -> dict[str, Any]:
    """`NAME=ENTRY[:PORT[/PROTO][,...]]` as a `SessionAppSpec`. Raises UsageError."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise UsageError(f"--app must be NAME=ENTRY[:PORT[/udp][,...]], got {spec!r}")
    entry, colon, ports = rest.rpartition(":")
    if not colon or not _PORTS.fullmatch(ports):
        entry, ports = rest, ""
    app: dict[str, Any] = {"name": name, "entryRelativePath": entry}
    if ports:
        try:
            app["ports"] = parse_ports(ports.split(","))
        except UsageError:
            raise UsageError(
                f"--app {spec!r}: each port must be N or N/udp with N in 1-65535"
            ) from None
    if streams:
        app["io"] = "streams"
    return app


def build_watch_request(api: Api, args: argparse.Namespace) -> tuple[dict[str, Any], Bundle]:
    """(body, bundle) of the start. Raises ClientError (UsageError: an argument)."""
    root = Path(args.path or ".")
    if not root.is_dir():
        raise UsageError(f"{root}: runnerd watch needs a directory")
    apps = [parse_app(spec, args.streams) for spec in args.app]
    try:
        bundle = (
            collect_tree(root, apps[0]["entryRelativePath"])
            if apps
            else collect_bundle(root, args.entry, WATCH_SKIPPED)
        )
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    ports = parse_ports(args.port)
    if not apps and (args.streams or ports):
        apps = [{"name": "app", "entryRelativePath": bundle.entry, "ports": ports}]
        if args.streams:
            apps[0]["io"] = "streams"
    body: dict[str, Any] = {
        "mode": "watch",
        "env": parse_env(args.env, args.env_file),
        "bundle": bundle.as_json(),
        "config": {"image": args.image or default_image(api), "pullPolicy": args.pull},
    }
    if apps:
        body["apps"] = apps
    if args.agent:
        body["agent"] = args.agent
    return body, bundle


def _apps_of(entry: Any, fallback: list[AppInfo]) -> list[AppInfo]:
    """The session's apps as `GET` shows them (the request's when it shows none)."""
    apps = entry.get("apps") if isinstance(entry, dict) else None
    if not isinstance(apps, list) or not apps:
        return fallback
    return [AppInfo(str(a.get("name")), str(a.get("io", "tty"))) for a in apps]


def _stdin_app(apps: list[AppInfo], wanted: str | None) -> str:
    names = [a.name for a in apps]
    if wanted is None:
        return names[0]
    if wanted not in names:
        raise UsageError(f"--stdin {wanted!r} is not an app of the session ({', '.join(names)})")
    return wanted


def _screen(apps: list[AppInfo]) -> Screen:
    colour = os.isatty(1) and not os.environ.get("NO_COLOR")
    return Screen([a.name for a in apps], sys.stdout.buffer, sys.stderr.buffer, colour=colour)


def run_watch(api: Api, args: argparse.Namespace) -> int:
    """The verb (module docstring); its exit code."""
    if args.attach is not None:
        return _attach(api, args)
    body, bundle = build_watch_request(api, args)
    requested = [AppInfo(a["name"], a.get("io", "tty")) for a in body.get("apps", [])]
    requested = requested or [AppInfo("app", "tty")]
    stdin_app = _stdin_app(requested, args.stdin)
    for skipped in bundle.skipped:
        print(f"runnerd: {skipped} is not UTF-8 text: it follows the bundle as base64",
              file=sys.stderr)  # fmt: skip
    limit = check_size(api, body)
    session_id = post_start(api, "/v1/sessions", body, args.accept_terms)
    try:
        apps = _apps_of(_get_or_none(api, session_id), requested)
    except KeyboardInterrupt:  # it exists now: Ctrl-C stops it, as it would later
        if not args.keep:
            _stop_quietly(api, session_id)
        raise
    root = Path(args.path or ".")
    sync = (root, SyncState.seed_from_bundle(bundle), limit)
    return _watch(api, args, session_id, apps, stdin_app, sync, str(root))


def _attach(api: Api, args: argparse.Namespace) -> int:
    given = [f"--{n.replace('_', '-')}" for n in _NEW_SESSION_ONLY if getattr(args, n)]
    if given or args.streams:
        raise UsageError(
            f"--attach takes the session as it is: drop {' '.join(given) or '--streams'}"
        )
    session_id = args.attach
    entry = _listed(api, session_id)
    if entry.get("mode") != "watch":
        raise ClientError(f"{session_id} is not a watch session: `runnerd attach {session_id}`")
    apps = _apps_of(entry, [])
    if not apps:
        raise ClientError(f"{session_id} has no apps to show")
    stdin_app = _stdin_app(apps, args.stdin)
    sync = None
    if args.path is not None:
        root = Path(args.path)
        if not root.is_dir():
            raise UsageError(f"{root}: runnerd watch needs a directory")
        limit = check_size(api, {})
        sync = (root, SyncState(), limit)  # filled from GET /workspace once it runs
    status = entry.get("status") or {}
    if status.get("kind") == "suspended":
        print(f"runnerd: resuming {session_id}", file=sys.stderr)
        api.request("POST", f"/v1/sessions/{session_id}/resume", NO_BODY, ok=(202,))
        status = {"kind": "starting"}  # what the resume makes of it; its events follow
    history = int(entry.get("lastEventId") or 0)
    return _watch(api, args, session_id, apps, stdin_app, sync, args.path,
                  relist=True, status=status, replay_until=history)  # fmt: skip


def _listed(api: Api, session_id: str) -> dict[str, Any]:
    """The session's `GET /v1/sessions` entry (its last event id with it)."""
    for entry in api.get("/v1/sessions")["sessions"]:
        if entry.get("sessionId") == session_id:
            listed: dict[str, Any] = entry
            return listed
    raise no_session(session_id)


def _get_or_none(api: Api, session_id: str) -> dict[str, Any] | None:
    try:
        entry: dict[str, Any] = api.get(f"/v1/sessions/{session_id}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return entry


def _watch(
    api: Api,
    args: argparse.Namespace,
    session_id: str,
    apps: list[AppInfo],
    stdin_app: str,
    sync: tuple[Path, SyncState, int | None] | None,
    root: str | None,
    *,
    relist: bool = False,
    status: dict[str, Any] | None = None,
    replay_until: int = 0,
) -> int:
    from runnerd.client.interrupt import run_trio

    screen = _screen(apps)
    synced = f" (syncing {root})" if sync is not None else ""
    leave = "Ctrl-C leaves it running" if args.keep else "Ctrl-C stops it"
    screen.note(f"watching {session_id}{synced}: {', '.join(a.name for a in apps)}; {leave}")
    watcher = Watcher(api, session_id, apps, screen, keep=args.keep, stdin_app=stdin_app,
                      sync=sync, relist=relist, status=status,
                      replay_until=replay_until)  # fmt: skip
    try:
        end = run_trio(watcher.run)
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was in place
        end = WatchEnd(How.KEPT if args.keep else How.LEFT, watcher.status)
        if not args.keep:
            _stop_quietly(api, session_id)
    return finish_watch(screen, session_id, end, root)


def _stop_quietly(api: Api, session_id: str) -> None:
    try:
        api.request("DELETE", f"/v1/sessions/{session_id}", NO_BODY)
    except ClientError as exc:
        print(f"runnerd: cannot stop {session_id}: {exc}", file=sys.stderr)


def finish_watch(screen: Screen, session_id: str, end: WatchEnd, root: str | None) -> int:
    """The exit code for how the watch ended (module docstring), with its line."""
    if end.how is How.KEPT:
        where = f" {root}" if root is not None else ""
        screen.note(f"left {session_id} running: `runnerd watch --attach {session_id}{where}` "
                    f"re-attaches, `runnerd stop {session_id}` stops it")  # fmt: skip
        return EXIT_OK
    if end.how is How.LEFT:
        screen.note(f"left {session_id} while it stops")
        return EXIT_STOPPED
    if end.how is How.LOST:
        screen.note(f"{session_id}: {end.message}")
        return EXIT_ERROR
    kind = end.status.get("kind")
    if kind == "stopped" and end.stopping:
        return EXIT_OK
    if kind == "failed":
        return EXIT_FAILED  # its message is on the screen already
    code, _ = exit_code(end.status)
    return code


def show_watch_logs(api: Api, entry: dict[str, Any], follow: bool) -> int:
    """`runnerd logs` of a watch session: each app's output so far, in turn,
    under its name (`-f` is `runnerd watch --attach`'s)."""
    from runnerd.client.interrupt import run_trio

    session_id = str(entry["sessionId"])
    if follow:
        raise UsageError(f"{session_id} is a watch session: `runnerd watch --attach {session_id}` "
                         f"follows its apps")  # fmt: skip
    apps = [a for a in entry.get("apps") or [] if isinstance(a, dict)]
    screen = _screen(_apps_of(entry, []))

    async def main() -> None:
        for app in apps:
            stop_at = int(app.get("lastOutputSeq") or 0)
            if stop_at > 0:
                await replay_app_output(api, session_id, str(app["name"]), stop_at, screen)
        screen.end()

    run_trio(main)
    return EXIT_OK


async def replay_app_output(
    api: Api, session_id: str, app: str, stop_at_seq: int, screen: Screen
) -> None:
    """`app`'s output from the start up to seq `stop_at_seq` (or the
    channel's end) on `screen` (`runnerd logs` of a watch session).
    Raises ClientError: the channel could not be opened."""
    resource = f"/v1/sessions/{session_id}/io?app={quote(app)}&lastSeq=0"
    async with open_channel(api.endpoint, resource) as ws:
        with contextlib.suppress(trio_websocket.ConnectionClosed):
            while True:
                message = await ws.get_message()
                if isinstance(message, str) or len(message) < 5:
                    continue
                (seq,) = struct.unpack(">I", message[:4])
                screen.output(app, message[4], bytes(message[5:]))
                if seq >= stop_at_seq:
                    return
