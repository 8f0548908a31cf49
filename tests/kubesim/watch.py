"""List and watch: the collection GET, with the real apiserver's RV and stream semantics.

Watch (the apiserver's `cacher.go` and `handlers/watch.go`): headers are
flushed before any event; RV unset
or "0" starts with ADDED for what exists; any other RV replays the retained
history after it, or answers HTTP 200 + one ERROR 410 Expired event when it is
older than the history; `timeoutSeconds` ends the chunked body cleanly with no
final event; bookmarks (empty object of the kind + RV) go out every
`bookmark_interval_s` when asked for; selectors are applied per event using
the object before and after the change, so an object that stops matching is
seen as DELETED, one that starts matching as ADDED (as the watch cache does).
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from tests.kubesim import status
from tests.kubesim.discovery import Kind
from tests.kubesim.faults import Faults, Stats
from tests.kubesim.selectors import Matcher
from tests.kubesim.store import Event, Store, Subscription, TooOld
from tests.kubesim.wire import Exchange

Obj = dict[str, Any]
BATCH_EVENTS = 128


@dataclass
class Query:
    kind: Kind
    namespace: str | None
    fields: Matcher
    labels: Matcher
    name: str | None = None  # pinned by fieldSelector metadata.name=X
    table: Callable[[Obj], Obj] | None = None  # kubectl asked for Table rows

    @property
    def subscription(self) -> dict[str, str | None]:
        return {"resource": self.kind.resource, "namespace": self.namespace, "name": self.name}

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        ns = obj["metadata"].get("namespace", "")
        if self.namespace and ns != self.namespace:
            return False
        return self.fields(obj) and self.labels(obj)


def build_list(
    store: Store,
    q: Query,
    *,
    limit: int | None,
    cont: str | None,
    view: bool = True,
    rv_param: str | None = None,
    match: str | None = None,
) -> Obj:
    """A list page; `view=False` keeps the stored shape (for the Table printer).

    `resourceVersionMatch=Exact` reads the state at that RV (410 once compacted); any
    other RV reads the current state, which is never older than it. A `continue`
    token from before a compaction is a 410 carrying a token that goes on at the
    latest RV, as etcd3's `handleCompactedErrorForPaging` answers.
    """
    _check_list_options(rv_param, match, cont)
    rv = store.resource_version
    if match == "Exact" and rv_param:
        rv = int(rv_param)
        try:
            objs = store.list_at(q.kind.resource, q.namespace, rv)
        except TooOld as exc:
            raise _too_old_list(exc, store) from exc
    else:
        objs = store.list(q.kind.resource, q.namespace)
    items = [o for o in objs if q.matches(o)]
    start = 0
    if cont:
        try:
            token = json.loads(base64.urlsafe_b64decode(cont.encode()))
            start = int(token["start"])
        except (ValueError, KeyError, TypeError) as exc:
            raise status.bad_request(f"invalid continue token: {exc}") from exc
        if int(token.get("rv", -1)) != -1 and int(token["rv"]) <= store.compacted:
            raise _expired_continue(start)
    meta: Obj = {"resourceVersion": str(rv)}
    page = items[start:]
    if limit and limit > 0 and len(page) > limit:
        page = page[:limit]
        nxt = {"start": start + limit, "rv": rv}
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(nxt).encode()).decode()
        meta["remainingItemCount"] = len(items) - start - limit
    for item in page:  # items of a typed list carry no kind/apiVersion
        item.pop("kind", None)
        item.pop("apiVersion", None)
    if q.kind.view is not None and view:
        page = [q.kind.view(item) for item in page]
    return {
        "kind": f"{q.kind.kind}List",
        "apiVersion": q.kind.api_version,
        "metadata": meta,
        "items": page,
    }


_EXPIRED_LIST = "The resourceVersion for the provided list is too old."
_EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)


def _check_list_options(rv: str | None, match: str | None, cont: str | None) -> None:
    """k/k `ValidateListOptions` for resourceVersionMatch (422 Invalid ListOptions)."""
    problems = []
    if match not in (None, "", "NotOlderThan", "Exact"):
        problems.append(
            (
                "FieldValueNotSupported",
                f'Unsupported value: "{match}": supported values: "NotOlderThan", "Exact", ""',
            )
        )
    elif match:
        if not rv:
            forbidden = "resourceVersionMatch is forbidden unless resourceVersion is provided"
            problems.append(("FieldValueForbidden", f"Forbidden: {forbidden}"))
        if cont:
            forbidden = "resourceVersionMatch is forbidden when continue is provided"
            problems.append(("FieldValueForbidden", f"Forbidden: {forbidden}"))
        if match == "Exact" and rv == "0":
            forbidden = 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
            problems.append(("FieldValueForbidden", f"Forbidden: {forbidden}"))
    if rv and not rv.isdigit():
        raise status.bad_request(f"invalid resource version: {rv}")
    if problems:
        errors = [(reason, "resourceVersionMatch", msg) for reason, msg in problems]
        raise status.invalid("ListOptions", "", errors, group="meta.k8s.io")


def _too_old_list(exc: TooOld, store: Store) -> status.ApiError:
    if exc.requested > store.resource_version:  # etcd3's NewTooLargeResourceVersionError
        message = f"Too large resource version: {exc.requested}, current: {exc.floor}"
        cause = [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
        body = status.build_status(504, "Timeout", message, causes=cause, retry_after_s=1)
        return status.ApiError(504, body, headers=[("Retry-After", "1")])
    return status.ApiError(410, status.build_status(410, "Expired", _EXPIRED_LIST))


def _expired_continue(start: int) -> status.ApiError:
    body = status.build_status(410, "Expired", _EXPIRED_CONTINUE)
    token = {"start": start, "rv": -1}
    body["metadata"] = {"continue": base64.urlsafe_b64encode(json.dumps(token).encode()).decode()}
    return status.ApiError(410, body)


def _line(kind: str, obj: Obj) -> bytes:
    return status.encode({"type": kind, "object": obj})


def _event_line(ev: Event, q: Query) -> bytes | None:
    """The line this watcher sees for `ev`, or None (selector decides per old/new object)."""
    if ev.resource != q.kind.resource:
        return None
    seen = _decide(ev, q)
    if seen is None:
        return None
    kind, obj = seen
    if q.table is not None:
        return _line(kind, q.table(obj))
    if q.kind.view is not None:
        return _line(kind, q.kind.view(obj))
    if kind == ev.type and obj is ev.obj:  # the common case: shared by every such watcher
        if ev.line is None:
            ev.line = _line(ev.type, ev.obj)
        return ev.line
    return _line(kind, obj)


def _shown(q: Query, obj: Obj) -> Obj:
    if q.table is not None:
        return q.table(obj)
    return q.kind.view(obj) if q.kind.view is not None else obj


def _decide(ev: Event, q: Query) -> tuple[str, Obj] | None:
    if ev.type == "DELETED":
        return ("DELETED", ev.obj) if q.matches(ev.obj) else None
    now = q.matches(ev.obj)
    before = ev.type != "ADDED" and q.matches(ev.prev)
    if now:
        return ("MODIFIED" if before else "ADDED", ev.obj)
    if before:
        assert ev.prev is not None
        gone = {**ev.prev, "metadata": {**ev.prev["metadata"], "resourceVersion": str(ev.rv)}}
        return ("DELETED", gone)
    return None


def _bookmark(kind: Kind, rv: int, *, initial_end: bool = False) -> bytes:
    meta: Obj = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj: Obj = {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta}
    if kind.resource == "pods":
        obj |= {"spec": {"containers": None}, "status": {}}
    return _line("BOOKMARK", obj)


@dataclass
class WatchOptions:
    rv: str | None
    timeout_s: float
    bookmarks: bool
    send_initial: bool


def parse_watch_options(
    param: Callable[[str], str | None], flag: Callable[[str], bool]
) -> WatchOptions:
    rv = param("resourceVersion") or None
    if rv is not None and rv != "0" and not rv.isdigit():
        raise status.ApiError(
            400,
            status.build_status(400, "BadRequest", f"invalid resource version: {rv}"),
        )
    raw_timeout = param("timeoutSeconds")
    try:
        timeout_s = float(raw_timeout or 0)
    except ValueError as exc:
        raise status.bad_request(f"invalid timeoutSeconds: {raw_timeout!r}") from exc
    if timeout_s <= 0:  # unset or 0: minRequestTimeout (1800 s) * (1 + rand), as handlers/get.go
        timeout_s = random.uniform(1800, 3600)
    send_initial = flag("sendInitialEvents")
    bookmarks = flag("allowWatchBookmarks")
    problems = []  # k/k ValidateListOptions, for a watch with sendInitialEvents
    if send_initial and param("resourceVersionMatch") != "NotOlderThan":
        problems.append(
            "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to "
            "NotOlderThan"
        )
    if send_initial and not bookmarks:
        problems.append("sendInitialEvents requires setting allowWatchBookmarks=true")
    if problems:
        errors = [("FieldValueForbidden", "sendInitialEvents", f"Forbidden: {p}") for p in problems]
        raise status.invalid("ListOptions", "", errors, group="meta.k8s.io")
    return WatchOptions(rv, timeout_s, bookmarks, send_initial)


async def serve_watch(
    ex: Exchange,
    store: Store,
    faults: Faults,
    stats: Stats,
    q: Query,
    opts: WatchOptions,
    *,
    bookmark_interval_s: float,
) -> None:
    initial: list[bytes] = []
    try:
        if opts.rv in (None, "0") or opts.send_initial:
            objs = [o for o in store.list(q.kind.resource, q.namespace) if q.matches(o)]
            initial = [_line("ADDED", _shown(q, o)) for o in objs]
            replay, events = store.open_watch(None, **q.subscription)
        elif faults.take_watch_expiry():
            raise TooOld(int(opts.rv), store.history_floor)
        else:
            replay, events = store.open_watch(int(opts.rv), **q.subscription)
    except TooOld as exc:
        stats.watches_total += 1
        async with ex.open_stream() as write:
            await write(_line("ERROR", status.expired(str(exc))))
        return
    if opts.send_initial and opts.bookmarks:
        initial.append(_bookmark(q.kind, store.resource_version, initial_end=True))
    initial += [line for ev in replay if (line := _event_line(ev, q))]
    stats.watches_open += 1
    stats.watches_total += 1
    stats.note()
    cut = _Cut()
    faults.watch_cuts.add(cut)
    try:
        async with events, ex.open_stream() as write:
            with trio.move_on_after(opts.timeout_s), cut.scope:
                await _pump(write, events, q, initial, faults, store, opts, bookmark_interval_s)
            if cut.abrupt:
                await ex.abort()
    finally:
        faults.watch_cuts.discard(cut)
        stats.watches_open -= 1
        stats.note()


class _Cut:
    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.abrupt = False

    def __call__(self, abrupt: bool) -> None:
        self.abrupt = abrupt
        self.scope.cancel()


async def _pump(
    write: Callable[[bytes], Awaitable[None]],
    events: Subscription,
    q: Query,
    initial: list[bytes],
    faults: Faults,
    store: Store,
    opts: WatchOptions,
    bookmark_interval_s: float,
) -> None:
    """Write events in batches (one chunk per batch) until the channel ends."""
    if initial:
        await write(b"".join(initial))
    next_bookmark = trio.current_time() + bookmark_interval_s
    last_rv = store.resource_version
    ended = False
    while not ended:
        batch: list[bytes] = []
        drained = False
        with trio.move_on_at(next_bookmark if opts.bookmarks else float("inf")):
            try:
                ev: Event | None = await events.receive()
                while ev is not None and len(batch) < BATCH_EVENTS:
                    last_rv = ev.rv
                    if line := _event_line(ev, q):
                        batch.append(line)
                    try:
                        ev = events.receive_nowait()
                    except trio.WouldBlock:
                        ev, drained = None, True
            except trio.EndOfChannel:  # the store dropped a slow watcher: end cleanly
                ended = True
        if opts.bookmarks and not ended and trio.current_time() >= next_bookmark:
            # Every event up to the store's RV is in hand only if the channel is empty.
            rv = store.resource_version if drained or not batch else last_rv
            batch.append(_bookmark(q.kind, rv))
            next_bookmark = trio.current_time() + bookmark_interval_s
        if batch:
            await faults.wait_answering()
            await write(b"".join(batch))
