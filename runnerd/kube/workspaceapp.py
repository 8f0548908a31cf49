"""The workspace application's ConfigMap: what a watch pod's `workspace`
container runs. Pure but for the calls on a `KubeClient` it is handed.

Owns the manifest (`workspace-app.telo.yaml`, package data: a Telo
application serving the workspace API of `runnerd.kube.workspaceapi` on
`watchpod.WORKSPACE_PORT`), `configmap_for` (the ConfigMap every watch pod
mounts at `watchpod.WORKSPACE_APP_DIR`), `ensure_configmap` and
`sweep_stale_configmaps`.

The ConfigMap is content-addressed: its name is
`runnerd-workspace-app-<12 hex of the SHA-256 of its data>`, so a runnerd
with another manifest makes another ConfigMap and never changes one a live
pod of an older runnerd mounts; creating it is idempotent, but a 409 is
not trusted: the one there is read back and must hold our data and labels
(anyone with create rights in the namespace could have made it; a foreign
one is refused, `ForeignConfigMap`, a damaged one of ours replaced). Labels: managed-by (as every
object runnerd makes) and the role label (`ROLE_LABEL`: workspace-app), what the
sweep selects on. It holds no secret (the token is in each pod's env).

Error handling: the client's classified `errors.KubeError`s propagate from
`ensure_configmap` (a watch session cannot start without it); the sweep
logs and goes on (a stale ConfigMap costs nothing but a name).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

import runnerd.kube.errors as errors
from runnerd.kube.podspec import MANAGED_BY_LABEL
from runnerd.kube.settings import KubeSettings
from runnerd.kube.watchpod import WORKSPACE_APP_DIR, WORKSPACE_APP_FILE

if TYPE_CHECKING:
    from runnerd.kube.client import KubeClient

log = logging.getLogger(__name__)

ROLE_LABEL = "runnerd.telo.run/role"
ROLE = "workspace-app"
NAME_PREFIX = "runnerd-workspace-app-"
MOUNT_PATH = WORKSPACE_APP_DIR
MANIFEST_RESOURCE = "workspace-app.telo.yaml"
# The Telo application name the manifest declares (what a kernel stand-in
# recognises it by).
APP_NAME = "RunnerdWorkspaceApp"


def manifest_text() -> str:
    """The workspace application's manifest, as shipped in this package."""
    return resources.files("runnerd.kube").joinpath(MANIFEST_RESOURCE).read_text("utf-8")


def role_selector(settings: KubeSettings) -> str:
    """The label selector of every workspace-app ConfigMap this runnerd made."""
    return f"{MANAGED_BY_LABEL}={settings.managed_by},{ROLE_LABEL}={ROLE}"


def configmap_for(settings: KubeSettings, manifest: str | None = None) -> dict[str, Any]:
    """The ConfigMap holding `manifest` (default: `manifest_text()`), named by its content."""
    data = {WORKSPACE_APP_FILE: manifest if manifest is not None else manifest_text()}
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode() + b"\0" + data[key].encode() + b"\0")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": NAME_PREFIX + digest.hexdigest()[:12],
            "labels": {MANAGED_BY_LABEL: settings.managed_by, ROLE_LABEL: ROLE},
        },
        "data": data,
    }


class ForeignConfigMap(errors.KubeError):
    """The content-addressed name is taken by a ConfigMap that is not ours:
    it is never mounted (its manifest would run with the pod's token)."""

    def __init__(self, name: str) -> None:
        super().__init__("could not create the workspace app", 409, "AlreadyExists")
        self.args = (
            f"could not create the workspace app: ConfigMap {name} already exists and is "
            "not runnerd's (other labels); delete or rename it",
        )


async def ensure_configmap(client: KubeClient, configmap: Mapping[str, Any]) -> None:
    """Create `configmap` unless exactly it exists.

    A ConfigMap already under the (content-addressed) name is read back: one
    with our data and labels is success; one with our labels but other data
    (damaged) is replaced; one without our labels is refused, never mounted.

    Raises:
        ForeignConfigMap: the name is held by a ConfigMap that is not ours.
        errors.KubeError: classified, `str()` client-safe.
    """
    doing = "could not create the workspace app"
    name = configmap["metadata"]["name"]
    try:
        await client.create_configmap(configmap, operation=doing)
        return
    except errors.AlreadyExists:
        pass
    try:
        found = await client.get_configmap(name, operation=doing)
    except errors.NotFound:  # deleted meanwhile: make it again
        await client.create_configmap(configmap, operation=doing)
        return
    labels = (found.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in configmap["metadata"]["labels"].items()):
        raise ForeignConfigMap(name)
    if found.get("data") == configmap["data"] and not found.get("binaryData"):
        log.debug("workspace app configmap exists name=%s", name)
        return
    log.warning("workspace app configmap damaged, replacing name=%s", name)
    await client.delete_configmap(name, operation=doing)
    await client.create_configmap(configmap, operation=doing)


def mounted_configmaps(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The ConfigMap names `pods` mount as volumes."""
    names: set[str] = set()
    for pod in pods:
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            name = (volume.get("configMap") or {}).get("name")
            if isinstance(name, str):
                names.add(name)
    return names


async def sweep_stale_configmaps(
    client: KubeClient,
    keep: str,
    pods: Iterable[Mapping[str, Any]],
    *,
    settings: KubeSettings,
) -> list[str]:
    """Delete this runnerd's workspace-app ConfigMaps other than `keep` that
    none of `pods` (the managed pods, e.g. the informer's) mounts; the names
    deleted. Never raises for the cluster's refusal (logged)."""
    in_use = mounted_configmaps(pods) | {keep}
    try:
        found = await client.list_configmaps(
            label_selector=role_selector(settings), operation="could not list configmaps"
        )
    except errors.KubeError as exc:
        log.warning("workspace app configmap sweep skipped: %s", exc)
        return []
    deleted = []
    for cm in found:
        name = (cm.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name.startswith(NAME_PREFIX) or name in in_use:
            continue
        try:
            await client.delete_configmap(name, operation="could not delete a stale configmap")
        except errors.KubeError as exc:
            log.warning("stale configmap not deleted name=%s: %s", name, exc)
            continue
        deleted.append(name)
    return deleted
