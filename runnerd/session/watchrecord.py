"""Watch records: what brings a watch session back after a daemon restart.

Owns the files in `<runner.state_dir>/watch/` (one `<session-id>.json` per
watch session, kept only on a backend whose places outlive the daemon,
`WatchBackend.watch_adopt`), their one shape (`WatchRecord`, `encode`,
`decode`) and their one writer (`RecordWriter`):

    {"format": 1, "session_id", "created_at", "image": {image, pull_policy},
     "limits": {cpu, memory, ephemeral_storage, ttl_s}, "env": {...},
     "entry", "apps": [{name, entry, io, ports: [[port, protocol]], slot,
     generation, open, seq_floor, kernel_frames}], "agent": null | {name, image, port,
     env}, "agent_token", "event_floor", "status": "running" | "suspended",
     "suspended_at", "live_since", "checkpoint": Checkpoint.saved() | null}

A record holds secrets (the session env, the agent's env and token): each
file is 0600 in a 0700 directory, written atomically
(`runnerd.atomic_file`), never logged, never sent anywhere; it is removed
when the session ends. Floors are reservations: ids and seqs up to them
may have been issued (`BLOCK` ahead of the last issued when written, and
rewritten half a block before they are reached), so a successor continues
above them (what was issued before the restart is a replay gap). Unlike a
run session's state file (`runnerd.session.statefile`), readers are not
held back until a reservation lands: only a crash within one write of a
burst of more than half a block (512 events or `/io` chunks of one app)
could leave a floor below an id a client saw. `live_since` is the TTL's
base (creation, or the last resume), `suspended_at` the suspended TTL's,
both epoch seconds.

`RecordWriter` does every write and removal off the event loop, one at a
time; jobs are per session and coalesce (the latest wins, the snapshot
taken when its write begins), so a burst of changes is one write.

Error handling: a record that cannot be written is logged at ERROR (no
content) and the session goes on; one that cannot be read is logged and
skipped. `decode` raises ValueError naming what is wrong.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import trio

from runnerd.atomic_file import write_atomic
from runnerd.backend.spec import BundleSpec, CreationSpec, ImageSpec, Limits, SessionIdentity
from runnerd.backend.watch import AgentLaunch, WatchSpec
from runnerd.contract import PortMapping
from runnerd.session.watchspec import WatchSessionSpec
from runnerd.watch.apps import AppSpec

log = logging.getLogger("runnerd.sessions")

FORMAT = 1
# Ids reserved ahead of those issued (see the module docstring).
BLOCK = 1024
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
RecordStatus = Literal["running", "suspended"]


@dataclass(frozen=True)
class AppState:
    """One app as the record keeps it: its spec, slot, counter, whether its
    latest generation is open, its `/io` seq floor, and the lifecycle frames
    of its process's kernel projected (`KernelProjection.consumed`)."""

    spec: AppSpec
    slot: int
    generation: int
    open: bool
    seq_floor: int
    kernel_frames: int = 0


@dataclass(frozen=True)
class WatchRecord:
    """One watch session's record (see the module docstring)."""

    spec: WatchSessionSpec
    apps: tuple[AppState, ...]
    event_floor: int
    status: RecordStatus
    live_since: float
    suspended_at: float | None = None
    checkpoint: dict[str, object] | None = None

    @property
    def session_id(self) -> str:
        return self.spec.session_id


def _image(image: ImageSpec) -> dict[str, str]:
    return {"image": image.image, "pull_policy": image.pull_policy}


