"""A watch session's sandbox on the local backend: the namespaces its apps share.

Owns, for one watch session, what a pod is to its containers: one set of
namespaces that every app (and every generation of it) and the agent run
in, so they reach each other and the agent on 127.0.0.1, see each other's
processes, share the session's mount view (its private /tmp, the host's
hidden paths covered) and run as the session's uid.

How: a holder process is started exactly as a run session's workload is
(`runnerd.local.spawn`: new user, PID, mount, IPC and network namespaces,
the session's cgroup and uid, parent-death signal, the network published
through `runnerd.local.forward`), its workload a `sleep` that does nothing.
Each app then joins the holder's namespaces (`Launch.join`:
`joined.open_namespaces` of it, held open here) instead of making
its own, and gets a PID namespace of its own nested in the session's
(`nsinit --nest`): stopping one app (a restart) stops everything that app
started, however it detached, and nothing of another. With a fresh /proc
(the usual case) it also gets a copy of the session's mount namespace (the
same workspace, /tmp and covers: the same mounts) with a /proc of its own
namespace over the session's, so what it reads there agrees with its
getpid(); apps therefore do not see each other's processes (a pod's
`shareProcessNamespace` is not offered), while the session's init, whose
end ends them all, is their ancestor. Every guarantee a
run session has holds for each app: the parent-death chain (a SIGKILLed
daemon takes the holder and every app down), the mount view, the
isolated network (no way to runnerd's API), `no_new_privs`.

Where there is no PID namespace (the process-group fallback, announced at
start-up) there is no holder: each app is a process group of its own on
the host's network (which the fallback has anyway), so apps still meet on
127.0.0.1; nothing else is shared.

Ports: an app's declared tcp ports and its inspect port are published on
the host's loopback for as long as that generation runs (`publish`), and
`dial` reaches inside the shared network namespace (the core's probes).

Resource handling: `open_sandbox` owns the holder, its namespace fds, the
network and the cgroup; leaving it (after every app has stopped) stops the
holder (SIGTERM, SIGKILL after the stop grace: the kernel then kills
whatever is left in the session's PID namespace), closes the fds, stops
the outbound stack and removes the cgroup, shielded.

Error handling: `open_sandbox` raises `StartError` ("provision"/"boot")
with nothing left running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from runnerd.backend import Dial, Limits, StartError
from runnerd.local.cgroups import SessionCgroups
from runnerd.local.containment import Containment
from runnerd.local.forward import SessionNetwork, open_session_network
from runnerd.local.joined import open_namespaces
from runnerd.local.network import NetworkPlan
from runnerd.local.spawn import Launch, spawn_streams_process
from runnerd.local.streams import StreamsProcess

log = logging.getLogger(__name__)

# The holder's workload: does nothing until stopped (coreutils' sleep
# takes "infinity"); found where every session uid can run it.
SLEEP = shutil.which("sleep", path="/usr/bin:/bin") or "/bin/sleep"


@dataclass(frozen=True)
class SandboxPlan:
    """What a sandbox is made of, found once by the backend: the launch of
    its first process (containment, view, identity, init), the network
    plan, the cgroups (None: no ceilings) and the stop grace."""

    launch: Launch
    net: NetworkPlan
    cgroups: SessionCgroups | None
    stop_grace_s: float


class Sandbox:
    """One watch session's live sandbox (see the module docstring)."""

    def __init__(
        self, launch: Launch, net: SessionNetwork | None, holder: StreamsProcess | None = None
    ) -> None:
        self._launch = launch
        self._net = net
        self._holder = holder

    def check(self) -> None:
        """Raise StartError when the sandbox is gone: its holder exited
        (killed, or OOM), which took every process in it along."""
        if self._holder is not None and self._holder.has_exited():
            raise StartError("boot", "the session's sandbox is gone (its holder process exited)")

    @property
    def launch(self) -> Launch:
        """How an app's process is started: joined to the holder's
        namespaces (or, without a holder, contained on its own)."""
        return self._launch

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed in the session's cgroup (one small
        read; False without ceilings)."""
        cgroup = self._launch.cgroup
        return cgroup is not None and SessionCgroups.oom_killed(cgroup)

    @property
    def dial(self) -> Dial | None:
        """A connection inside the shared network namespace (None: the
        apps are on the host's network)."""
        return None if self._net is None else self._net.dial

    async def publish(
        self, ports: Sequence[int], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Publish `ports` on the host's loopback, forwarded into the
        namespace, until cancelled; started once they listen. Without a
        namespace of its own, nothing to publish."""
        if self._net is None or not ports:
            task_status.started()
            await trio.sleep_forever()
        assert self._net is not None
        await self._net.serve_ports(ports, task_status=task_status)


@contextlib.asynccontextmanager
async def open_sandbox(
    plan: SandboxPlan, session_id: str, limits: Limits, cwd: Path
) -> AsyncIterator[Sandbox]:
    """The session's sandbox, for as long as it is entered (see the module
    docstring); `cwd` is the holder's (the session's directory, which its
    view keeps). Raises StartError."""
    cgroup = await _create_cgroup(plan, session_id, limits)
    try:
        launch = dataclasses.replace(plan.launch, cgroup=cgroup)
        if launch.plan.containment is not Containment.PID_NAMESPACE:
            yield Sandbox(launch, None)
            return
        async with _open_network(plan.net, session_id) as net:
            holder = await _spawn_holder(plan, launch, net, session_id, cwd)
            async with holder:
                namespaces = _namespaces_of(holder, launch)
                try:
                    joined = dataclasses.replace(launch, join=namespaces)
                    yield Sandbox(joined, net, holder)
                finally:
                    for fd in namespaces:
                        os.close(fd)
    finally:
        if cgroup is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(SessionCgroups.remove, cgroup)


@contextlib.asynccontextmanager
async def _open_network(plan: NetworkPlan, session_id: str) -> AsyncIterator[SessionNetwork | None]:
    if not plan.own_namespace:
        yield None
        return
    async with open_session_network(plan, session_id) as net:
        yield net


async def _create_cgroup(plan: SandboxPlan, session_id: str, limits: Limits) -> Path | None:
    if plan.cgroups is None:
        return None
    try:
        return await trio.to_thread.run_sync(plan.cgroups.create, session_id, limits)
    except OSError as exc:
        raise StartError("provision", "cannot set up the session's resource limits") from exc


async def _spawn_holder(
    plan: SandboxPlan, launch: Launch, net: SessionNetwork | None, session_id: str, cwd: Path
) -> StreamsProcess:
    """The holder, exec'd in its new namespaces. Raises StartError."""
    try:
        return await spawn_streams_process(
            [SLEEP, "infinity"],
            cwd=cwd,
            env={"PATH": "/usr/bin:/bin"},
            stop_grace_s=plan.stop_grace_s,
            launch=launch,
            label=session_id,
            sockets_fd=None if net is None else net.child_fd,
            attach=None if net is None else net.attach,
        )
    except OSError as exc:
        log.warning("sandbox holder failed: %s", exc, extra={"session_id": session_id})
        raise StartError(
            "provision", f"cannot set up the session's sandbox: {exc.strerror}"
        ) from exc


def _namespaces_of(holder: StreamsProcess, launch: Launch) -> tuple[int, ...]:
    """The holder's namespaces as fds; raises StartError."""
    try:
        return open_namespaces(holder.pid, launch.plan.unshare_flags)
    except OSError as exc:
        raise StartError(
            "provision", f"cannot reach the session's sandbox: {exc.strerror}"
        ) from exc
