"""The apiserver's request pipeline: route, count, fault, authenticate, authorize, serve.

Order for every request (outside `/_kubesim/`): silence (hang) → route and count →
authentication (401) → injected failure (429/500/503) → unknown path (404) →
RBAC (403) → handler. Authentication comes first as in kube-apiserver's filter
chain, where max-in-flight and priority-and-fairness (the 429s) sit inside it.
Errors are `status.ApiError`, rendered once, here.

Resources are served from `store.Store`; list/watch live in `watch.py`,
attach/exec pre-upgrade checks in `streams.py`.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import random
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from tests.kubesim import (
    discovery,
    gateway,
    logs,
    params,
    quota,
    status,
    streams,
    table,
    updates,
)
from tests.kubesim.discovery import KINDS, Kind
from tests.kubesim.faults import Faults, Stats
from tests.kubesim.selectors import SelectorError, parse_field_selector, parse_label_selector
from tests.kubesim.store import AlreadyExists, NotFound, Store
from tests.kubesim.watch import Query, build_list, parse_watch_options, serve_watch
from tests.kubesim.wire import Exchange, Request

Obj = dict[str, Any]
HEALTHY: Obj = {}  # sentinel document: /healthz, /livez, /readyz answer plain "ok"
TABLE_CONTENT_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # k/k SimpleNameGenerator's alphabet


@dataclass
class Route:
    verb: str
    pattern: str
    kind: Kind | None = None
    namespace: str | None = None
    name: str | None = None
    sub: str | None = None
    doc: Callable[[], Obj | None] | None = None


@dataclass
class ApiServer:
    store: Store
    faults: Faults
    stats: Stats
    token: str
    user: str
    server_address: Callable[[], str]
    bookmark_interval_s: float = 1.0
    kubelet: Callable[[], Any] = field(default=lambda: None)
    # Group → the versions it serves, preferred first (`discovery.VERSIONS`).
    # Empty for a group: not installed (its paths and discovery are 404).
    served: discovery.Served = field(default_factory=lambda: dict(discovery.VERSIONS))

    async def handle(self, ex: Exchange) -> None:
        """Answer one request. Accounting (README "Accounting"): API requests only, never
        `/_kubesim/*`; a request counts when it arrives, its response when the status
        line goes out (a stream or an upgrade as it starts), so the two agree except
        for requests still unanswered (a silent server, a client that left first)."""
        if not ex.request.path.startswith("/_kubesim/"):
            ex.on_status = self.stats.count_response
        try:
            await self._handle(ex)
        except status.ApiError as err:
            if ex.responded:
                return
            await ex.respond(
                err.code, err.render(), content_type=err.content_type, headers=err.headers
            )

    async def _handle(self, ex: Exchange) -> None:
        req = ex.request
        if req.path.startswith("/_kubesim/"):
            await self._internal(ex)
            return
        route = self._route(req)
        self.stats.requests[(route.verb, route.pattern)] += 1
        self.stats.note()
        if self.faults.silent:
            async with ex.watch_disconnect():
                await self.faults.wait_answering()
                await trio.sleep_forever()  # a silent server never answers this request
        if delay_s := self.faults.take_delay(route.verb):
            await trio.sleep(delay_s)
        user = self._authenticate(req)
        if failure := self.faults.take_failure(route.verb):
            raise failure
        if route.doc is not None:
            doc = route.doc()
            if doc is None:
                raise status.path_not_found()
            if doc is HEALTHY:
                await ex.respond(200, b"ok", content_type="text/plain; charset=utf-8")
                return
            accept = req.headers.get("accept", "")
            if req.path in ("/api", "/apis") and discovery.wants_aggregated(accept):
                aggregated = discovery.build_aggregated(req.path, self.served)
                ctype = discovery.AGGREGATED_CONTENT_TYPE
                await ex.respond(200, status.encode(aggregated), content_type=ctype)
                return
            await ex.respond(200, status.encode(doc))
            return
        if route.kind is None:
            raise status.path_not_found()
        self._authorize(user, route)
        if req.param("dryRun"):  # better a clear refusal than a dry run that writes
            raise status.bad_request("kubesim does not implement dryRun")
        await self._dispatch(ex, route, user)

    # ---- routing ---------------------------------------------------------------

    def _route(self, req: Request) -> Route:
        parts = [p for p in req.path.split("/") if p]
        docs = self._discovery(parts)
        if docs is not None:
            return Route("get", req.path, doc=docs)
        if parts[:2] == ["api", "v1"]:
            group, rest, prefix = "", parts[2:], "/api/v1"
        elif parts[:1] == ["apis"] and len(parts) >= 3 and self._serves(parts[1], parts[2]):
            group, rest, prefix = parts[1], parts[3:], f"/apis/{parts[1]}/{parts[2]}"
        else:
            return Route(params.verb_of(req, False, None), req.path)
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        kind = KINDS.get((group, rest[0])) if rest else None
        if kind is not None and parts[0] == "apis" and parts[2] != kind.version:
            view = gateway.as_version(parts[2])
            kind = dataclasses.replace(kind, version=parts[2], view=view)
        if kind is None or len(rest) > 3 or (ns and not kind.namespaced):
            return Route(params.verb_of(req, False, None), req.path)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if kind.namespaced and ns is None and name is not None:
            return Route(params.verb_of(req, True, sub), req.path)  # /api/v1/pods/x: no such path
        pattern = prefix + ("/namespaces/{namespace}" if ns else "") + f"/{kind.resource}"
        pattern += "/{name}" if name else ""
        pattern += f"/{sub}" if sub else ""
        verb = params.verb_of(req, name is not None, sub)
        return Route(verb, pattern, kind, ns, name, sub)

    def _serves(self, group: str, version: str) -> bool:
        """`/apis/<group>/<version>` is served: a served version of a known
        group; any other group's v1 is left to the kind lookup (a 404)."""
        if group in discovery.VERSIONS:
            return version in self.served.get(group, ())
        return version == "v1"

    def _discovery(self, parts: list[str]) -> Callable[[], Obj | None] | None:
        path = "/" + "/".join(parts)
        table: dict[str, Callable[[], Obj | None]] = {
            "/version": discovery.build_version,
            "/api": lambda: discovery.build_api_versions(self.server_address()),
            "/api/v1": lambda: discovery.build_resource_list(""),
            "/apis": lambda: discovery.build_group_list(self.served),
        }
        if path in table:
            return table[path]
        if path in ("/healthz", "/livez", "/readyz"):
            return lambda: HEALTHY
        if len(parts) == 2 and parts[0] == "apis":
            return lambda: discovery.build_group(parts[1], self.served)
        if len(parts) == 3 and parts[0] == "apis" and parts[1] in discovery.GROUPS:
            group, version = parts[1], parts[2]
            if version in self.served.get(group, ()):
                return lambda: discovery.build_resource_list(group, version)
            return lambda: None
        if parts[:2] == ["openapi", "v3"]:
            if len(parts) == 2:
                return discovery.build_openapi_v3_index
            return lambda: discovery.build_openapi_v3("/".join(parts[2:]))
        if parts and parts[0] in ("openapi", "swagger.json", "swaggerapi"):
            return lambda: None
        return None

    # ---- auth --------------------------------------------------------------------

    def _authenticate(self, req: Request) -> str:
        if req.peer_cn:
            return req.peer_cn
        auth = req.headers.get("authorization", "")
        if auth.startswith("Bearer ") and auth[7:].strip() == self.token:
            return self.user
        if streams.token_from_subprotocols(req.subprotocols) == self.token:
            return self.user
        raise status.unauthorized()

    def _authorize(self, user: str, route: Route) -> None:
        assert route.kind is not None
        resource = route.kind.resource + (f"/{route.sub}" if route.sub else "")
        verbs = [route.verb]
        if route.sub in ("attach", "exec"):
            verbs = ["get", "create"]  # KEP-4006: the upgrade also needs create
        for verb in verbs:
            if self.faults.is_denied(verb, resource, route.namespace):
                inner = status.rbac_inner(user, verb, resource, route.kind.group, route.namespace)
                raise status.forbidden(route.kind.resource, route.name, inner, route.kind.group)

    # ---- handlers ----------------------------------------------------------------

    async def _dispatch(self, ex: Exchange, route: Route, user: str) -> None:
        kind = route.kind
        assert kind is not None
        handlers: dict[str, Callable[[Exchange, Route], Awaitable[None]]] = {
            "list": self._list,
            "watch": self._list,
            "create": self._create,
            "get": self._get,
            "delete": self._delete,
            "update": self._update,
            "patch": self._update,
        }
        if route.sub in ("attach", "exec") and kind.resource == "pods":
            await streams.serve_upgrade(
                ex,
                route.sub,
                self.store,
                self.faults,
                self.stats,
                route.namespace or "",
                route.name or "",
                self.kubelet(),
            )
            return
        if route.sub == "log" and kind.resource == "pods" and route.verb == "get":
            await logs.serve_log(
                ex, self.store, route.namespace or "", route.name or "", self.kubelet()
            )
            return
        if kind.namespaced and route.namespace is None and route.verb not in ("list", "watch"):
            raise status.method_not_allowed()  # the all-namespaces path only lists
        if route.sub not in (None, "status"):
            raise status.path_not_found()
        if route.verb not in kind.verbs and route.sub is None:
            raise status.method_not_allowed()
        writes_status = kind.status_subresource and route.verb in ("update", "patch")
        if route.verb not in handlers or (
            route.sub == "status" and route.verb != "get" and not writes_status
        ):
            raise status.method_not_allowed()  # only reads of pods/status are implemented
        await handlers[route.verb](ex, route)

    async def _get(self, ex: Exchange, route: Route) -> None:
        kind = route.kind
        assert kind is not None and route.name is not None
        obj = self.store.get(kind.resource, route.namespace or "", route.name)
        if obj is None:
            raise status.not_found(kind.resource, route.name, kind.group)
        if kind.resource == "resourcequotas":
            obj["status"] = quota.build_quota_status(obj, self.store.list("pods", route.namespace))
        if table.wants_table(ex.request.headers.get("accept", "")) and route.sub is None:
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            await _respond_table(ex, kind, {"metadata": meta, "items": [obj]})
            return
        await ex.respond(200, status.encode(kind.view(obj) if kind.view else obj))

    async def _list(self, ex: Exchange, route: Route) -> None:
        kind = route.kind
        assert kind is not None
        req = ex.request
        try:
            selector = req.param("fieldSelector") or ""
            fields, pinned = parse_field_selector(selector, kind.resource, kind.field_labels)
            labels = parse_label_selector(req.param("labelSelector") or "")
        except SelectorError as exc:
            raise status.bad_request(str(exc)) from exc
        q = Query(kind, route.namespace, fields, labels, pinned)
        if route.verb == "watch":
            if table.wants_table(req.headers.get("accept", "")):
                q.table = table.build_row_table(kind.kind)
            opts = parse_watch_options(req.param, req.flag)
            await serve_watch(
                ex,
                self.store,
                self.faults,
                self.stats,
                q,
                opts,
                bookmark_interval_s=self.bookmark_interval_s,
            )
            return
        limit = params.int_param(req, "limit")
        as_table = table.wants_table(req.headers.get("accept", ""))
        body = build_list(
            self.store,
            q,
            limit=limit,
            cont=req.param("continue"),
            view=not as_table,
            rv_param=req.param("resourceVersion"),
            match=req.param("resourceVersionMatch"),
        )
        if as_table:
            await _respond_table(ex, kind, body)
            return
        await ex.respond(200, status.encode(body))

    async def _create(self, ex: Exchange, route: Route) -> None:
        kind = route.kind
        assert kind is not None and kind.validate is not None and kind.default is not None
        obj = params.parse_object(ex.request, kind)
        meta = obj.setdefault("metadata", {})
        for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(key, None)
        if body_ns := meta.get("namespace"):
            if route.namespace and body_ns != route.namespace:
                raise status.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
        if kind.resource in gateway.STATUS_RESET_KINDS:
            obj.pop("status", None)
        if errors := kind.validate(obj):
            raise status.invalid(kind.kind, meta.get("name", ""), errors, kind.group)
        obj = gateway.admit_create(kind.resource, kind.default(obj), self.store)
        ns = route.namespace or ""
        if kind.namespaced and self.store.get("namespaces", "", ns) is None:
            raise status.not_found("namespaces", ns)
        if kind.resource == "pods":
            self._admit_quota(obj, ns)
        try:  # no checkpoint since the quota check: concurrent creates cannot both fit
            created = self.store.create_nowait(kind.resource, ns, obj)
        except AlreadyExists as exc:
            raise status.already_exists(kind.resource, meta["name"], kind.group) from exc
        await ex.respond(201, status.encode(kind.view(created) if kind.view else created))

    def _admit_quota(self, pod: Obj, ns: str) -> None:
        quotas = self.store.list("resourcequotas", ns)
        if not quotas:
            return
        if problem := quota.check_quota(pod, quotas, self.store.list("pods", ns)):
            name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
            raise status.forbidden("pods", name, problem)

    async def _update(self, ex: Exchange, route: Route) -> None:
        """PUT (replace, with an RV precondition) and PATCH (see updates.py)."""
        kind = route.kind
        assert kind is not None and kind.validate is not None and route.name is not None
        ns, name = route.namespace or "", route.name
        current = self.store.get(kind.resource, ns, name)
        if current is None:
            raise status.not_found(kind.resource, name, kind.group)
        proposed = self._proposed(ex.request, kind, current)
        if route.sub == "status":  # the status strategy: only `status` changes
            await self._update_status(ex, kind, current, proposed)
            return
        updated = updates.build_updated(current, proposed)
        errors = kind.validate(updated)
        if not errors and kind.default is not None:  # decoding defaults, as on create
            defaulted = kind.default(updates.keep_allocated(current, updated))
            updated = updates.build_updated(current, defaulted)
        if kind.resource == "pods" and not updates.pod_spec_change_allowed(
            current["spec"], updated.get("spec") or {}
        ):
            errors.append(("FieldValueForbidden", "spec", updates.POD_UPDATE_FORBIDDEN))
        if kind.validate_update is not None:
            errors = kind.validate_update(current, updated) + errors
        if errors:
            raise status.invalid(kind.kind, name, errors, kind.group)
        gateway.keep_generation(kind.resource, current, updated)

        def replace(obj: Obj) -> None:
            obj.clear()
            obj.update(updated)

        await ex.respond(
            200, status.encode(self.store.update_nowait(kind.resource, ns, name, replace))
        )

    async def _update_status(self, ex: Exchange, kind: Kind, current: Obj, proposed: Obj) -> None:
        """`<resource>/status` PUT or PATCH: the proposed `status`, everything
        else (spec, metadata) kept, as the kinds' status strategies do."""
        new_status = copy.deepcopy(proposed.get("status") or {})

        def replace(obj: Obj) -> None:
            obj["status"] = new_status

        meta = current["metadata"]
        updated = self.store.update_nowait(
            kind.resource, meta.get("namespace") or "", meta["name"], replace
        )
        await ex.respond(200, status.encode(kind.view(updated) if kind.view else updated))

    def _proposed(self, req: Request, kind: Kind, current: Obj) -> Obj:
        if req.method == "PUT":
            proposed = params.parse_object(req, kind)
            meta = proposed.get("metadata") or {}
            if meta.get("name") not in (None, current["metadata"]["name"]):
                raise status.bad_request(
                    f"the name of the object ({meta.get('name')}) does not match the name on "
                    f"the URL ({current['metadata']['name']})"
                )
            rv = meta.get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise status.conflict(kind.resource, current["metadata"]["name"], kind.group)
            return proposed
        content_type = req.headers.get("content-type", "").split(";")[0].strip()
        if content_type not in updates.PATCH_TYPES:
            raise status.unsupported_media_type(updates.PATCH_TYPES)
        try:
            return updates.apply_patch(current, json.loads(req.body or b"null"), content_type)
        except ValueError as exc:  # PatchError or bad JSON
            body = status.build_status(422, "Invalid", str(exc))
            raise status.ApiError(422, body) from exc

    async def _delete(self, ex: Exchange, route: Route) -> None:
        kind = route.kind
        assert kind is not None and route.name is not None
        grace, policy = params.delete_options(ex.request)
        try:
            shown = await self.store.delete(
                kind.resource,
                route.namespace or "",
                route.name,
                grace_period_s=grace,
                propagation_policy=policy,
            )
        except NotFound as exc:
            raise status.not_found(kind.resource, route.name, kind.group) from exc
        await ex.respond(200, status.encode(shown))

    async def _internal(self, ex: Exchange) -> None:
        if ex.request.path == "/_kubesim/stats":
            await ex.respond(200, status.encode(self.stats.snapshot()))
        elif ex.request.path == "/_kubesim/healthz":
            await ex.respond(200, b"ok", content_type="text/plain; charset=utf-8")
        else:
            raise status.path_not_found()


async def _respond_table(ex: Exchange, kind: Kind, list_obj: Obj) -> None:
    doc = table.build_table(kind.kind, list_obj, dt.datetime.now(dt.UTC))
    await ex.respond(200, status.encode(doc), content_type=TABLE_CONTENT_TYPE)


def new_token() -> str:
    return "kubesim-" + secrets.token_urlsafe(24)
