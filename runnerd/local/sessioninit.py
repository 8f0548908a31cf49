"""How a session's init is run and told what to do, and what it reports.

Owns `Launch` (who a session's first process is: its containment, view,
cgroup, uid and init), the init's command line (`init_argv`: the compiled
init, `nsinit.c`, with the containment's set-up as arguments when it does
that itself, `self_contained`; else the Python one, `nsinit.py`) and the
reading of its status pipe (`read_namespace_status`, `read_setup_status`,
`read_exec_status`).
`runnerd.local.spawn` forks it.

Error handling: the status readers raise OSError for a set-up the init
reported failed (the same error a failed `preexec_fn` gives); nothing here
closes the fd it reads.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from runnerd.local.containment import CLONE_NEWNS, PROCESS_GROUP_PLAN, ContainmentPlan
from runnerd.local.identity import SessionIdentity
from runnerd.local.initpython import InitBinary
from runnerd.local.mounts import NOTHING_HIDDEN, SessionView, covers

NSINIT = Path(__file__).with_name("nsinit.py")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """Who the session's first process is: contained as `plan`, seeing
    the host as `view`, in `cgroup`, as `identity` (a root daemon's session
    uid; None keeps the daemon's), its init the compiled `init_binary`
    (`nsinit.c`) when given, else run by `init_python`. `join`:
    a watch session's app joins the namespaces of its sandbox's holder
    (`joined.open_namespaces` of it, under `plan`; the fds stay the
    caller's) instead of making its own (`view` is then the holder's) and
    gets a PID namespace of its own nested in the holder's (`nsinit
    --nest`, always the Python init). `warm`: a sandbox made ahead
    (`runnerd.local.warm`, the compiled init's `--warm`): its workload
    comes later, with the go (`go_file`)."""

    plan: ContainmentPlan = PROCESS_GROUP_PLAN
    cgroup: Path | None = None
    view: SessionView = NOTHING_HIDDEN
    identity: SessionIdentity | None = None
    init_python: str = sys.executable
    join: tuple[int, ...] | None = None
    init_binary: InitBinary | None = None
    warm: bool = False


DEFAULT_LAUNCH = Launch()  # a process group, no init


# The compiled init's own environment: it is exec'd as root, before any uid
# change or namespace, so nothing of the client's (LD_PRELOAD, LD_AUDIT...)
# may reach its loader; the workload's goes in a memfd (`env_file`).
INIT_ENV: dict[str, str] = {}


def init_argv(
    launch: Launch,
    argv: Sequence[str],
    status_w: int,
    sockets_fd: int | None,
    env: Mapping[str, str] | None = None,
    hand: Callable[[int], int] = int,
) -> tuple[list[str], int | None]:
    """`argv` run by `nsinit` (see its usage), and the fd passed open with
    it, the caller's to close once forked: the script (closed by `nsinit`
    first thing), or for the compiled init `env` in a memfd (`--env`).
    The compiled init must then be run with `INIT_ENV`, not `env`. Every
    fd the child gets is named in argv by `hand(fd)`, the number it is
    handed on at (`runnerd.local.fdpass.Passing`; by default its own)."""
    opts = ["--nest"] if launch.join is not None else []
    opts += ["--proc"] if launch.plan.fresh_proc else []
    status = str(hand(status_w))
    if sockets_fd is not None:
        opts += ["--sockets", str(hand(sockets_fd))]
    if launch.join is not None:
        # Its exec comes after it joined the holder's mount namespace, whose
        # /proc is the session's, where it has no /proc/self: the source
        # goes as an argument (the daemon read it; the session uid may not).
        init = [launch.init_python, "-I", "-S", "-c", NSINIT.read_text(), status]
        return [*init, *opts, "--", *argv], None
    if self_contained(launch):
        # Exec'd as the daemon, before any uid change or mount: by its path.
        binary = launch.init_binary
        assert binary is not None  # self_contained
        env_fd = None
        if launch.warm:
            opts += ["--warm"]  # no workload, no env yet: `go_file`'s
        else:
            env_fd = env_file(env or {})
            opts += ["--env", str(hand(env_fd))]
        # By its fd (passed open by the caller): the file checked at start.
        init = [binary.exec_path, status, *opts, *setup_args(launch)]
        return [*init, "--", *argv], env_fd
    # Passed open: the session uid may not reach runnerd's install.
    script = os.open(NSINIT, os.O_RDONLY | os.O_CLOEXEC)
    init = [launch.init_python, "-I", "-S", f"/proc/self/fd/{hand(script)}", status]
    return [*init, *opts, "--", *argv], script


def env_file(env: Mapping[str, str]) -> int:
    """A close-on-exec memfd holding `env` as NUL-separated `NAME=value`s
    (the compiled init's `--env`). Raises ValueError for a NUL in it."""
    return _fields_file(_env_fields(env))


def go_file(keep: Path | None, cwd: Path, argv: Sequence[str], env: Mapping[str, str]) -> int:
    """A close-on-exec memfd holding a warm sandbox's go (`nsinit.c`'s
    `--warm`): the session's directory its kept one is moved to (None: no
    move), the workload's cwd, argc, argv and `env`. Raises ValueError for
    a NUL in any of them (or an `=` in an env name)."""
    paths = [b"" if keep is None else os.fsencode(keep), os.fsencode(cwd)]
    args = [os.fsencode(arg) for arg in argv]
    if not args or any(b"\0" in field for field in paths + args):
        raise ValueError("an empty argv or a null byte in it")
    return _fields_file([*paths, str(len(args)).encode(), *args, *_env_fields(env)])


def _env_fields(env: Mapping[str, str]) -> list[bytes]:
    pairs = [(os.fsencode(k), os.fsencode(v)) for k, v in env.items()]
    if any(b"\0" in k + v or b"=" in k for k, v in pairs):
        # What Popen refuses for an env, refused the same way here.
        raise ValueError("illegal environment variable name or a null byte in the env")
    return [k + b"=" + v for k, v in pairs]


def _fields_file(fields: Sequence[bytes]) -> int:
    """A close-on-exec memfd of `fields`, each ended by a NUL."""
    text = b"".join(field + b"\0" for field in fields)
    fd = os.memfd_create("runnerd-session-env", os.MFD_CLOEXEC)
    try:
        view = memoryview(text)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return fd


def self_contained(launch: Launch) -> bool:
    """The compiled init sets up this launch's containment itself (a run
    session's or a holder's: not a joined app's)."""
    return launch.init_binary is not None and launch.join is None


def setup_args(launch: Launch) -> list[str]:
    """What `preexec_contained` would do, as the compiled init's SETUP
    arguments (see `nsinit.c`): the daemon (parent-death check), the
    plan's flags, the session uid, the cgroup, the mount view's covers."""
    flags = launch.plan.unshare_flags
    args = ["--setup", str(os.getpid()), hex(flags)]
    if launch.identity is not None:
        args += ["--identity", str(launch.identity.uid), str(launch.identity.gid)]
    if launch.cgroup is not None:
        args += ["--cgroup", str(launch.cgroup)]
    if flags & CLONE_NEWNS:
        if launch.view.keep is not None:
            args += ["--keep", launch.view.keep]
        for path in covers(launch.view):
            args += ["--cover", path]
    return args


async def read_setup_status(fd: int) -> None:
    """Wait for the compiled init's `R` (its containment is set up).
    Raises OSError when it reported a failure or died first."""
    await _expect(fd, b"R")


async def read_namespace_status(fd: int) -> None:
    """Wait for the compiled init's `N`, which it writes (given `--sockets`)
    once its namespaces exist with `lo` up, before its mounts: slirp4netns
    may attach from then on. Raises OSError as `read_setup_status`."""
    await _expect(fd, b"N")


async def _expect(fd: int, marker: bytes) -> None:
    os.set_blocking(fd, False)
    first = await _read(fd, 1)
    if first == marker:
        return
    rest = first
    while first:  # the init exits right after reporting: read to EOF
        first = await _read(fd, 64)
        rest += first
    raise setup_failed(rest)


async def read_exec_status(fd: int) -> int:
    """The errno the workload's exec failed with, or 0 once it exec'd (EOF).
    Raises OSError when the compiled init could not set up the containment
    (`S<errno>`: the daemon's `preexec_fn` failing, as before)."""
    os.set_blocking(fd, False)
    data = b""
    while chunk := await _read(fd, 64):
        data += chunk
    if data.startswith(b"S"):
        raise setup_failed(data)
    return int(data or b"0")


def setup_failed(report: bytes) -> OSError:
    """The error for the compiled init's failure `report` (`S<errno>`, an
    errno, or nothing: it died): its errno and strerror, which name no
    path (client-safe); the raw report is logged."""
    digits = report.removeprefix(b"S")
    code = int(digits) if digits.isdigit() and 0 < int(digits) < 4096 else errno.EPERM
    log.warning("the compiled session init failed its set-up: %r (errno %d)", report, code)
    why = os.strerror(code) if digits.isdigit() else "the init exited before reporting"
    return OSError(code, f"cannot set up the session's containment: {why}")


async def _read(fd: int, size: int) -> bytes:
    """Up to `size` bytes of the non-blocking `fd`, waiting for them (b"": EOF)."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