def encode(record: WatchRecord) -> bytes:
    """The file's bytes (compact JSON)."""
    watch, agent = record.spec.watch, record.spec.agent
    limits = watch.identity.limits
    data: dict[str, Any] = {
        "format": FORMAT,
        "session_id": record.session_id,
        "created_at": watch.identity.created_at,
        "image": _image(watch.creation.image),
        "limits": {
            "cpu": limits.cpu,
            "memory": limits.memory,
            "ephemeral_storage": limits.ephemeral_storage,
            "ttl_s": limits.ttl_s,
        },
        "env": dict(watch.creation.env),
        "entry": watch.creation.bundle.entry if watch.creation.bundle else "",
        "apps": [
            {
                "name": a.spec.name,
                "entry": a.spec.entry,
                "io": a.spec.io,
                "ports": [[p.port, p.protocol] for p in a.spec.ports],
                "slot": a.slot,
                "generation": a.generation,
                "open": a.open,
                "seq_floor": a.seq_floor,
                "kernel_frames": a.kernel_frames,
            }
            for a in record.apps
        ],
        "agent": None
        if agent is None
        else {
            "name": agent.name,
            "image": _image(agent.image),
            "port": agent.port,
            "env": dict(agent.env),
        },
        "agent_token": record.spec.agent_token,
        "event_floor": record.event_floor,
        "status": record.status,
        "live_since": record.live_since,
        "suspended_at": record.suspended_at,
        "checkpoint": record.checkpoint,
    }
    return json.dumps(data, separators=(",", ":")).encode()


def _get(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        raise ValueError(f"{key}: missing or not a {_names(kind)}")
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _kinds(kind))


def _str_map(data: Mapping[str, Any], key: str) -> dict[str, str]:
    value = _get(data, key, dict)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{key}: not a map of strings")
    return dict(value)


def _image_of(data: Mapping[str, Any]) -> ImageSpec:
    policy = _get(data, "pull_policy", str)
    if policy not in ("missing", "always", "never"):
        raise ValueError(f"pull_policy: {policy!r} is not a pull policy")
    return ImageSpec(_get(data, "image", str), policy)


def _app_of(data: Any) -> AppState:
    if not isinstance(data, dict):
        raise ValueError("apps: an entry is not an object")
    io = _get(data, "io", str)
    if io not in ("tty", "streams"):
        raise ValueError(f"apps: io {io!r} is not an io mode")
    ports = []
    for pair in _get(data, "ports", list):
        if not (isinstance(pair, list) and len(pair) == 2 and pair[1] in ("tcp", "udp")):
            raise ValueError("apps: a port is not [port, protocol]")
        ports.append(PortMapping(port=int(pair[0]), protocol=pair[1]))
    spec = AppSpec(_get(data, "name", str), _get(data, "entry", str), tuple(ports), io)
    counts = (_get(data, k, int) for k in ("slot", "generation", "seq_floor"))
    slot, generation, seq_floor = counts
    frames = data.get("kernel_frames", 0)  # absent from a record of before
    if not isinstance(frames, int) or isinstance(frames, bool) or frames < 0:
        raise ValueError("apps: kernel_frames is not a count")
    return AppState(spec, slot, generation, _get(data, "open", bool), seq_floor, frames)


def decode(raw: bytes) -> WatchRecord:
    """Read a record's bytes back (ValueError: not a record of this format)."""
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a format {FORMAT} watch record")
    limits = _get(data, "limits", dict)
    identity = SessionIdentity(
        _get(data, "session_id", str),
        Limits(
            _get(limits, "cpu", str),
            _get(limits, "memory", str),
            _get(limits, "ephemeral_storage", str),
            float(_get(limits, "ttl_s", (int, float))),
        ),
        inspect=True,
        created_at=float(_get(data, "created_at", (int, float))),
    )
    bundle = BundleSpec(_get(data, "entry", str), ())  # seeded long ago: no files kept
    creation = CreationSpec(_image_of(_get(data, "image", dict)), _str_map(data, "env"), bundle)
    agent = None
    if data.get("agent") is not None:
        raw_agent = _get(data, "agent", dict)
        image = _image_of(_get(raw_agent, "image", dict))
        name, port = _get(raw_agent, "name", str), _get(raw_agent, "port", int)
        agent = AgentLaunch(name, image, port, _str_map(raw_agent, "env"))
    token = data.get("agent_token")
    if token is not None and not isinstance(token, str):
        raise ValueError("agent_token: not a string")
    apps = tuple(_app_of(entry) for entry in _get(data, "apps", list))
    spec = WatchSessionSpec(
        WatchSpec(identity, creation), tuple(a.spec for a in apps), agent, token
    )
    return _record_of(data, spec, apps)


