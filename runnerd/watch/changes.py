"""`POST /v1/sessions/{id}/workspace`: a body parsed into a `ChangeSet`. Pure.

Owns the change set's wire shape (`ChangeSetBody`, msgspec-validated as
every request body is: strict, unknown fields ignored) and its reading in
two steps, because the contract puts other checks between them: the schema
(`parse_change_set`: `400 invalid_request`, base64 decoded strictly) comes
first, then the route's budget (429) and liveness (409) checks, then the
paths (`normalise_change_set`: `400 invalid_path`). One bad path refuses
the whole set: the normalised set is returned only when every path is
good, so a caller that applies only what it gets back never writes part
of a refused set.

Applying a set (the IO side): the writes in order (parent directories
created, an existing file replaced), then the deletes (a file, or a
directory with all it holds; a missing path is not an error). A set that
changed no path (`written` and `deleted` both 0: nothing given, or only
deletes of missing paths) restarts nothing.
"""

from __future__ import annotations

import base64
import binascii

from runnerd.backend.watch import ChangeSet as ChangeSet
from runnerd.backend.watch import Write as Write
from runnerd.contract import Body, RequestError, parse_body
from runnerd.watch.errors import WorkspacePathError
from runnerd.watch.paths import Encoding, normalise_workspace_path


class WriteBody(Body, frozen=True):
    # Not NonEmptyStr: an empty path is the contract's `invalid_path`,
    # checked after the budget, not a schema error.
    path: str
    content: str
    encoding: Encoding = "utf8"


class ChangeSetBody(Body, frozen=True):
    write: list[WriteBody] | None = None
    delete: list[str] | None = None


def decode_base64(text: str) -> bytes:
    """RFC 4648 base64, strictly: the standard alphabet, padding required, no
    whitespace, and the canonical encoding of what it decodes to (unused
    bits zero), so one byte string has exactly one accepted spelling.

    Raises:
        ValueError: anything else.
    """
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(str(exc)) from None
    if base64.b64encode(data).decode("ascii") != text:
        raise ValueError("not the canonical encoding (padding bits must be zero)")
    return data


def parse_change_set(raw: bytes) -> ChangeSet:
    """The schema step: a body into a `ChangeSet`, contents decoded, paths
    not yet checked.

    Raises:
        RequestError: `400 invalid_request` naming the field: not JSON, the
            schema broken, or base64 content that is not strict RFC 4648.
    """
    body = parse_body(ChangeSetBody, raw)
    writes = []
    for i, write in enumerate(body.write or ()):
        if write.encoding == "utf8":
            data = write.content.encode("utf-8")
        else:
            try:
                data = decode_base64(write.content)
            except ValueError as exc:
                raise RequestError(f"body.write[{i}].content is not valid base64: {exc}") from None
        writes.append(Write(write.path, data))
    return ChangeSet(tuple(writes), tuple(body.delete or ()))


def normalise_change_set(changes: ChangeSet) -> ChangeSet:
    """The path step: every path normalised, or the set refused whole.

    Raises:
        WorkspacePathError: `400 invalid_path` for the first bad path (its
            field named: `write[i].path`, `delete[j]`).
    """
    writes = tuple(
        Write(_normal(write.path, f"write[{i}].path"), write.data)
        for i, write in enumerate(changes.writes)
    )
    deletes = tuple(_normal(path, f"delete[{j}]") for j, path in enumerate(changes.deletes))
    return ChangeSet(writes, deletes)


def _normal(path: str, field: str) -> str:
    try:
        return normalise_workspace_path(path)
    except WorkspacePathError as exc:
        raise WorkspacePathError(f"body.{field}: {exc.message}") from None
