"""Keeping a watch session's workspace in step with a local directory (trio).

Owns `run_sync`, the task `runnerd watch` runs for its lifetime:
`watchfiles` reports that something under the directory changed (inotify,
no polling); a burst of events is one wake-up (`STEP_MS` without a new
event, at most `DEBOUNCE_MS` after the first); each wake-up scans the
directory (`runnerd.client.sync.Scanner`) and sends what differs from the
workspace as change sets through a `SyncTarget`. The first pass runs at
once: it sends what changed between taking the bundle and the session
running, and the binary files a bundle cannot carry.

Error handling, per change set (`SyncTarget.post_changes` raises):
- `RateLimited` (`429 reload_rate_limited`): wait the retry delay, then scan
  again: what changed meanwhile joins the pending changes, nothing is lost;
- `NotRunning` (`409 not_running`): wait until the target says the
  workspace is live again (`wait_running`), then scan again;
- `SyncRefused` (any other refusal): said once, and those paths are not
  sent again until they change again.
Cancellation stops the task; a set being sent is either taken whole by the
daemon or not at all (the daemon's rule), and the state follows its answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import trio

from runnerd.client.bundle import WATCH_SKIPPED
from runnerd.client.sync import (
    Changes,
    ChangeSet,
    Scanner,
    SyncState,
    Write,
    describe,
    plan_change_sets,
    sha256_hex,
)

DEBOUNCE_MS = 1600
# A burst of saves (an editor writes a temp file, renames it, touches it) within
# this many ms of each other is one wake-up; 100 cost 100 ms more a save
# (bench/README.md, "A save under `runnerd watch`"): watchfiles' default.
STEP_MS = 50
# watchfiles' thread cannot be abandoned on cancellation: it returns every
# RUST_TIMEOUT_MS, which bounds how long a cancelled sync takes to stop.
RUST_TIMEOUT_MS = 250


class RateLimited(Exception):
    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"rate limited for {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


class NotRunning(Exception):
    """The session has no live workspace now (starting, suspended, over)."""


class SyncRefused(Exception):
    """The daemon refused a change set; the message is for the user."""


class SyncTarget(Protocol):
    async def post_changes(self, body: dict[str, Any]) -> None:
        """Send one change set. Raises RateLimited, NotRunning, SyncRefused."""

    async def wait_running(self, refused: bool) -> None:
        """Return once the workspace is live (`refused`: the daemon just said
        it is not, whatever the last status said)."""

    def note(self, text: str) -> None:
        """Tell the user (one line)."""


def wakes(change: object, path: str) -> bool:
    """watchfiles' filter: what changes under `.git`, `node_modules` or
    `.telo` never wakes the sync (the scan leaves them out anyway)."""
    return not any(part in WATCH_SKIPPED for part in Path(path).parts)


class _Refusals:
    """Paths the daemon refused, with the bytes it refused (None: a delete)."""

    def __init__(self) -> None:
        self.refused: dict[str, str | None] = {}

    def add(self, change_set: ChangeSet) -> None:
        for write in change_set.writes:
            self.refused[write.path] = sha256_hex(write.data)
        for path in change_set.deletes:
            self.refused[path] = None

    def drop_from(self, changes: Changes) -> Changes:
        def wanted(write: Write) -> bool:
            return self.refused.get(write.path, "") != sha256_hex(write.data)

        writes = tuple(w for w in changes.writes if wanted(w))
        deletes = tuple(p for p in changes.deletes if self.refused.get(p, "") is not None)
        return Changes(writes, deletes, changes.unsendable)


class Syncer:
    """One directory synced into one session (module docstring)."""

    def __init__(
        self, root: Path, state: SyncState, target: SyncTarget, limit_bytes: int | None
    ) -> None:
        self.root = root
        self.state = state
        self.target = target
        self.limit_bytes = limit_bytes
        self.scanner = Scanner(root)
        self._refusals = _Refusals()
        self._told: set[tuple[str, int]] = set()
        self._watching = False
        self.ready = trio.Event()

    async def run(self) -> None:
        """Sync until cancelled (module docstring). `ready` is set once the
        watcher is in place and the first pass is done."""
        import watchfiles  # only `runnerd watch` pays for it

        await self.target.wait_running(refused=False)  # the state is the live workspace's
        wake = trio.Event()
        async with trio.open_nursery() as nursery:

            async def watch_dir() -> None:
                # The first pass waits for the watcher's first answer (changes,
                # or a timeout: yield_on_timeout), which proves it is in place:
                # an edit made before that is found by the pass, any after it
                # wakes us. Load-bearing: a pass before it could miss an edit.
                async for changes in watchfiles.awatch(
                    self.root, watch_filter=wakes, debounce=DEBOUNCE_MS, step=STEP_MS,
                    rust_timeout=RUST_TIMEOUT_MS, yield_on_timeout=True,
                ):  # fmt: skip
                    if changes or not self._watching:
                        self._watching = True
                        wake.set()

            nursery.start_soon(watch_dir)
            while True:
                await wake.wait()
                wake = trio.Event()
                await self.sync_once()
                self.ready.set()

    async def sync_once(self) -> None:
        """Scan and send until the workspace has what the directory has (or
        the daemon refused the rest)."""
        while not await self._pass():
            pass

    async def _pass(self) -> bool:
        """One scan and its change sets; False when it must scan again."""
        changes = await trio.to_thread.run_sync(self.scanner.changes, self.state)
        changes = self._refusals.drop_from(changes)
        for path in changes.unsendable:
            self._tell_once(path, 0, f"left out {path}: its name is too long for a workspace path")
        plan = plan_change_sets(changes, self.limit_bytes)
        for path, size in plan.too_big:
            limit = f"the daemon's limit of {self.limit_bytes} (server.max_body_bytes)"
            self._tell_once(path, size, f"left out {path}: {size} bytes as JSON, over {limit}")
        for change_set in plan.sets:
            await self.target.wait_running(refused=False)
            try:
                await self.target.post_changes(change_set.body())
            except RateLimited as limited:
                self.target.note(f"rate limited (watch.reload_limit): syncing again in "
                                 f"{limited.retry_after_s:.0f} s")  # fmt: skip
                await trio.sleep(limited.retry_after_s)
                return False
            except NotRunning:
                await self.target.wait_running(refused=True)
                return False
            except SyncRefused as refused:
                self.target.note(f"not synced ({describe(change_set)}): {refused}")
                self._refusals.add(change_set)
                continue
            self.state.applied(change_set)
            self.target.note(f"synced: {describe(change_set)}")
        return True

    def _tell_once(self, path: str, size: int, text: str) -> None:
        if (path, size) not in self._told:
            self._told.add((path, size))
            self.target.note(text)
