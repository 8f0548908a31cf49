"""A directory's edits as a watch session's change sets (`runnerd watch`).

Pure but for reading the directory. Owns:
- `SyncState`: what the workspace holds as far as this client knows (path
  → SHA-256 hex of the bytes), seeded from the bundle the session was
  created with (`seed_from_bundle`) or from `GET /workspace`'s listing
  (`seed_from_listing`, when re-attaching);
- `Scanner.changes(state)`: the directory now (the bundle's file set,
  `runnerd.client.bundle.iter_files`: `.git`, `node_modules`, `.telo` (a
  workspace's own, which it never lists) and what the `.gitignore` files
  exclude are left out) against the state: a write for
  every file whose bytes differ (never one for an unchanged file), a delete
  for every path the state has and the directory no longer does. A file is
  re-read only when its size or mtime changed since the last scan;
- `plan_change_sets(changes, limit_bytes)`: the `POST /workspace` bodies,
  each under the daemon's body limit (`server.max_body_bytes`); a file that
  alone is over it is left out and named (`Plan.too_big`);
- `SyncState.applied(change_set)`: the state after the daemon took a set.

Binary files (not UTF-8) are written with `encoding: base64`; text as
`utf8`. The state is the only memory of what was sent: edits made while a
set could not be sent (rate limited, the session not running) are not
queued but found again by the next scan, so they coalesce and none is lost.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runnerd.client.bundle import WATCH_SKIPPED, Bundle, iter_files

# The daemon's path rule (the contract's "Workspace ... routes"): longer
# paths are refused with 400 invalid_path, and one bad path refuses a set.
MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255
# Room for the JSON around the entries (`{"write": [], "delete": []}`).
_ENVELOPE_BYTES = 64


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Write:
    path: str
    data: bytes

    def entry(self) -> dict[str, str]:
        """The change set's write entry: utf8 text when the bytes are UTF-8."""
        try:
            return {"path": self.path, "content": self.data.decode("utf-8")}
        except UnicodeDecodeError:
            encoded = base64.b64encode(self.data).decode("ascii")
            return {"path": self.path, "content": encoded, "encoding": "base64"}


@dataclass(frozen=True)
class Changes:
    writes: tuple[Write, ...] = ()
    deletes: tuple[str, ...] = ()
    unsendable: tuple[str, ...] = ()  # paths the daemon would refuse (path rule)

    def __bool__(self) -> bool:
        return bool(self.writes or self.deletes)


@dataclass
class SyncState:
    """The workspace's files as far as this client knows: path → SHA-256 hex."""

    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def seed_from_bundle(cls, bundle: Bundle) -> SyncState:
        return cls({path: sha256_hex(text.encode()) for path, text in bundle.files})

    @classmethod
    def seed_from_listing(cls, listing: Any) -> SyncState:
        """From `GET /workspace`'s `{files: [{path, hash}]}`. Raises ValueError."""
        try:
            return cls({str(f["path"]): str(f["hash"]) for f in listing["files"]})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a workspace listing: {exc!r}") from None

    def applied(self, change_set: ChangeSet) -> None:
        """The daemon took `change_set`: it is what the workspace holds now."""
        for write in change_set.writes:
            self.files[write.path] = sha256_hex(write.data)
        for path in change_set.deletes:
            self.files.pop(path, None)


def sendable(path: str) -> bool:
    """Whether the daemon's path rule takes `path` (a relative path from disk)."""
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:  # a name that is not UTF-8 (surrogateescape)
        return False
    return len(raw) <= MAX_PATH_BYTES and all(
        len(segment.encode()) <= MAX_SEGMENT_BYTES for segment in path.split("/")
    )


@dataclass(frozen=True)
class _Seen:
    size: int
    mtime_ns: int
    sha256: str


