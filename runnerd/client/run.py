"""`runnerd run`: bundle, start, show progress, attach, exit with the session's code.

Owns the run flow:
1. the request: a bundle of PATH (runnerd.client.bundle) or `--app NAME`,
   env from `--env-file` then `--env`, ports, image (the daemon's default
   unless `--image`); a bundle over the daemon's body limit is refused
   before it is sent;
2. the start: `POST`; a `428 terms_required` shows the terms and asks on
   the terminal (or takes `--accept-terms VERSION`), then retries once;
3. `--detach`: print the id, exit 0;
4. progress on stderr (runnerd.client.progress) from the event stream until
   the session runs or ends; from a terminal, its size went with the POST
   (`x-runnerd-terminal-size`), so the workload starts with it;
5. attach (`runnerd.client.attach`): output replayed from the start, so nothing the
   workload printed before we attached is lost; the exit code from its end.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runnerd.client.bundle import BundleError, body_size, collect_bundle
from runnerd.client.outcome import EXIT_ERROR, EXIT_OK
from runnerd.client.terminal import terminal_size
from runnerd.client.transport import Api, ApiError, ClientError, UsageError, default_image

if TYPE_CHECKING:
    from runnerd.client.pty_channel import ChannelEnd

MAX_BODY_HEADER = "x-runnerd-max-body-bytes"
TERMS_HEADER = "x-telo-accepted-terms"
# Our terminal's size on the start: the workload has it from its first byte.
TERMINAL_SIZE_HEADER = "x-runnerd-terminal-size"


def parse_env(pairs: list[str], env_file: Path | None) -> dict[str, str]:
    """`--env-file` lines, then `--env` values (later wins). Raises UsageError."""
    env: dict[str, str] = {}
    lines: list[tuple[str, str]] = []
    if env_file is not None:
        try:
            text = env_file.read_text()
        except OSError as exc:
            raise UsageError(f"--env-file {env_file}: {exc.strerror or exc}") from None
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                lines.append((f"{env_file}:{n}", line.removeprefix("export ")))
    lines += [("--env", pair) for pair in pairs]
    for where, pair in lines:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{where}: expected K=V, got {pair!r}")
        env[key] = value
    return env


def parse_ports(specs: list[str]) -> list[dict[str, Any]]:
    ports = []
    for spec in specs:
        number, _, protocol = spec.partition("/")
        protocol = protocol or "tcp"
        if not number.isdigit() or not 1 <= int(number) <= 65535 or protocol not in ("tcp", "udp"):
            raise UsageError(f"--port must be N or N/udp with N in 1-65535, got {spec!r}")
        ports.append({"port": int(number), "protocol": protocol})
    return ports


def build_request(api: Api, args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """(path, body) of the start request. Raises ClientError (UsageError for
    a bad argument)."""
    body: dict[str, Any] = {"env": parse_env(args.env, args.env_file)}
    if args.port:
        body["ports"] = parse_ports(args.port)
    if args.inspect:
        body["inspect"] = True
    if args.app is not None:
        return f"/v1/apps/{args.app}/sessions", body
    try:
        bundle = collect_bundle(args.path, args.entry)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    for skipped in bundle.skipped:
        print(f"runnerd: left out {skipped}: not UTF-8 text", file=sys.stderr)

    image = args.image or default_image(api)
    body["bundle"] = bundle.as_json()
    body["config"] = {"image": image, "pullPolicy": args.pull}
    check_size(api, body)
    return "/v1/sessions", body


def check_size(api: Api, body: dict[str, Any]) -> int | None:
    """Refuse `body` when it is over the daemon's announced limit (ClientError);
    that limit (None when the daemon announces none)."""
    limit = api.request("GET", "/v1/sessions").headers.get(MAX_BODY_HEADER, "")
    size = body_size(body)
    if limit.isdigit() and size > int(limit):
        raise ClientError(
            f"the bundle is {size} bytes as JSON, over the daemon's limit of {limit} "
            f"(server.max_body_bytes); leave files out with .gitignore or run a smaller PATH"
        )
    return int(limit) if limit.isdigit() else None


def _ask_terms(error: ApiError, accepted: str | None) -> str:
    """The terms version to send, after showing them and asking. Raises ClientError."""
    terms = (error.body or {}).get("terms") or {}
    version = str(terms.get("version", ""))
    if accepted is not None:
        raise ClientError(f"--accept-terms {accepted!r} is not the current version {version!r}")
    print(f"{terms.get('title', 'Terms')} (version {version})\n\n{terms.get('body', '')}\n",
          file=sys.stderr)  # fmt: skip
    if not os.isatty(0):
        raise ClientError(f"this runner needs its terms accepted: --accept-terms {version}")
    answer = input("Accept these terms? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise ClientError("terms not accepted; nothing was started")
    return version


def start(api: Api, args: argparse.Namespace) -> str:
    """POST the start (asking for terms once if needed); the new session id."""
    path, body = build_request(api, args)
    return post_start(api, path, body, args.accept_terms)


def post_start(api: Api, path: str, body: dict[str, Any], accept_terms: str | None) -> str:
    """POST `body` to `path`, with our terminal's size, asking for the terms
    once if the runner needs them; the new session id. Raises ClientError."""
    size = terminal_size(0) if os.isatty(0) else None
    sized = {TERMINAL_SIZE_HEADER: "{}x{}".format(*size)} if size is not None else {}
    headers = {TERMS_HEADER: accept_terms} if accept_terms else {}
    try:
        reply = api.request("POST", path, body, {**sized, **headers})
    except ApiError as exc:
        if exc.status != 428:
            raise
        headers = {TERMS_HEADER: _ask_terms(exc, accept_terms)}
        reply = api.request("POST", path, body, {**sized, **headers})
    session_id: str = reply.body["sessionId"]
    return session_id


def run_session(api: Api, args: argparse.Namespace) -> int:
    session_id = start(api, args)
    if args.detach:
        print(session_id)
        return EXIT_OK
    from runnerd.client.attach import finish, stdin_mode
    from runnerd.client.interrupt import run_trio
    from runnerd.client.pty_channel import ChannelEnd, Ended, follow_channel
    from runnerd.client.wait import wait_started

    async def main() -> ChannelEnd | None:
        if not await wait_started(api, session_id):
            return None
        return await follow_channel(api.endpoint, session_id, mode=stdin_mode())

    try:
        end = run_trio(main)
    except KeyboardInterrupt:  # Ctrl-C without a raw terminal: we leave, it stays
        end = ChannelEnd(Ended.DETACHED, signal=signal.SIGINT)
    if end is None:
        print(f"runnerd: {session_id}: lost the event stream", file=sys.stderr)
        return EXIT_ERROR
    return finish(api, session_id, end)
