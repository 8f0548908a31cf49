"""The local backend's host probes, found once at start-up, and the child
process that finds them beside the daemon's own imports.

Owns `HostQuestion` (what the probes depend on: the `[local]` keys they
read, and whether the daemon is root), `HostFindings` (what they found),
`probe_host` (the probes in order: the containment, the network on that
plan, then the session init's interpreter and the compiled init, each tried
as a session runs it), `find_host` (what the backend calls when it is
built), and `open_probe_child` (the same probes in a `python -I -S` child).

`runnerd serve` starts the child once the config is read and before it
imports the serving layer (`runnerd.local.provider.probe_ahead`): the
~100 ms of children the probes start and wait for then overlap those
imports on another core instead of delaying the first answer (issue 22;
bench/README.md, "Start"). A process, not a thread: the probes fork, and a
fork while another thread imports inherits that import's lock (a
`preexec_fn` importing anything would hang); a thread would also share the
GIL with the imports. The child imports the stdlib and the probe modules
only (`containment`, `identity`, `mounts`, `network`, `initpython`).

The findings are the same either way: the child runs `probe_host` on the
question asked when it started, and they are used only when that is the
question the backend asks when it is built; a child that failed in any way
(a crash, no answer) is logged and the backend probes in the daemon, as it
does without a child. The compiled init is opened by the daemon before the
child starts and the child checks that open file (passed to it): the file
checked is the file every session's init runs, as when checked in the
daemon. What the probes log in the child is logged by the daemon when it
takes the findings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runnerd.local.containment import Containment, ContainmentPlan, probe_containment
from runnerd.local.identity import SessionIdentity
from runnerd.local.initpython import (
    InitBinary,
    check_init_binary,
    choose_init_python,
    init_binary_wanted,
    open_init_binary,
    take_init_binary,
)
from runnerd.local.network import NetworkMode, NetworkPlan, probe_network

if TYPE_CHECKING:
    from runnerd.local.settings import LocalConfig

log = logging.getLogger(__name__)

# The package's parent directory: what the child puts on its path (-I
# leaves the current directory and PYTHONPATH out).
_ROOT = str(Path(__file__).resolve().parents[2])
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]);"
    " from runnerd.local.hostprobe import run_child; run_child(sys.argv[2])"
)


@dataclass(frozen=True)
class HostQuestion:
    """What the probes depend on (`of`: from the `[local]` table)."""

    allow_namespaces: bool  # local.containment = "auto"
    session_uid: int | None  # a root daemon's sessions drop to this uid
    uid_base: int
    network: str
    init_python: str | None

    @classmethod
    def of(cls, local: LocalConfig) -> HostQuestion:
        return cls(
            allow_namespaces=local.containment == "auto",
            session_uid=local.session_uid_base if os.geteuid() == 0 else None,
            uid_base=local.session_uid_base,
            network=local.network,
            init_python=local.init_python,
        )


@dataclass(frozen=True)
class HostFindings:
    """What the probes found: the containment plan (a network namespace
    added where there is one), the network, the init's interpreter (or why
    none runs: `init_problem`), whether sessions would run the compiled init
    (`binary_wanted`) and why it does not run (`binary_problem`)."""

    plan: ContainmentPlan
    net: NetworkPlan
    init_python: str
    init_problem: str | None
    binary_wanted: bool
    binary_problem: str | None

    def dump(self) -> str:
        """As JSON, for `load` (the child's answer)."""
        return json.dumps(dataclasses.asdict(self), default=lambda mode: mode.value)

    @classmethod
    def load(cls, text: str) -> HostFindings:
        """What `dump` wrote. Raises ValueError, KeyError or TypeError for
        anything else."""
        raw = json.loads(text)
        plan, net = raw.pop("plan"), raw.pop("net")
        plan["containment"] = Containment(plan["containment"])
        net["mode"] = NetworkMode(net["mode"])
        if net["outbound"] is not None:
            net["outbound"] = tuple(net["outbound"])
        return cls(ContainmentPlan(**plan), NetworkPlan(**net), **raw)


def probe_host(question: HostQuestion, binary: InitBinary | str) -> HostFindings:
    """The probes, in this process; `binary`: the compiled init, opened, or
    why it could not be (`open_init_binary`). Never raises."""
    plan = probe_containment(
        allow_namespaces=question.allow_namespaces, session_uid=question.session_uid
    )
    # Who runs the init is checked once, as a session would run it.
    probe_as = SessionIdentity(question.uid_base, question.uid_base) if plan.drops_root else None
    plan, net = probe_network(question.network, plan, probe_as)
    init_python, init_problem = choose_init_python(plan, question.init_python, probe_as)
    wanted = init_binary_wanted(plan, question.init_python)
    problem = None
    if wanted:
        problem = binary if isinstance(binary, str) else check_init_binary(plan, probe_as, binary)
    return HostFindings(plan, net, init_python, init_problem, wanted, problem)


def find_host(local: LocalConfig, ahead: object = None) -> tuple[HostFindings, InitBinary | None]:
    """The findings for `local`, and the compiled init sessions run (its fd
    the caller's to hold), or None. From the probe child `ahead` when it was
    asked the same question and answered; else probed here. Never raises."""
    question = HostQuestion.of(local)
    taken = ahead.take(question) if isinstance(ahead, ProbeChild) else None
    if taken is None:
        opened = open_init_binary()
        taken = probe_host(question, opened), opened
    findings, opened = taken
    if findings.binary_wanted:
        return findings, take_init_binary(opened, findings.binary_problem)
    if isinstance(opened, InitBinary):
        os.close(opened.fd)
    return findings, None


class ProbeChild:
    """The probe child, running (see the module). `take` once; `close`
    reaps it, whatever happened."""

    def __init__(self, question: HostQuestion, opened: InitBinary | str) -> None:
        self.question = question
        self._opened: InitBinary | str | None = opened
        binary = opened if isinstance(opened, str) else {"path": str(opened.path), "fd": opened.fd}
        asked = json.dumps({"question": dataclasses.asdict(question), "binary": binary})
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _CHILD, _ROOT, asked],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            pass_fds=() if isinstance(opened, str) else (opened.fd,),
            cwd="/",
        )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def take(self, question: HostQuestion) -> tuple[HostFindings, InitBinary | str] | None:
        """The child's findings and the compiled init it checked, when it
        was asked `question` and answered; else None (logged when it failed),
        and the caller probes itself. Waits for the child."""
        if question != self.question or self._opened is None:
            self.close()
            return None
        answer = self._answer()
        opened, self._opened = self._opened, None
        if answer is None:
            if isinstance(opened, InitBinary):
                os.close(opened.fd)
            return None
        return answer, opened

    def _answer(self) -> HostFindings | None:
        assert self._proc.stdout is not None
        with self._proc.stdout:
            output = self._proc.stdout.read()
        code = self._proc.wait()
        findings = None
        if code == 0:
            try:
                answer = json.loads(output)
                findings = HostFindings.load(answer["findings"])
                for name, level, message in answer["logged"]:
                    logging.getLogger(name).log(level, "%s", message)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("the start-up probe child's answer is unreadable (%s)", exc)
        if findings is None:
            log.warning("the start-up probe child failed (exit %s): probing again", code)
        return findings

    def close(self) -> None:
        """Reaps the child (it ends by itself: the probes are bounded), and
        closes the compiled init's fd unless it was taken. Idempotent."""
        if self._proc.stdout is not None:
            self._proc.stdout.close()  # an answer nobody reads: it ends on EPIPE
        self._proc.wait()
        opened, self._opened = self._opened, None
        if isinstance(opened, InitBinary):
            os.close(opened.fd)