class Scanner:
    """One directory's scans; remembers each file's stat and hash between them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._seen: dict[str, _Seen] = {}

    def changes(self, state: SyncState) -> Changes:
        """The directory now against `state` (module docstring). Files that
        vanish or cannot be read mid-scan count as absent."""
        writes: list[Write] = []
        unsendable: list[str] = []
        present: set[str] = set()
        seen: dict[str, _Seen] = {}
        for rel_path, path in iter_files(self.root, WATCH_SKIPPED):
            if not sendable(rel_path):
                unsendable.append(rel_path)
                continue
            try:
                stat = path.stat()
                known = self._seen.get(rel_path)
                if known and (known.size, known.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
                    seen[rel_path] = known
                    data = None
                else:
                    data = path.read_bytes()
                    seen[rel_path] = _Seen(stat.st_size, stat.st_mtime_ns, sha256_hex(data))
            except OSError:
                continue
            present.add(rel_path)
            if state.files.get(rel_path) != seen[rel_path].sha256:
                if data is None:  # known by stat but never sent: read it now
                    try:
                        data = path.read_bytes()
                    except OSError:
                        continue
                writes.append(Write(rel_path, data))
        self._seen = seen
        deletes = tuple(sorted(p for p in state.files if p not in present))
        return Changes(tuple(writes), deletes, tuple(unsendable))


@dataclass(frozen=True)
class ChangeSet:
    """One `POST /workspace` body's worth of changes."""

    writes: tuple[Write, ...] = ()
    deletes: tuple[str, ...] = ()

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.writes:
            body["write"] = [w.entry() for w in self.writes]
        if self.deletes:
            body["delete"] = list(self.deletes)
        return body

    def paths(self) -> list[str]:
        return [w.path for w in self.writes] + list(self.deletes)


@dataclass(frozen=True)
class Plan:
    sets: tuple[ChangeSet, ...]
    too_big: tuple[tuple[str, int], ...] = ()  # (path, bytes as JSON) over the limit alone


def _entry_bytes(entry: object) -> int:
    return len(json.dumps(entry).encode()) + 1  # the comma


def plan_change_sets(changes: Changes, limit_bytes: int | None) -> Plan:
    """`changes` as change sets each under `limit_bytes` as JSON (one set
    when there is no limit). Writes keep their order; deletes ride in the
    last set."""
    if limit_bytes is None:
        return Plan((ChangeSet(changes.writes, changes.deletes),) if changes else ())
    budget = max(limit_bytes - _ENVELOPE_BYTES, 1)
    sets: list[ChangeSet] = []
    too_big: list[tuple[str, int]] = []
    batch: list[Write] = []
    used = 0
    for write in changes.writes:
        size = _entry_bytes(write.entry())
        if size > budget:
            too_big.append((write.path, size))
            continue
        if batch and used + size > budget:
            sets.append(ChangeSet(tuple(batch)))
            batch, used = [], 0
        batch.append(write)
        used += size
    deletes = list(changes.deletes)
    last: list[str] = []
    for path in deletes:
        size = _entry_bytes(path)
        if (batch or last) and used + size > budget:
            sets.append(ChangeSet(tuple(batch), tuple(last)))
            batch, last, used = [], [], 0
        last.append(path)
        used += size
    if batch or last:
        sets.append(ChangeSet(tuple(batch), tuple(last)))
    return Plan(tuple(sets), tuple(too_big))


def describe(change_set: ChangeSet, limit: int = 3) -> str:
    """`wrote a.sh, b.sh; deleted c.txt` (at most `limit` names a list, then `+N`)."""

    def names(paths: Iterable[str]) -> str:
        items = list(paths)
        shown = ", ".join(items[:limit])
        return shown + (f" +{len(items) - limit}" if len(items) > limit else "")

    parts = []
    if change_set.writes:
        parts.append("wrote " + names(w.path for w in change_set.writes))
    if change_set.deletes:
        parts.append("deleted " + names(change_set.deletes))
    return "; ".join(parts)
