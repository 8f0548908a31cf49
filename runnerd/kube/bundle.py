"""Bundle delivery to pods: the reproducible tar.gz and its single-use tokens. Pure.

Owns `build_bundle_archive` (a session's files as a tar.gz whose bytes depend
on the files alone) and `BundleTokens` (who may fetch which archive, once).

The archive is reproducible so that the same bundle is the same bytes
(cacheable, diffable, testable): entries sorted, mtime 0, uid/gid 0, no user
or group names, fixed modes (0644 files, 0755 directories), the gzip header's
mtime 0 and no file name. Every path is re-checked here, even though admission
normalised it: a path that reaches a tarball must be relative, normal, and
inside the bundle, or nothing is written.

Building is CPU work on up to the body limit (16 MiB): the caller runs it off
the event loop (`trio.to_thread.run_sync(build_bundle_archive, bundle)`).

The tokens: 24 random bytes (hex) per staged archive, compared in constant
time, good for one fetch, gone after `TOKEN_TTL_S` or when the session ends
(`drop`). Time is passed in as `now` (any monotonic origin).
"""

from __future__ import annotations

import gzip
import hmac
import io
import posixpath
import secrets
import tarfile
from dataclasses import dataclass

from runnerd.backend import BundleSpec

TOKEN_BYTES = 24
# Long enough for a cold image pull of the init container before it fetches;
# short enough that a leaked URL (pod specs are readable in the namespace) is
# soon worthless, even before its single use.
TOKEN_TTL_S = 300.0


class BundleArchiveError(ValueError):
    """A bundle path that is not a normal relative path inside the bundle."""


def check_archive_path(path: str) -> str:
    """`path` if it is already normal, relative and inside the bundle.

    Raises:
        BundleArchiveError: names the path.
    """
    if (
        not path
        or "\0" in path
        or "\\" in path
        or path.startswith("/")
        or posixpath.normpath(path) != path
        or path in (".", "..")
        or path.startswith("../")
    ):
        raise BundleArchiveError(f"bundle path {path!r} is not a normal path inside the bundle")
    return path


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _entry(name: str, *, directory: bool, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory else 0o644
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build_bundle_archive(bundle: BundleSpec) -> bytes:
    """The bundle's files (and their parent directories) as a reproducible tar.gz.

    Raises:
        BundleArchiveError: a path that is not normal, a duplicate path, or a
            file that is also another file's directory.
    """
    files: dict[str, bytes] = {}
    for path, contents in bundle.files:
        if check_archive_path(path) in files:
            raise BundleArchiveError(f"bundle path {path!r} appears twice")
        files[path] = contents.encode("utf-8")
    directories = {parent for path in files for parent in _parents(path)}
    if clash := directories & files.keys():
        raise BundleArchiveError(f"bundle path {sorted(clash)[0]!r} is both a file and a directory")
    raw = io.BytesIO()
    # GNU format: long names without PAX headers (which would carry times).
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(directories | files.keys()):
            if name in directories:
                tar.addfile(_entry(name, directory=True))
            else:
                data = files[name]
                tar.addfile(_entry(name, directory=False, size=len(data)), io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


@dataclass
class _Staged:
    token: str
    archive: bytes
    expires_at: float


class BundleTokens:
    """Staged archives by session id, each behind one single-use token.

    Not thread-safe; used from the event loop only. Every method is O(1)
    except `expire`, which is O(staged).
    """

    def __init__(self, ttl_s: float = TOKEN_TTL_S) -> None:
        self._ttl_s = ttl_s
        self._staged: dict[str, _Staged] = {}

    def stage(self, session_id: str, archive: bytes, now: float) -> str:
        """Stage `archive` for `session_id` (replacing any earlier one); the new token."""
        token = secrets.token_hex(TOKEN_BYTES)
        self._staged[session_id] = _Staged(token, archive, now + self._ttl_s)
        return token

    def redeem(self, session_id: str, token: str, now: float) -> bytes | None:
        """The archive if `token` is the session's live token, else None.

        A success consumes the token (single use). An expired entry is
        dropped. The comparison takes the same time wherever the strings differ.
        """
        staged = self._staged.get(session_id)
        if staged is None:
            return None
        if now >= staged.expires_at:
            del self._staged[session_id]
            return None
        if not hmac.compare_digest(staged.token.encode(), token.encode("utf-8", "replace")):
            return None
        del self._staged[session_id]
        return staged.archive

    def drop(self, session_id: str) -> None:
        """Forget the session's archive (the session ended). Idempotent."""
        self._staged.pop(session_id, None)

    def expire(self, now: float) -> int:
        """Drop every expired entry; how many were dropped."""
        stale = [sid for sid, s in self._staged.items() if now >= s.expires_at]
        for sid in stale:
            del self._staged[sid]
        return len(stale)

    def __len__(self) -> int:
        return len(self._staged)