@contextlib.contextmanager
def open_probe_child(local: LocalConfig) -> Iterator[ProbeChild | None]:
    """The probe child for `local`, started now, for the backend to take
    (`find_host`); None when it cannot be started, or when this process may
    run on one CPU only (the child's interpreter and imports, ~50 ms of CPU,
    would then delay the daemon's imports as much as it saves): the backend
    probes itself then. Reaped on exit."""
    if len(os.sched_getaffinity(0)) < 2:
        yield None
        return
    opened = open_init_binary()
    try:
        child = ProbeChild(HostQuestion.of(local), opened)
    except OSError as exc:
        if isinstance(opened, InitBinary):
            os.close(opened.fd)
        log.warning("cannot start the start-up probe child (%s): probing in the daemon", exc)
        yield None
        return
    try:
        yield child
    finally:
        child.close()


class _Records(logging.Handler):
    """What the probes log in the child, kept to be handed back."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


def run_child(asked: str) -> None:
    """The child's body: probe what `asked` says, write the answer on stdout."""
    handler = _Records()
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG)
    request = json.loads(asked)
    raw = request["binary"]
    binary = raw if isinstance(raw, str) else InitBinary(Path(raw["path"]), raw["fd"])
    findings = probe_host(HostQuestion(**request["question"]), binary)
    with os.fdopen(1, "w") as out:
        json.dump({"findings": findings.dump(), "logged": handler.records}, out)
