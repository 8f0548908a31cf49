"""The client of a watch pod's workspace API (the `workspace` container).

Owns `WorkspaceApi`: the calls runnerd makes on the workspace application
(`workspaceapp`'s manifest) over the pod network, at `dial_host` (the pod
IP) and `watchpod.WORKSPACE_PORT`, every one with the pod's bearer token:

    healthy()            GET  /healthz            the boot wait (never raises)
    list()               GET  /workspace          [WorkspaceFile], by path bytes
    read(path)           GET  /workspace/file     the bytes
    apply(changes)       POST /workspace          (written, deleted)
    snapshot_to(dest)    GET  /workspace/snapshot the tar, streamed to a 0600 file
    seed_from_tar(path)  POST /workspace ...      a snapshot's files written back
    seed(files)          POST /workspace ...      files written, in bounded batches

Every call is bounded (`ApiLimits`: a whole-call deadline on top of
httpx's connect and per-read timeouts; the bytes an answer may bring).
Seeding sends POSTs of at most `seed_batch_bytes` of file data each (about
4 MiB of JSON once base64'd), a file larger than that alone.

Error handling (translated here, chained; no httpx name leaves this module):
the server's refusals are `WatchError`s with the contract's codes (`404
file_not_found`, `413 file_too_large`, `413 payload_too_large`, `409
path_conflict`); a missing or wrong token (`401`), an answer that is not
the API's, a transport failure or a deadline passed are a
`WorkspaceApiError` (500 `workspace_failed`, a client-safe message naming
what was attempted, never the token); for `snapshot_to` every failure is a
`CheckpointFailed` and `dest` is left absent.

Resource handling: `WorkspaceApi` owns one `httpx.AsyncClient` (a small
keep-alive pool to the one pod); `aclose()` (or leaving `async with`)
closes it, cancelled or not. `transport=` is the test seam.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import tarfile
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx
import trio

from runnerd.backend.watch import ChangeSet, CheckpointFailed, WorkspaceFile, Write
from runnerd.errors import RunnerdError
from runnerd.watch.errors import WatchError

MIB = 1024 * 1024
# The snapshot is written to its file in pieces of this size.
_WRITE_BYTES = MIB
_SAFE_MESSAGE_CHARS = 200


class WorkspaceApiError(RunnerdError):
    """The workspace container could not be asked (down, hung, refused the
    token, answered nonsense). `message` is client-safe."""

    log_as_error = True
    code = "workspace_failed"


@dataclass(frozen=True)
class ApiLimits:
    """Deadlines and sizes of the workspace calls (seconds, bytes)."""

    # A pod-network connect that takes longer is a pod that is not serving.
    connect_timeout_s: float = 5.0
    # No byte for this long mid-answer: the server hangs.
    read_timeout_s: float = 30.0
    # One JSON call (list, read, apply, one seed batch), whole.
    call_timeout_s: float = 60.0
    # The boot wait polls often: each health check is quick or it is a no.
    health_timeout_s: float = 2.0
    # A whole snapshot (a workspace of up to `max_snapshot_bytes`).
    snapshot_timeout_s: float = 600.0
    # A file read (`GET /workspace/file`): `server.max_body_bytes` upstream.
    max_read_bytes: int = 64 * MIB
    # A listing's JSON: ~100 bytes a file, so a million files.
    max_listing_bytes: int = 128 * MIB
    # A snapshot's tar: the watch tier's ephemeral storage, say.
    max_snapshot_bytes: int = 8 * 1024 * MIB
    # File data per seeding POST: 3 MiB is ~4 MiB of JSON once base64'd.
    seed_batch_bytes: int = 3 * MIB


def _shown(text: str) -> str:
    """A server's message, bounded and printable (it is the session image's code)."""
    clean = "".join(c if c.isprintable() else "?" for c in text[:_SAFE_MESSAGE_CHARS])
    return clean or "no reason given"


def _refusal(status: int, body: bytes, doing: str) -> RunnerdError:
    """A non-200 answer as what it means for the client."""
    try:
        parsed = json.loads(body)
        code, message = str(parsed.get("error", "")), _shown(str(parsed.get("message", "")))
    except (ValueError, AttributeError):
        code, message = "", "no reason given"
    known = {
        (404, "file_not_found"),
        (413, "file_too_large"),
        (413, "payload_too_large"),
        (409, "path_conflict"),
    }
    if (status, code) in known:
        return WatchError(status, code, message)
    if status == 401:
        return WorkspaceApiError(f"could not {doing}: the workspace refused runnerd's token")
    return WorkspaceApiError(f"could not {doing}: the workspace answered HTTP {status}")


class WorkspaceApi:
    """The workspace API of one watch pod (see the module docstring)."""

    def __init__(
        self,
        dial_host: str,
        port: int,
        token: str,
        *,
        limits: ApiLimits | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.limits = limits or ApiLimits()
        host = f"[{dial_host}]" if ":" in dial_host else dial_host
        timeout = httpx.Timeout(
            self.limits.read_timeout_s,
            connect=self.limits.connect_timeout_s,
            pool=self.limits.connect_timeout_s,
        )
        self._http = httpx.AsyncClient(
            base_url=f"http://{host}:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
            trust_env=False,
            transport=transport,
        )

    async def __aenter__(self) -> WorkspaceApi:
        return self

    async def __aexit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections; bounded, even when cancelled."""
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            await self._http.aclose()

    @contextlib.asynccontextmanager
    async def _answer(
        self, method: str, path: str, doing: str, deadline_s: float, **kwargs: Any
    ) -> AsyncIterator[httpx.Response]:
        """One request's streamed answer (200 only), within `deadline_s`."""
        try:
            with trio.fail_after(deadline_s):
                async with self._http.stream(method, path, **kwargs) as response:
                    if response.status_code != 200:
                        body = await _read_capped(response, 64 * 1024, doing, truncate=True)
                        raise _refusal(response.status_code, body, doing)
                    yield response
        except (trio.TooSlowError, httpx.TimeoutException) as exc:
            raise _timed_out(doing, method) from exc
        except httpx.HTTPError as exc:
            raise WorkspaceApiError(
                f"could not {doing}: the workspace could not be reached ({type(exc).__name__})"
            ) from exc

    async def _json(self, method: str, path: str, doing: str, cap: int, **kw: Any) -> Any:
        async with self._answer(method, path, doing, self.limits.call_timeout_s, **kw) as answer:
            body = await _read_capped(answer, cap, doing, method=method)
        try:
            return json.loads(body)
        except ValueError:
            raise WorkspaceApiError(f"could not {doing}: the workspace answered no JSON") from None

    async def healthy(self) -> bool:
        """Whether the workspace API answers `GET /healthz` with 200 now. Never raises."""
        try:
            with trio.move_on_after(self.limits.health_timeout_s):
                response = await self._http.get("/healthz")
                return response.status_code == 200
        except httpx.HTTPError:
            return False
        return False

    async def list(self) -> list[WorkspaceFile]:
        """Every listed file (the server's order: by path bytes)."""
        doing = "list the workspace"
        answer = await self._json("GET", "/workspace", doing, self.limits.max_listing_bytes)
        try:
            return [WorkspaceFile(str(f["path"]), str(f["hash"])) for f in answer["files"]]
        except (KeyError, TypeError) as exc:
            raise WorkspaceApiError(f"could not {doing}: a malformed listing") from exc

    async def read(self, path: str) -> bytes:
        """The bytes of the file at the normal path `path`.

        Raises:
            WatchError: `404 file_not_found`, `413 file_too_large` (over the
                server's cap or `max_read_bytes`).
        """
        doing = f"read {path[:80]!r}"
        params = {"path": path}
        async with self._answer(
            "GET", "/workspace/file", doing, self.limits.call_timeout_s, params=params
        ) as answer:
            cap = self.limits.max_read_bytes
            try:
                return await _read_capped(answer, cap, doing)
            except _TooLarge:
                message = f"{path[:80]!r} is larger than {cap} bytes, the read limit"
                raise WatchError(413, "file_too_large", message) from None

    async def apply(self, changes: ChangeSet) -> tuple[int, int]:
        """Apply a normalised change set in one POST; (written, deleted).

        Raises:
            WatchError: `409 path_conflict` (nothing written), `413 payload_too_large`.
        """
        body = await trio.to_thread.run_sync(_change_set_json, changes)
        doing = "change the workspace"
        headers = {"Content-Type": "application/json"}
        answer = await self._json(
            "POST", "/workspace", doing, 64 * 1024, content=body, headers=headers
        )
        try:
            return int(answer["written"]), int(answer["deleted"])
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkspaceApiError(f"could not {doing}: a malformed answer") from exc

    async def seed(self, files: Iterable[tuple[str, bytes]]) -> int:
        """Write `files` (normal paths) in POSTs of at most `seed_batch_bytes`
        of data each; the number written. Raises as `apply`."""
        batches = _Batcher(iter(files), self.limits.seed_batch_bytes)
        written = 0
        while (batch := batches.next()) is not None:
            written += (await self.apply(batch))[0]
        return written

    async def seed_from_tar(self, path: Path) -> int:
        """Write every regular file of the tar at `path` (a `snapshot_to`
        file) back, batch by batch; the number written.

        Raises:
            CheckpointFailed: the tar cannot be read.
            WatchError / WorkspaceApiError: as `apply`.
        """
        try:
            archive = await trio.to_thread.run_sync(lambda: tarfile.open(path, mode="r:"))
        except (OSError, tarfile.TarError) as exc:
            raise CheckpointFailed("the checkpoint cannot be read") from exc
        with archive:
            batches = _Batcher(_tar_files(archive), self.limits.seed_batch_bytes)
            written = 0
            while True:
                try:
                    batch = await trio.to_thread.run_sync(batches.next)
                except (OSError, tarfile.TarError) as exc:
                    raise CheckpointFailed("the checkpoint cannot be read") from exc
                if batch is None:
                    return written
                written += (await self.apply(batch))[0]

    async def snapshot_to(self, dest: Path) -> tuple[int, int]:
        """Stream `GET /workspace/snapshot` into a new 0600 file at `dest`
        (replaced atomically); (files, bytes of file data) it holds.

        Raises:
            CheckpointFailed: any failure (`dest` then absent or as before).
        """
        temp = dest.with_name(f".{dest.name}.{secrets.token_hex(6)}")
        try:
            await self._download(temp)
            counts = await trio.to_thread.run_sync(_count_tar, temp)
            await trio.to_thread.run_sync(os.replace, temp, dest)
        except BaseException as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            if isinstance(exc, RunnerdError | OSError | tarfile.TarError):
                message = str(exc) if isinstance(exc, RunnerdError) else "unreadable"
                raise CheckpointFailed(f"the workspace snapshot failed: {message}") from exc
            raise
        return counts

    async def _download(self, temp: Path) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out: IO[bytes] = await trio.to_thread.run_sync(
            lambda: open(os.open(temp, flags, 0o600), "wb")
        )
        with out:
            doing = "snapshot the workspace"
            deadline = self.limits.snapshot_timeout_s
            async with self._answer("GET", "/workspace/snapshot", doing, deadline) as answer:
                size, pending = 0, bytearray()
                try:
                    async for chunk in answer.aiter_bytes():
                        size += len(chunk)
                        if size > self.limits.max_snapshot_bytes:
                            cap = self.limits.max_snapshot_bytes
                            raise WorkspaceApiError(f"the workspace is over {cap} bytes")
                        pending += chunk
                        if len(pending) >= _WRITE_BYTES:  # a thread hop per MiB, not per chunk
                            await trio.to_thread.run_sync(out.write, bytes(pending))
                            pending.clear()
                    await trio.to_thread.run_sync(out.write, bytes(pending))
                except httpx.HTTPError as exc:
                    raise WorkspaceApiError(f"could not {doing}: the stream broke") from exc