def _record_of(
    data: Mapping[str, Any], spec: WatchSessionSpec, apps: tuple[AppState, ...]
) -> WatchRecord:
    status = _get(data, "status", str)
    if status not in ("running", "suspended"):
        raise ValueError(f"status: {status!r} is neither running nor suspended")
    suspended_at = data.get("suspended_at")
    if status == "suspended" and not isinstance(suspended_at, int | float):
        raise ValueError("suspended_at: a suspended session's must be a number")
    checkpoint = data.get("checkpoint")
    if checkpoint is not None and not isinstance(checkpoint, dict):
        raise ValueError("checkpoint: not an object")
    return WatchRecord(
        spec,
        apps,
        _get(data, "event_floor", int),
        status,
        float(_get(data, "live_since", (int, float))),
        None if suspended_at is None else float(suspended_at),
        checkpoint,
    )


class WatchRecords:
    """The directory of watch records (blocking calls: run them in a thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _file(self, session_id: str) -> Path | None:
        return self.path / f"{session_id}.json" if _SESSION_ID.fullmatch(session_id) else None

    def write(self, session_id: str, data: bytes) -> None:
        """Replace the session's record (OSError logged, never raised)."""
        path = self._file(session_id)
        if path is None:
            return
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(path, data)
        except OSError as exc:
            log.error(
                "cannot write the watch record %s: %s",
                path,
                exc.strerror or exc,
                extra={"session_id": session_id},
            )

    def remove(self, session_id: str) -> None:
        path = self._file(session_id)
        if path is None:
            return
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.error("cannot remove the watch record %s: %s", path, exc.strerror or exc)

    def load_all(self) -> list[WatchRecord]:
        """Every readable record (one that is not is logged and skipped)."""
        try:
            paths = sorted(p for p in self.path.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.error("cannot list the watch records in %s: %s", self.path, exc.strerror or exc)
            return []
        found = []
        for path in paths:
            if path.name.startswith("."):
                continue  # a write's temporary file
            try:
                record = decode(path.read_bytes())
            except (OSError, ValueError) as exc:
                log.warning("unreadable watch record %s: %s", path, exc)
                continue
            if record.session_id != path.stem:
                log.warning("watch record %s names another session", path)
                continue
            found.append(record)
        return found


# A job: the record's bytes taken when its write begins; None removes it.
Snapshot = Callable[[], bytes | None]


class RecordWriter:
    """Writes `records` for the manager (see the module docstring).

    Resource handling: `run` is a task of the manager's nursery; `flush`
    does what is left after it (shielded by its caller)."""

    def __init__(self, records: WatchRecords) -> None:
        self.records = records
        self._jobs: dict[str, Snapshot] = {}
        self._wake = trio.Event()

    def ask(self, session_id: str, snapshot: Snapshot) -> None:
        """Write the session's record (or remove it) soon; coalesces."""
        self._jobs[session_id] = snapshot
        self._wake.set()

    async def run(self) -> None:
        while True:
            while not self._jobs:
                self._wake = trio.Event()
                await self._wake.wait()
            await self._do_next()

    async def flush(self) -> None:
        while self._jobs:
            await self._do_next()

    async def _do_next(self) -> None:
        session_id = next(iter(self._jobs))
        snapshot = self._jobs.pop(session_id)
        data = snapshot()
        try:
            if data is None:
                await trio.to_thread.run_sync(self.records.remove, session_id)
            else:
                await trio.to_thread.run_sync(self.records.write, session_id, data)
        except BaseException:
            self._jobs.setdefault(session_id, snapshot)  # still to do, for `flush`
            raise
