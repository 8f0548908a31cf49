"""A pod's volumes on the host: emptyDirs, and configMap volumes projected as files.

Before any container of a pod starts (init ones included), the kubelet mounts
its volumes, as `WaitForAttachAndMount` does ahead of `SyncPod`. A configMap
volume is written the way the kubelet's AtomicWriter writes one: the payload in
a timestamped `..<ts>` directory, `..data` a symlink to it, and each top-level
name a symlink through `..data`; each file's mode is its item's `mode`, else
`defaultMode`, else 0644. With `items`, only the listed keys are projected, each
at its `path`. A ConfigMap that does not exist (or lacks an `items` key) keeps
the pod waiting (`ContainerCreating`/`PodInitializing`) with the real Warning
`FailedMount` event (`MountVolume.SetUp failed for volume "V" : configmap "X" not
found`), retried with the kubelet's doubling back-off, until it appears; with
`optional: true` the volume is mounted empty instead. Contents are fixed at
mount time (the real kubelet refreshes them within about a minute).

Every other volume is an empty directory (secret/projected contents are not
simulated). A host process cannot get a read-only mount: files carry their mode,
nothing stops a same-user (or root) write.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import Any

import trio

from .configmaps import files_of
from .store import Store

Obj = dict[str, Any]
DEFAULT_MODE = 0o644  # configMap volumes' defaultMode (420)
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 122.0  # the kubelet's mount back-off: 500 ms doubling to 2m2s
Report = Callable[[str], Awaitable[None]]


class Unmountable(Exception):
    """One volume cannot be set up yet; str() is the reason after `MountVolume.SetUp failed`."""


def build_payload(source: Obj, cm: Obj | None) -> dict[str, tuple[bytes, int]]:
    """{relative path: (bytes, mode)} a configMap volume holds; raises Unmountable. Pure."""
    name, optional = source.get("name", ""), bool(source.get("optional"))
    if cm is None:
        if optional:
            return {}
        raise Unmountable(f'configmap "{name}" not found')
    files = files_of(cm)
    mode = int(source.get("defaultMode", DEFAULT_MODE))
    items = source.get("items")
    if not items:
        return {key: (data, mode) for key, data in files.items()}
    payload: dict[str, tuple[bytes, int]] = {}
    for item in items:
        key = item.get("key", "")
        if key not in files:
            if optional:
                continue
            raise Unmountable(f"configmap references non-existent config key: {key}")
        payload[str(item.get("path") or key)] = (files[key], int(item.get("mode", mode)))
    return payload


def write_payload(target: Path, payload: dict[str, tuple[bytes, int]]) -> None:
    """AtomicWriter's layout under `target` (see the module doc)."""
    target.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    data_dir = target / stamp
    data_dir.mkdir(mode=0o755)
    for rel, (content, mode) in sorted(payload.items()):
        path = data_dir / PurePosixPath(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    (target / "..data").symlink_to(stamp)
    for top in sorted({PurePosixPath(rel).parts[0] for rel in payload}):
        (target / top).symlink_to(f"..data/{top}")


async def mount_volumes(
    store: Store, ns: str, spec: Obj, root: Path, report: Report, stopping: trio.Event
) -> bool:
    """Set up every volume of the pod under `root` (one directory per volume).

    Waits while a configMap volume cannot be set up, calling `report(reason)` at each
    (back-off) retry; returns False if `stopping` is set first.
    """
    pending: list[Obj] = []
    for volume in spec.get("volumes") or []:
        (root / volume["name"]).mkdir(parents=True, exist_ok=True)
        if volume.get("configMap") is not None:
            pending.append(volume)
    delay = RETRY_FIRST_S
    while pending:
        for volume in list(pending):
            source = volume["configMap"]
            try:
                payload = build_payload(source, store.get("configmaps", ns, source.get("name", "")))
            except Unmountable as exc:
                await report(f'MountVolume.SetUp failed for volume "{volume["name"]}" : {exc}')
                continue
            write_payload(root / volume["name"], payload)
            pending.remove(volume)
        if pending and not await _wait_change(store, ns, pending, delay, stopping):
            return False
        delay = min(delay * 2, RETRY_MAX_S)
    return True


async def _wait_change(
    store: Store, ns: str, pending: list[Obj], timeout_s: float, stopping: trio.Event
) -> bool:
    """Until a pending ConfigMap changes or the back-off ends (True), or `stopping` (False)."""
    names = {v["configMap"].get("name", "") for v in pending}
    _, events = store.open_watch(None, resource="configmaps", namespace=ns)
    async with events, trio.open_nursery() as nursery:

        async def changed() -> None:
            async for ev in events:
                if ev.obj["metadata"]["name"] in names:
                    break
            nursery.cancel_scope.cancel()

        async def stopped() -> None:
            await stopping.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(changed)
        nursery.start_soon(stopped)
        await trio.sleep(timeout_s)
        nursery.cancel_scope.cancel()
    return not stopping.is_set()


def subpath_dir(volume_dir: Path, sub_path: str) -> Path:
    """A mount's host path: the volume's directory, or what `subPath` names inside it
    (an existing file, e.g. one configMap key, resolved as the kubelet's bind mount does)."""
    if not sub_path:
        return volume_dir
    path = volume_dir / sub_path
    if path.exists():
        return Path(os.path.realpath(path))
    path.mkdir(parents=True, exist_ok=True)
    return path
