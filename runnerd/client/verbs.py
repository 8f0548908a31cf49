"""The client verbs: `run` and `watch` (their own modules), reload, ls, stop, logs,
events, attach, apps, probe, completion.

Owns each verb's requests and what it prints, and `dispatch`, the one place
that turns a `ClientError` into `runnerd: <message>` on stderr and exit 1
(exit 2 for a `UsageError`, a bad argument: argparse's code for its own).
Tables go to stdout (`--json` gives the daemon's JSON instead); diagnostics
go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from runnerd.client.outcome import EXIT_ERROR, EXIT_OK, EXIT_STOPPED, EXIT_USAGE
from runnerd.client.table import age, apps_text, ports_text, status_text, table
from runnerd.client.transport import (
    NO_BODY,
    Api,
    ApiError,
    ClientError,
    UsageError,
    default_image,
    no_session,
    resolve_endpoint,
)
from runnerd.client.watchview import endpoints_text, run_text

LIVE = ("starting", "running")
NOT_OVER = (*LIVE, "suspended")  # a suspended watch session comes back on resume


def list_sessions(api: Api) -> list[dict[str, Any]]:
    sessions: list[dict[str, Any]] = api.get("/v1/sessions")["sessions"]
    return sessions


def find_session(api: Api, session_id: str) -> dict[str, Any]:
    """The list entry of `session_id`. Raises ClientError when there is none."""
    for entry in list_sessions(api):
        if entry["sessionId"] == session_id:
            return entry
    raise no_session(session_id)


def cmd_ls(api: Api, args: argparse.Namespace) -> int:
    sessions = list_sessions(api)
    if not args.all:
        sessions = [s for s in sessions if s["status"].get("kind") in NOT_OVER]
    if args.json:
        # The daemon's object, as `GET /v1/sessions` answers it (README).
        print(json.dumps({"sessions": sessions}, indent=2))
    elif args.quiet:
        for s in sessions:
            print(s["sessionId"])
    else:
        rows = [
            [s["sessionId"], status_text(s["status"]), age(s["createdAt"]), s.get("mode", "run"),
             s.get("image") or f"app:{s.get('app')}", apps_text(s), ports_text(s)]
            for s in sessions
        ]  # fmt: skip
        print(table(["ID", "STATUS", "AGE", "MODE", "IMAGE/APP", "APPS", "PORTS"], rows))
    return EXIT_OK


def cmd_stop(api: Api, args: argparse.Namespace) -> int:
    code = EXIT_OK
    for session_id in args.session_ids:
        try:
            api.get(f"/v1/sessions/{session_id}")
            api.request("DELETE", f"/v1/sessions/{session_id}")
        except ApiError as exc:
            message = str(no_session(session_id)) if exc.status == 404 else exc.message
            print(f"runnerd: {message}", file=sys.stderr)
            code = EXIT_ERROR
            continue
        print(session_id)
    return code


def cmd_logs(api: Api, args: argparse.Namespace) -> int:
    from runnerd.client.interrupt import run_trio
    from runnerd.client.pty_channel import Ended, StdinMode, follow_channel

    entry = find_session(api, args.session_id)
    if entry.get("mode") == "watch":
        from runnerd.client.watch import show_watch_logs

        return show_watch_logs(api, entry, args.follow)
    terminal = entry["status"].get("kind") not in LIVE
    # Without -f: what was there when we asked, then stop (the whole replay
    # of a finished session, which closes by itself).
    stop_at = None if args.follow or terminal else int(entry["lastOutputSeq"])
    end = run_trio(  # Ctrl-C: KeyboardInterrupt, for `dispatch`
        lambda: follow_channel(
            api.endpoint, args.session_id, mode=StdinMode.NONE, stop_at_seq=stop_at
        )
    )
    if end.how is Ended.CAUGHT_UP or end.finished:
        return EXIT_OK
    print(f"runnerd: {args.session_id}: closed {end.code} {end.reason}".rstrip(), file=sys.stderr)
    return EXIT_ERROR


def _event_text(event: str, data: Any) -> str:
    if event == "gap":
        return "gap: events were evicted from the replay buffer"
    if not isinstance(data, dict):
        return f"{event} {data}"
    if event == "status":
        return f"status {status_text(data.get('status'), 400)}"
    app = f"{data['app']} " if isinstance(data.get("app"), str) else ""  # a watch session's
    if event == "progress":
        done = " (done)" if data.get("done") else ""
        return f"progress {app}{data.get('phase')}: {data.get('message')}{done}"
    if event == "reachability":
        return f"reachability {app}{data.get('port')} {data.get('state')}"
    if event == "run":  # `run web #3 (watch) started`, `run web #3 exited 0 in 0.4 s`
        return f"run {app}{run_text(data, data.get('trigger'))}"
    if event == "endpoints":
        return f"endpoints {app}{endpoints_text(data)}"
    rest = {k: v for k, v in data.items() if k != "type"}
    return f"{event} {json.dumps(rest)}"


def cmd_events(api: Api, args: argparse.Namespace) -> int:
    entry = find_session(api, args.session_id)
    stop_at = None if args.follow else int(entry["lastEventId"])
    for event_id, event, data in api.sse(f"/v1/sessions/{args.session_id}/events"):
        if args.json:
            print(json.dumps({"id": event_id, "event": event, "data": data}), flush=True)
        else:
            print(f"{event_id if event_id is not None else '-'} {_event_text(event, data)}",
                  flush=True)  # fmt: skip
        if stop_at is not None and event_id is not None and event_id >= stop_at:
            break
    return EXIT_OK


def cmd_attach(api: Api, args: argparse.Namespace) -> int:
    from runnerd.client.attach import run_attach

    if find_session(api, args.session_id).get("mode") == "watch":
        raise ClientError(f"{args.session_id} is a watch session: `runnerd watch --attach "
                          f"{args.session_id}` shows its apps")  # fmt: skip

    return run_attach(api.endpoint, args.session_id, args.last_seq)


def cmd_reload(api: Api, args: argparse.Namespace) -> int:
    query = f"?app={quote(args.app)}" if args.app is not None else ""
    path = f"/v1/sessions/{args.session_id}/reload{query}"
    try:
        reply = api.request("POST", path, NO_BODY, ok=(202,))
        reloaded = reply.body.get("reloaded") or []
    except ApiError as exc:
        if exc.status == 404 and exc.code == "not_found":
            raise no_session(args.session_id) from None
        if exc.code == "not_running" and _kind(api, args.session_id) == "suspended":
            raise ClientError(f"{args.session_id} is suspended: `runnerd watch --attach "
                              f"{args.session_id}` resumes it ({exc})") from None  # fmt: skip
        raise
    print(f"reloaded {', '.join(str(name) for name in reloaded)}")
    return EXIT_OK


def _kind(api: Api, session_id: str) -> str | None:
    try:
        return str(api.get(f"/v1/sessions/{session_id}")["status"]["kind"])
    except (ClientError, KeyError, TypeError):
        return None


def cmd_watch(api: Api, args: argparse.Namespace) -> int:
    from runnerd.client.watch import run_watch

    return run_watch(api, args)


def cmd_apps(api: Api, args: argparse.Namespace) -> int:
    apps = api.get("/v1/capabilities").get("apps") or []
    if args.json:
        print(json.dumps(apps, indent=2))
    elif not apps:
        print("runnerd: this runner has no catalog apps", file=sys.stderr)
    else:
        rows = [[a["name"], a.get("title") or "", a.get("description") or ""] for a in apps]
        print(table(["NAME", "TITLE", "DESCRIPTION"], rows))
    return EXIT_OK


def cmd_probe(api: Api, args: argparse.Namespace) -> int:
    image = args.image or default_image(api)
    report = api.get_json_post("/v1/probe", {"config": {"image": image, "pullPolicy": args.pull}})
    if args.json:
        print(json.dumps(report, indent=2))
    elif report.get("status") == "ready":
        print(f"{image}: ready")
    elif report.get("status") == "needs-setup":
        print(f"{image}: needs setup")
        for issue in report.get("issues") or []:
            print(f"  {issue.get('path')}: {issue.get('message')}")
    else:
        print(f"{image}: unavailable: {report.get('message')}")
        if report.get("remediation"):
            print(f"  {report['remediation']}")
    return EXIT_OK if report.get("status") == "ready" else EXIT_ERROR


def cmd_completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from runnerd.client.completion import completion_script

    print(completion_script(parser, args.shell))
    return EXIT_OK


def cmd_run(api: Api, args: argparse.Namespace) -> int:
    from runnerd.client.run import run_session

    return run_session(api, args)


VERBS: dict[str, Callable[[Api, argparse.Namespace], int]] = {
    "run": cmd_run, "watch": cmd_watch, "reload": cmd_reload, "ls": cmd_ls, "logs": cmd_logs,
    "events": cmd_events, "attach": cmd_attach, "stop": cmd_stop, "apps": cmd_apps,
    "probe": cmd_probe,
}  # fmt: skip


def dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the client verb `args.command`; its exit code."""
    if args.command == "completion":
        return cmd_completion(args, parser)
    try:
        api = Api(resolve_endpoint(args.socket, args.url))
        return VERBS[args.command](api, args)
    except ClientError as exc:
        print(f"runnerd: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_STOPPED  # 128 + SIGINT; a session we followed keeps running
    except BrokenPipeError:
        return EXIT_OK  # `runnerd ls | head`