def _change_set_json(changes: ChangeSet) -> bytes:
    """`POST /workspace`'s body: base64 is JSON-safe as is, so only the
    paths go through the encoder (json.dumps of megabytes of base64 would
    scan every byte for escapes again)."""
    writes = b",".join(
        b'{"path":%s,"content":"%s","encoding":"base64"}'
        % (json.dumps(w.path).encode(), base64.b64encode(w.data))
        for w in changes.writes
    )
    deletes = json.dumps(list(changes.deletes)).encode()
    return b'{"write":[%s],"delete":%s}' % (writes, deletes)


class _TooLarge(Exception):
    pass


def _timed_out(doing: str, method: str) -> WorkspaceApiError:
    """No answer in time. A POST may still land after runnerd gave up on it
    (the workspace got the request; only its answer is missing)."""
    late = "; the change may still have been applied" if method == "POST" else ""
    return WorkspaceApiError(f"could not {doing}: the workspace did not answer in time{late}")


async def _read_capped(
    response: httpx.Response, cap: int, doing: str, *, truncate: bool = False, method: str = "GET"
) -> bytes:
    """The answer's body, at most `cap` bytes (`_TooLarge` past it, or cut
    with `truncate`)."""
    pieces, size = [], 0
    try:
        async for chunk in response.aiter_bytes():
            pieces.append(chunk)
            size += len(chunk)
            if size > cap:
                if truncate:
                    break
                raise _TooLarge
    except httpx.TimeoutException as exc:
        raise _timed_out(doing, method) from exc
    except httpx.HTTPError as exc:
        raise WorkspaceApiError(f"could not {doing}: the answer broke off") from exc
    return b"".join(pieces)[: cap if truncate else None]


