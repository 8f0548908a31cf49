"""The client verbs' command-line arguments (argparse only: cheap to import).

Owns each verb's options and help text; `runnerd.cli` adds them beside
`serve` and `check-config`, and `runnerd.client.completion` reads them back
to write the shell completion scripts, so the two never disagree.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_SOCKET = Path("/run/runnerd/runnerd.sock")
SOCKET_ENV = "RUNNERD_SOCKET"
CLIENT_VERBS = (
    "run", "watch", "reload", "ls", "logs", "events", "attach", "stop", "apps", "probe",
    "completion",
)  # fmt: skip


def _endpoint_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("daemon")
    group.add_argument(
        "--socket",
        type=Path,
        metavar="PATH",
        help=f"runnerd's API socket (default ${SOCKET_ENV}, else {DEFAULT_SOCKET})",
    )
    group.add_argument(
        "--url", metavar="URL", help="a TCP listener instead, e.g. http://127.0.0.1:8062"
    )


def _verb(commands: Any, name: str, text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=text, description=text)
    if name != "completion":
        _endpoint_options(parser)
    return parser


def _add_run(commands: Any) -> None:
    run = _verb(
        commands,
        "run",
        "bundle a directory (or one file), start it as a session and attach to its "
        "terminal; exits with the session's code (failed: 125, stopped: 130)",
    )
    run.add_argument(
        "path",
        nargs="?",
        type=Path,
        default=Path("."),
        metavar="PATH",
        help="directory or file to run (default: .)",
    )
    run.add_argument("--entry", metavar="FILE", help="the file to run, relative to PATH")
    run.add_argument("--app", metavar="NAME", help="run a catalog app (see `runnerd apps`)")
    _add_session_options(run)
    run.add_argument(
        "--detach",
        "-d",
        action="store_true",
        help="print the session id and return without attaching",
    )
    run.add_argument(
        "--accept-terms",
        metavar="VERSION",
        help="accept the runner's terms of this version without asking",
    )


def _add_session_options(run: argparse.ArgumentParser, inspect: bool = True) -> None:
    """What the session gets: image, pull policy, env, ports, inspect."""
    run.add_argument(
        "--image",
        metavar="I",
        help="image (runtime) to run in (default: the daemon's default image)",
    )
    run.add_argument(
        "--pull",
        choices=("missing", "always", "never"),
        default="missing",
        help="pull policy (default: missing)",
    )
    run.add_argument(
        "--env",
        "-e",
        action="append",
        default=[],
        metavar="K=V",
        help="an environment variable for the workload (repeatable)",
    )
    run.add_argument(
        "--env-file",
        type=Path,
        metavar="F",
        help="K=V lines (# comments) to add to the environment",
    )
    run.add_argument(
        "--port",
        "-p",
        action="append",
        default=[],
        metavar="N[/udp]",
        help="a port the workload listens on (repeatable)",
    )
    if inspect:  # a watch session always runs with it
        run.add_argument("--inspect", action="store_true", help="start with the debug relay")


def _add_watch(commands: Any) -> None:
    watch = _verb(
        commands,
        "watch",
        "start a watch session of a directory: every app's output under its name, one line "
        "per run, local edits synced into its workspace (Ctrl-C stops it)",
    )
    watch.add_argument(
        "path", nargs="?", type=Path, default=None, metavar="DIR",
        help="the directory (default: .; with --attach: synced only when given)",
    )  # fmt: skip
    watch.add_argument(
        "--app", action="append", default=[], metavar="NAME=ENTRY[:PORT[/udp][,...]]",
        help="an app of the session (repeatable; default: one app 'app' on the entry)",
    )  # fmt: skip
    watch.add_argument("--entry", metavar="FILE", help="the one app's entry (without --app)")
    watch.add_argument(
        "--streams", action="store_true",
        help="apps get pipes (stdout and stderr apart) instead of a terminal",
    )  # fmt: skip
    watch.add_argument("--agent", metavar="NAME", help="a co-resident agent (a catalog name)")
    watch.add_argument(
        "--stdin", metavar="APP", help="the app that gets what is typed (default: the first)"
    )
    watch.add_argument(
        "--keep", action="store_true", help="Ctrl-C leaves the session running instead"
    )
    watch.add_argument(
        "--attach", metavar="SESSION_ID", help="watch an existing watch session instead"
    )
    _add_session_options(watch, inspect=False)
    watch.add_argument(
        "--accept-terms", metavar="VERSION",
        help="accept the runner's terms of this version without asking",
    )  # fmt: skip
    reload = _verb(commands, "reload", "restart a watch session's apps (trigger: manual)")
    reload.add_argument("session_id", metavar="SESSION_ID")
    reload.add_argument("--app", metavar="NAME", help="only this app (default: every app)")


def _add_listing(commands: Any) -> None:
    ls = _verb(commands, "ls", "list sessions: id, status, age, mode, image or app, apps, ports")
    ls.add_argument("-a", "--all", action="store_true", help="include finished sessions")
    ls.add_argument("-q", "--quiet", action="store_true", help="ids only")
    ls.add_argument("--json", action="store_true", help='the daemon\'s {"sessions": [...]} JSON')
    apps = _verb(commands, "apps", "list the catalog apps a session can run (--app NAME)")
    apps.add_argument("--json", action="store_true", help="as JSON")
    probe = _verb(commands, "probe", "ask whether a session with this image could start now")
    probe.add_argument("--image", metavar="I", help="default: the daemon's default image")
    probe.add_argument("--pull", choices=("missing", "always", "never"), default="missing")
    probe.add_argument("--json", action="store_true", help="the availability report as JSON")


def _add_session_verbs(commands: Any) -> None:
    logs = _verb(commands, "logs", "print a session's terminal output (replayed from the start)")
    logs.add_argument("session_id", metavar="SESSION_ID")
    logs.add_argument("-f", "--follow", action="store_true", help="then follow until it ends")
    events = _verb(commands, "events", "print a session's events (status, progress, ...)")
    events.add_argument("session_id", metavar="SESSION_ID")
    events.add_argument("-f", "--follow", action="store_true", help="then follow until it ends")
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    attach = _verb(
        commands,
        "attach",
        "attach to a session's terminal (Ctrl-] detaches); exits with the session's code",
    )
    attach.add_argument("session_id", metavar="SESSION_ID")
    attach.add_argument(
        "--last-seq",
        type=int,
        default=0,
        metavar="N",
        help="replay output after seq N (default 0: from the start)",
    )
    stop = _verb(commands, "stop", "stop sessions (SIGTERM, then SIGKILL after the grace period)")
    stop.add_argument("session_ids", nargs="+", metavar="SESSION_ID")
    completion = _verb(commands, "completion", "print the shell completion script")
    completion.add_argument("shell", choices=("bash", "zsh"))


def add_client_verbs(commands: Any) -> None:
    """Add every client verb to `commands` (an argparse subparsers action)."""
    _add_run(commands)
    _add_watch(commands)
    _add_listing(commands)
    _add_session_verbs(commands)
