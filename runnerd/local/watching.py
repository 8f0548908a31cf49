"""The local backend's watch sessions: `LocalBackend.open_watch`.

Owns entering and leaving one watch session's place on this host
(`runnerd.backend.watch`, the seam): the session directory
(`runnerd.local.workdir`: `app/` is the workspace, `work/` every process's
HOME), the `Workspace` over `app/` (seeded with the bundle, or restored
from the checkpoint of a resume), its scratch directory beside the trash,
the session uid of a root daemon, and the sandbox its processes share
(`runnerd.local.sandbox`); what runs in it is `runnerd.local.watchhost`'s.

Resource handling: leaving `open_local_watch` (after the core has stopped
every process) stops the sandbox and moves the session directory to the
trash and removes the scratch, shielded; the session uid is released once
its processes are gone. Checkpoints stay until their `discard()`.

Error handling: entering raises `StartError` (no runtime of the image's
name, no session uid free, the directory, a checkpoint that does not
restore, the sandbox), with nothing left behind. A runtime that is
configured but cannot run (its executable missing, or not runnable by the
session's uid) is each generation's `StartError` instead (`run_app`): an
app that cannot start never fails the session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from runnerd.backend import StartError
from runnerd.backend.watch import ProgressReport, WatchSpec
from runnerd.local.identity import SessionIdentity, SessionUids
from runnerd.local.mounts import SessionView
from runnerd.local.sandbox import SandboxPlan, open_sandbox
from runnerd.local.watchhost import (
    LocalCheckpoint,
    LocalWatchHost,
    WatchKit,
    make_private_dir,
)
from runnerd.local.workdir import (
    SessionDir,
    WorkdirError,
    prepare_session_dir,
    remove_session_dir,
)
from runnerd.local.workspace import (
    CheckpointError,
    Workspace,
    WorkspaceError,
    WorkspaceLimits,
)

__all__ = ["LocalCheckpoint", "LocalWatchHost", "WatchKit", "open_local_watch"]


@contextlib.asynccontextmanager
async def open_local_watch(
    kit: WatchKit, spec: WatchSpec, progress: ProgressReport
) -> AsyncIterator[LocalWatchHost]:
    """The session's place (see the module docstring). Raises StartError."""
    image = spec.creation.image.image
    if image not in kit.local.runtimes:  # admitted, then removed by a config reload
        raise StartError("provision", f"no local runtime named '{image}'")
    identity = _acquire(kit.uids)
    try:
        async with _open_place(kit, spec, progress, identity) as host:
            yield host
    finally:
        if identity is not None and kit.uids is not None:
            kit.uids.release(identity)  # its processes are gone with the sandbox


@contextlib.asynccontextmanager
async def _open_place(
    kit: WatchKit, spec: WatchSpec, progress: ProgressReport, identity: SessionIdentity | None
) -> AsyncIterator[LocalWatchHost]:
    owner = None if identity is None else (identity.uid, identity.gid)
    session_dir = await _prepare(kit, spec, owner)
    scratch = kit.trash.path / f"{spec.session_id}.scratch"
    try:
        workspace = Workspace(
            session_dir.app,
            scratch=scratch,
            owner=owner,
            limits=WorkspaceLimits.from_config(
                kit.max_body_bytes, spec.identity.limits.ephemeral_storage
            ),
        )
        await trio.to_thread.run_sync(make_private_dir, kit.trash.path)
        await _seed(workspace, spec, progress)
        progress.progress("provision", "setting up the session's sandbox")
        plan = _with_view(kit.sandbox, SessionView(kit.hidden, str(session_dir.root)), identity)
        limits = spec.identity.limits
        async with open_sandbox(plan, spec.session_id, limits, session_dir.root) as sb:
            progress.progress("provision", "the session's sandbox is up", done=True)
            yield LocalWatchHost(kit, spec, session_dir, workspace, sb)
    finally:
        with trio.CancelScope(shield=True):
            await kit.trash.discard(session_dir.root)
            await trio.to_thread.run_sync(_remove_scratch, scratch)


def _remove_scratch(scratch: Path) -> None:
    if os.path.lexists(scratch):
        remove_session_dir(scratch)


def _with_view(
    plan: SandboxPlan, view: SessionView, identity: SessionIdentity | None
) -> SandboxPlan:
    launch = dataclasses.replace(plan.launch, view=view, identity=identity)
    return dataclasses.replace(plan, launch=launch)


async def _prepare(kit: WatchKit, spec: WatchSpec, owner: tuple[int, int] | None) -> SessionDir:
    # A resume restores the checkpoint instead of writing the bundle.
    bundle = None if spec.checkpoint is not None else spec.creation.bundle
    try:
        return await trio.to_thread.run_sync(
            prepare_session_dir, kit.local.workdir, spec.session_id, bundle, owner
        )
    except WorkdirError as exc:
        raise StartError("provision", str(exc)) from exc


async def _seed(workspace: Workspace, spec: WatchSpec, progress: ProgressReport) -> None:
    """Restore the resumed session's checkpoint (the bundle is already
    written otherwise). Raises StartError."""
    checkpoint = spec.checkpoint
    if checkpoint is None:
        return
    if not isinstance(checkpoint, LocalCheckpoint):
        raise StartError("provision", "the checkpoint was not made by the local backend")
    files = f"{checkpoint.files} file" + ("" if checkpoint.files == 1 else "s")
    progress.progress("provision", f"restoring the workspace ({files})")
    try:
        await workspace.restore(checkpoint.path)
    except (CheckpointError, WorkspaceError) as exc:
        raise StartError("provision", f"cannot restore the workspace: {exc.message}") from exc


def _acquire(uids: SessionUids | None) -> SessionIdentity | None:
    if uids is None:
        return None
    identity = uids.acquire()
    if identity is None:
        raise StartError(
            "provision", f"all {uids.count} session uids (local.session_uid_count) are in use"
        )
    return identity
