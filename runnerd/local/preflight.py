"""What the local backend checks before a session runs, apart from running one.

Once, at construction (`runnerd.local.backend.LocalBackend`, which probes the
host): `announce` logs what this host gives sessions (PID namespaces, the
network, the session uids, cgroup ceilings) and returns what it does not,
the notices of `/v1/capabilities`, each also logged as a warning; a runtime
nothing can start (a missing program, one the session uids cannot reach) is
worth a warning before the first session fails.

At a probe and at each start: `resolve_image` turns an image into the
runtime it names and that runtime's executable, refusing one the sessions'
uids cannot run without naming the host's paths (those are in the log);
`start_checks` adds what a start alone refuses. Nothing keeps state.
"""

from __future__ import annotations

import logging
import os

from runnerd.backend import RunSpec, StartError
from runnerd.local.cgroups import SessionCgroups
from runnerd.local.containment import ContainmentPlan
from runnerd.local.identity import SessionUids
from runnerd.local.initpython import unreachable_program
from runnerd.local.launch import (
    Unresolved,
    read_interpreter,
    resolve_executable,
    resolve_runtime,
    same_file,
    search_path,
)
from runnerd.local.network import NetworkPlan
from runnerd.local.runtimes import runtime_problems
from runnerd.local.settings import LocalConfig, RuntimeConfig

# The backend's logger: these lines are the backend's start-up, as before.
log = logging.getLogger("runnerd.local.backend")


def announce(
    local: LocalConfig,
    *,
    plan: ContainmentPlan,
    net: NetworkPlan,
    uids: SessionUids | None,
    cgroups: SessionCgroups | None,
    no_cgroups: str,
) -> tuple[str, ...]:
    """Log what this host gives sessions; return what it does not, for
    `/v1/capabilities`."""
    notices: tuple[str, ...] = ()
    for notice in (plan.identity_notice, plan.ipc_notice):
        if notice is not None:
            notices += (notice,)
    if plan.notice is not None:
        notices += (plan.notice,)
    else:
        log.info("sessions run in PID namespaces")
    if net.notice is not None:
        notices += (net.notice,)
    else:
        log.info("%s", net.describe())
    if uids is not None:
        last = uids.base + uids.count - 1
        log.info("sessions run as uids %s-%s", uids.base, last)
    if cgroups is None:
        notices += (f"Resource ceilings (cpu, memory) are not enforced: {no_cgroups}.",)
    else:
        log.info("session ceilings in cgroup %s", cgroups.root)
    for notice in notices:
        log.warning("%s", notice)
    _warn_runtimes(local, uids)
    return notices


def _warn_runtimes(local: LocalConfig, uids: SessionUids | None) -> None:
    # A runtime nothing can start is worth a line before the first session fails.
    path = search_path(os.environ.get("PATH"))
    for problem in runtime_problems(
        local,
        find=resolve_executable,
        path=path,
        service_path=path,
        interpreter=read_interpreter,
        same_file=same_file,
    ):
        log.warning("%s", problem)
    if uids is not None:
        _warn_unreachable_runtimes(local, path)


def _warn_unreachable_runtimes(local: LocalConfig, path: str) -> None:
    # As runtime_problems does for a missing program: one line before
    # the first session fails "could not execute".
    for rt in local.runtimes.values():
        program = resolve_executable(rt.command[0], path) if rt.command else None
        problem = None if program is None else unreachable_program(program)
        if problem is not None:
            log.warning(
                "local.runtimes.%s.command: %s; every session on runtime '%s' will fail to start",
                rt.name,
                problem,
                rt.name,
            )


def resolve_image(
    local: LocalConfig, image: str, uids: SessionUids | None
) -> tuple[RuntimeConfig, str] | Unresolved:
    """The runtime `image` names and its executable, or why there is none.
    `uids`: a root daemon's session uids, who must be able to run it."""
    resolved = resolve_runtime(local.runtimes, image, search_path(os.environ.get("PATH")))
    if isinstance(resolved, Unresolved) or uids is None:
        return resolved
    # What start-up warned about (`_warn_unreachable_runtimes`): probe and
    # start say it too, without the host's paths (those are in the log).
    if unreachable_program(resolved[1]) is not None:
        return Unresolved(
            f"local runtime '{image}': its executable cannot be run by the sessions' uids",
            f"give local.runtimes.{image}.command an absolute path every user can reach"
            " (the runner's log names the directory in the way)",
        )
    return resolved


def start_checks(
    local: LocalConfig, spec: RunSpec, uids: SessionUids | None
) -> tuple[RuntimeConfig, str]:
    """The runtime and executable `spec` starts. Raises StartError."""
    if spec.creation is None:  # `recover()` never offers one to adopt
        raise StartError("provision", "the local backend cannot re-attach to a workload")
    resolved = resolve_image(local, spec.image.image, uids)
    if isinstance(resolved, Unresolved):
        raise StartError("provision", resolved.message)
    return resolved
