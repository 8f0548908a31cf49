"""What a session uid must reach, checked at start-up: the Python that runs
each session's init (`runnerd.local.nsinit`), the way to the workdir, and
the runtimes' programs.

Owns the start-up check that the init's interpreter runs as a session runs
it: in the plan's namespaces, as the session uid (`identity`). Issue 17
item 7: a venv whose python lives under a 0700 home ran for the daemon and
not for its sessions, and every start failed naming the runtime instead.

The order: `local.init_python` when set (the only one tried), else
runnerd's own interpreter, else `SYSTEM_PYTHON` (nsinit needs only the
stdlib). Each check runs the interpreter once (`-I -S -c ""`, ~20 ms).

A run session's init (and a watch session's holder) runs the compiled
init instead (`nsinit.c`, built by `make` into `NSINIT_BIN`: no interpreter
per session, issue 22) when it is built, runs as a session runs it
(`choose_init_binary`), and `local.init_python` is not set (set, the
operator chose the Python init). A watch session's apps (`nsinit --nest`)
always run the Python one.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from runnerd.local.containment import Containment, ContainmentPlan, probe_child
from runnerd.local.fdpass import park
from runnerd.local.identity import SessionIdentity, blocking_directory
from runnerd.local.mounts import PRIVATE_DIRS

log = logging.getLogger(__name__)

SYSTEM_PYTHON = "/usr/bin/python3"
NSINIT_BIN = Path(__file__).with_name("nsinit.bin")
# What `nsinit.bin --check` prints: the arguments it takes (`nsinit.c`). A
# binary built from older sources answers otherwise and is not used.
NSINIT_PROTOCOL = "runnerd-nsinit 5"


@dataclass(frozen=True)
class InitBinary:
    """The compiled init, opened once at start: `fd` (close-on-exec, held
    for the backend's life) is the file that was checked and the file every
    session's init execs (`exec_path`, the fd passed open), whatever `path`
    names by then: a file swapped in later never runs as root."""

    path: Path
    fd: int

    @property
    def exec_path(self) -> str:
        """argv[0] for a child that has `fd` passed open (`nsinit.c` closes
        it first thing)."""
        return f"/proc/self/fd/{self.fd}"


def unreachable_workdir(workdir: str) -> str | None:
    """Why a session uid cannot reach its directory under `workdir` (it
    re-enters it by path in its mount namespace; the workdir itself may be
    0700, it is covered there), None when it can."""
    blocked = blocking_directory(workdir, PRIVATE_DIRS)
    if blocked is None:
        return None
    return f"session uids cannot reach {workdir}: {blocked} is not searchable by others"


def unreachable_program(program: str) -> str | None:
    """Why a session uid cannot run the runtime program `program` (an
    absolute path), None when nothing stands in the way."""
    if any(program.startswith(p + "/") for p in PRIVATE_DIRS):
        return f"{program} is in the host's {program.split('/')[1]}, which sessions do not see"
    blocked = blocking_directory(program)
    if blocked is None:
        return None
    return f"session uids cannot run {program}: {blocked} is not searchable by others"


def choose_init_python(
    plan: ContainmentPlan, configured: str | None, identity: SessionIdentity | None
) -> tuple[str, str | None]:
    """The interpreter to run the init with, and None; or the first
    candidate and the sentence saying why it does not run (none did: the
    caller refuses to start). Without a PID namespace there is no init, and
    nothing is checked. Never raises."""
    first = configured or sys.executable
    if plan.containment is not Containment.PID_NAMESPACE:
        return first, None
    problem = check_init_python(plan, first, identity)
    if problem is None or configured is not None:
        return first, problem
    if os.path.realpath(SYSTEM_PYTHON) != os.path.realpath(first):
        if check_init_python(plan, SYSTEM_PYTHON, identity) is None:
            log.info("%s; the session init runs %s instead", problem, SYSTEM_PYTHON)
            return SYSTEM_PYTHON, None
    return first, problem


def check_init_python(
    plan: ContainmentPlan, python: str, identity: SessionIdentity | None
) -> str | None:
    """None when `python` runs (`-I -S`, as `nsinit`) as a session does,
    under `plan` and `identity`; else the sentence naming the file that
    failed and why. Never raises."""
    child = functools.partial(probe_child, plan.unshare_flags, False, identity)
    argv = [python, "-I", "-S", "-c", ""]
    try:
        done = subprocess.run(argv, preexec_fn=child, cwd="/", capture_output=True, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
    else:
        if done.returncode == 0:
            return None
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        why = lines[0] if lines else f"exit code {done.returncode}"
    who = "the session uid" if identity is None else f"session uid {identity.uid}"
    real = os.path.realpath(python)
    hidden = next((d for d in PRIVATE_DIRS if python.startswith(d + "/")), None)
    where = None if hidden is not None else blocking_directory(python)
    because = ""
    if hidden is not None:  # first: it hides the rest of the path
        because = f" ({python} is in the host's {hidden[1:]}, which sessions do not see)"
    elif where is not None:
        because = f" ({where} is not searchable by others)"
    shown = python if real == python else f"{python} (-> {real})"
    return f"the session init's interpreter {shown} does not run as {who}: {why}{because}"


def choose_init_binary(
    plan: ContainmentPlan,
    configured_python: str | None,
    identity: SessionIdentity | None,
    binary: Path = NSINIT_BIN,
) -> InitBinary | None:
    """The compiled init to run sessions' inits with, opened (its fd is the
    caller's, held), or None (the Python init runs): without a PID
    namespace (no init at all), with `local.init_python` set, when
    `binary` was not built, or when it does not run as a session does
    (logged: the Python init then runs). Never raises."""
    if not init_binary_wanted(plan, configured_python):
        return None
    opened = open_init_binary(binary)
    problem = opened if isinstance(opened, str) else check_init_binary(plan, identity, opened)
    return take_init_binary(opened, problem)


def init_binary_wanted(plan: ContainmentPlan, configured_python: str | None) -> bool:
    """Whether sessions' inits run the compiled init if it checks out: with
    a PID namespace (else there is no init) and `local.init_python` unset
    (set, the operator chose the Python init)."""
    return plan.containment is Containment.PID_NAMESPACE and configured_python is None


# Why the compiled init is not used when it was never built: a host without a
# C compiler, a supported set-up (INFO). Any other reason (built but stale,
# not running as a session, unopenable) is a WARNING: it silently costs every
# session an interpreter and turns the warm pool off.
NOT_BUILT = "is not built (make builds it)"


def open_init_binary(binary: Path = NSINIT_BIN) -> InitBinary | str:
    """`binary` opened close-on-exec, to be checked and run by that fd; or
    the sentence saying why it cannot be (not built, not openable). Never
    raises."""
    if not os.access(binary, os.X_OK):
        return f"{binary} {NOT_BUILT}"
    try:
        # Checked by this fd and run by it: the file checked is the file run.
        # Parked (`runnerd.local.fdpass`): every session's spawn hands it on.
        return InitBinary(binary, park(os.open(binary, os.O_RDONLY | os.O_CLOEXEC)))
    except OSError as exc:
        return f"cannot open {binary} ({exc.strerror})"


def check_init_binary(
    plan: ContainmentPlan, identity: SessionIdentity | None, binary: InitBinary
) -> str | None:
    """None when `binary` runs as a session runs it; else the sentence
    naming it and why not. Never raises."""
    problem = _check_init_binary(plan, identity, binary)
    return None if problem is None else f"{binary.path} {problem}"


def take_init_binary(opened: InitBinary | str, problem: str | None) -> InitBinary | None:
    """`opened` when it checked out (`problem` None); else None, with
    `problem` logged and `opened` closed: the Python init runs."""
    if problem is None and isinstance(opened, InitBinary):
        return opened
    if isinstance(opened, InitBinary):
        os.close(opened.fd)
    never_built = isinstance(opened, str) and opened.endswith(NOT_BUILT)
    log.log(
        logging.INFO if never_built else logging.WARNING,
        "%s: the session init runs in Python",
        problem,
    )
    return None


def _check_init_binary(
    plan: ContainmentPlan, identity: SessionIdentity | None, binary: InitBinary
) -> str | None:
    """None when `binary --check` runs as a session runs it (passed open,
    exec'd by its fd's name) and answers `NSINIT_PROTOCOL`; else why not."""
    child = functools.partial(probe_child, plan.unshare_flags, False, identity)
    try:
        done = subprocess.run(
            [binary.exec_path, "--check"],
            preexec_fn=child,
            cwd="/",
            pass_fds=(binary.fd,),
            capture_output=True,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"does not run ({exc})"
    if done.returncode != 0:
        return f"exited {done.returncode}"
    if done.stdout.decode(errors="replace").strip() != NSINIT_PROTOCOL:
        return "is stale (make rebuilds it)"
    return None
