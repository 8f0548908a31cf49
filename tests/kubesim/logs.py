"""`GET .../pods/{name}/log`: the apiserver's checks, then the kubelet's captured output.

In the real order: 404 pod; 400 container (`a container name must be specified
…`, `container X is not valid …`); 422 PodLogOptions; an unscheduled pod is an
empty 200 (the apiserver has no kubelet to ask); then the kubelet's
`validateContainerLogStatus` 400s (`… is waiting to start: ContainerCreating`,
`previous terminated container … not found`); then `text/plain`, chunked, and
with `follow` open until the container ends or the client leaves.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from tests.kubesim import params, status
from tests.kubesim.kubelet_logs import ContainerLog, LogOptions, read_log, validate_log_target
from tests.kubesim.store import Store
from tests.kubesim.streams import pick_container
from tests.kubesim.wire import Exchange, Request

TEXT = "text/plain"


async def serve_log(ex: Exchange, store: Store, ns: str, name: str, kubelet: Any) -> None:
    req = ex.request
    pod = store.get("pods", ns, name)
    if pod is None:
        raise status.not_found("pods", name)
    container = pick_container(pod, req.param("container"))
    opts = parse_log_options(req)
    if not pod["spec"].get("nodeName"):
        await ex.respond(200, b"", content_type=TEXT)
        return
    if problem := validate_log_target(pod, container, previous=req.flag("previous")):
        raise status.bad_request(problem)
    log: ContainerLog | None = None
    if kubelet is not None:
        log = kubelet.container_log(pod["metadata"]["uid"], container)
    if log is None:  # scheduled elsewhere or already forgotten: nothing to read
        await ex.respond(200, b"", content_type=TEXT)
        return
    if not opts.follow:
        body = b"".join([chunk async for chunk in read_log(log, opts)])
        await ex.respond(200, body, content_type=TEXT)
        return
    async with ex.open_stream(200, content_type=TEXT) as write:
        async for chunk in read_log(log, opts):
            await write(chunk)


def parse_log_options(req: Request) -> LogOptions:
    """PodLogOptions from the query, validated as `ValidatePodLogOptions` does."""
    tail = params.int_param(req, "tailLines")
    limit = params.int_param(req, "limitBytes")
    since_s = params.int_param(req, "sinceSeconds")
    errors = []
    if tail is not None and tail < 0:
        errors.append(("FieldValueInvalid", "tailLines", f"Invalid value: {tail}: {_GE0}"))
    if limit is not None and limit < 1:
        errors.append(("FieldValueInvalid", "limitBytes", f"Invalid value: {limit}: {_GT0}"))
    if since_s is not None and since_s < 1:
        errors.append(("FieldValueInvalid", "sinceSeconds", f"Invalid value: {since_s}: {_GT0}"))
    if errors:
        raise status.invalid("PodLogOptions", "", errors)
    since = None
    if since_s is not None:
        since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=since_s)
    elif raw := req.param("sinceTime"):
        try:
            since = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError as exc:
            raise status.bad_request(f'parsing time "{raw}": invalid sinceTime') from exc
    return LogOptions(
        follow=req.flag("follow"),
        timestamps=req.flag("timestamps"),
        tail_lines=tail,
        limit_bytes=limit,
        since=since,
    )


_GE0 = "must be greater than or equal to 0"
_GT0 = "must be greater than 0"