class _Batcher:
    """`files` cut into change sets whose data stays within `limit` bytes
    (at least one file each: a larger file goes alone)."""

    def __init__(self, files: Iterator[tuple[str, bytes]], limit: int) -> None:
        self._files = files
        self._limit = limit
        self._carry: Write | None = None

    def next(self) -> ChangeSet | None:
        """The next batch, or None when `files` is done."""
        writes = [self._carry] if self._carry is not None else []
        self._carry = None
        size = sum(len(w.data) for w in writes)
        for path, data in self._files:
            if writes and size + len(data) > self._limit:
                self._carry = Write(path, data)  # starts the next batch
                break
            writes.append(Write(path, data))
            size += len(data)
        return ChangeSet(writes=tuple(writes)) if writes else None


def _tar_files(archive: tarfile.TarFile) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of each regular file of an opened tar, in order."""
    for member in archive:
        if not member.isreg():
            continue
        extracted = archive.extractfile(member)
        if extracted is None:
            continue
        with extracted:
            yield member.name, extracted.read()


def _count_tar(path: Path) -> tuple[int, int]:
    """(regular files, bytes of their data) of a tar; reads it whole, so a
    truncated or malformed one raises `tarfile.TarError`."""
    files = size = 0
    with tarfile.open(path, mode="r:") as archive:
        for member in archive:
            if member.isreg():
                files, size = files + 1, size + member.size
    return files, size
