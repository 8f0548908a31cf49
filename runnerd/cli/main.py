"""The `runnerd` command line: `serve`, `check-config`, and the client verbs.

Owns argument parsing and the exit codes:
- 0: `serve` shut down cleanly, or `check-config` found the config valid;
- 2: the operator must fix something first (a config error, naming the key
  path, or a listener that cannot be set up); nothing was left listening;
- 1: anything unexpected (logged with its traceback);
- 75 (`EXIT_DETACHED`): `serve` detached on SIGUSR2, leaving its sessions
  running for a successor; the unit's `RestartForceExitStatus=` starts it
  again at once (README.md, "Restarts and upgrades").

The client verbs (`run`, `watch`, `reload`, `ls`, `logs`, `events`, `attach`,
`stop`, `apps`, `probe`, `completion`) live in `runnerd.client`; `run` and
`attach` exit with the session's code (see `runnerd.client.attach`), `watch`
as `runnerd.client.watch` says; every verb exits 2 on a
usage error, argparse's or its own (`runnerd.client.verbs.dispatch`).
Imports are lazy: a client verb never loads the daemon's stack, and `check-config` never loads trio.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from runnerd import __version__
from runnerd.client.args import CLIENT_VERBS, add_client_verbs

if TYPE_CHECKING:
    from runnerd.config import Config

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
# EX_TEMPFAIL (sysexits.h): not an error, and "start me again" to a supervisor.
EXIT_DETACHED = 75

log = logging.getLogger("runnerd")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runnerd",
        description="Serve the Telo runner /v1 contract on this host, and use it.",
    )
    parser.add_argument("--version", action="version", version=f"runnerd {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in (
        ("serve", "run the daemon until SIGTERM/SIGINT (SIGHUP reloads the config)"),
        ("check-config", "validate the config and print it, secrets masked"),
    ):
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument(
            "--config",
            required=True,
            type=Path,
            metavar="PATH",
            help="the TOML config file (apps.d/ next to it is read too)",
        )
    add_client_verbs(commands)
    return parser


def read_config(path: Path) -> Config:
    """Load and validate `path`. Raises ConfigError naming the key path."""
    from runnerd.backends import check_config, load_config
    from runnerd.config import ConfigError

    try:
        config = check_config(load_config(path))
    except OSError as exc:
        raise ConfigError("", f"cannot read config {path}: {exc.strerror or exc}") from exc
    # SIGHUP re-reads this file, whatever load_config recorded.
    return config if config.source is not None else replace(config, source=path)


def read_config_or_report(path: Path) -> Config | None:
    """`read_config`, with a config error printed to stderr (None then)."""
    from runnerd.config import ConfigError

    try:
        return read_config(path)
    except ConfigError as exc:
        print(f"runnerd: {path}: {exc}", file=sys.stderr)
        return None


def check_config(path: Path) -> int:
    from runnerd.backends import provider_for, render_config
    from runnerd.config.server import server_warnings

    config = read_config_or_report(path)
    if config is None:
        return EXIT_CONFIG
    provider = provider_for(config)
    print(render_config(config))
    for warning in provider.config_warnings(config, os.environ.get("PATH")):
        print(f"runnerd: warning: {warning}", file=sys.stderr)
    for warning in server_warnings(config.server):
        print(f"runnerd: warning: {warning}", file=sys.stderr)
    return EXIT_OK


# The collector while serving: the youngest generation collected every
# 10,000 net allocations, not 700. Each session's start allocates a few
# thousand objects that mostly live as long as it does, so at 700 the
# collector ran ~630 young, ~57 middle and 5 full collections in a burst of
# 1,000 starts: 1.3-1.5 s of the daemon's CPU, ~15% of it. At 10,000: 41, 3
# and none, 0.35-0.41 s, the daemon's RSS with the 1,000 sessions alike
# (99 MB); `gc.freeze()` at readiness on top saved nothing more.
SERVING_GC_THRESHOLD = (10_000, 10, 10)


def serve(path: Path) -> int:
    # Imported here: `check-config` must not pay for hypercorn and quart.
    # The youngest generation is collected 7× less often while the server's
    # stack and the backend (`read_config` imports it) load: ~55k objects
    # that mostly live as long as the daemon, whose allocation triggered
    # collections that freed little (581 -> 553 ms of CPU for these imports,
    # median of 11; pausing the collector outright saved as much but left
    # +0.8 MB of RSS in uncollected cycles).
    thresholds = gc.get_threshold()
    gc.set_threshold(5000, *thresholds[1:])
    # The dataclasses' methods the imports below make, compiled at install
    # (runnerd/daemon/dataclasscache.py); released once they are made.
    from runnerd.daemon import dataclasscache

    dataclasscache.install()
    try:
        # First: what quart and hypercorn import but never serve with
        # (their test client, the development servers, HTTP/2) waits for
        # first use (runnerd/daemon/deferred.py).
        from runnerd.daemon.deferred import defer_unused_modules

        defer_unused_modules()
        from runnerd.backends import provider_for

        config = read_config_or_report(path)
        if config is None:
            return EXIT_CONFIG
        # Before the serving layer's imports: what the backend probes of the
        # host (the local one's containment, network and init checks) runs
        # beside them, in a child, and is taken when the backend opens.
        with provider_for(config).probe_ahead(config) as ahead:
            code = _serve_imported(config, ahead)
    finally:
        gc.set_threshold(*thresholds)
        dataclasscache.release()
    if code in (EXIT_OK, EXIT_DETACHED):  # a clean end: nothing left to free
        exit_now(code)
    return code


def _serve_imported(config: Config, ahead: object) -> int:
    """The daemon's stack imported, then run on `config` until it ends (the
    collector at `SERVING_GC_THRESHOLD`): the exit code."""
    import trio

    from runnerd.config import ConfigError
    from runnerd.daemon import dataclasscache
    from runnerd.daemon.listeners import ListenError
    from runnerd.daemon.logs import setup_logging
    from runnerd.daemon.main import Ended, run_daemon

    gc.set_threshold(*SERVING_GC_THRESHOLD)
    setup_logging(config.server.log_level)
    taken, compiled = dataclasscache.counts()
    dataclasscache.release()
    log.debug(
        "dataclass methods: %d from %s, %d compiled",
        taken,
        dataclasscache.CACHE_PATH.name,
        compiled,
    )
    try:
        ended = trio.run(run_daemon, config, ahead)
    except KeyboardInterrupt:
        # Ctrl-C before the signal handlers were in place: nothing was serving.
        return EXIT_INTERRUPTED
    except Exception as exc:
        refusal = operator_error(exc, (ConfigError, ListenError))
        if refusal is None:
            log.exception("runnerd crashed")
            return EXIT_FAILURE
        log.error("cannot start: %s", refusal)
        return EXIT_CONFIG
    return EXIT_DETACHED if ended is Ended.DETACHED else EXIT_OK


def exit_now(code: int) -> NoReturn:
    """Exit with `code` without the interpreter's teardown: after a clean
    shutdown every session, socket and file is already dealt with, and
    freeing the heap of a daemon that served 1,000 sessions object by
    object took seconds under load (bench/README.md, "SIGTERM with 1,000
    live sessions"). What is buffered for the log is flushed first."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def operator_error(exc: BaseException, kinds: tuple[type[Exception], ...]) -> Exception | None:
    """`exc` if it is one of `kinds`, or the first of them inside an exception
    group made only of such errors (a backend that runs tasks for the
    daemon's lifetime, the kubernetes one, wraps what its block raises:
    a `state_dir` or listener refusal must still exit 2, not as a crash)."""
    if isinstance(exc, kinds):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        leaves = [operator_error(e, kinds) for e in exc.exceptions]
        if leaves and all(leaf is not None for leaf in leaves):
            return leaves[0]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "check-config":
        return check_config(args.config)
    if args.command in CLIENT_VERBS:
        from runnerd.client.verbs import dispatch

        return dispatch(args, parser)
    return serve(args.config)


if __name__ == "__main__":
    sys.exit(main())
