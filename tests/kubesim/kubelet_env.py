"""Container env from ConfigMaps, as the kubelet's `makeEnvironmentVariables` builds it.

`envFrom[].configMapRef` (each key a variable, `prefix` prepended; names that are not
valid env var names skipped with the Warning `InvalidEnvironmentVariableNames`
event) comes first, then `env` in order, where `valueFrom.configMapKeyRef` reads
one key. A ConfigMap that does not exist (`configmap "X" not found`) or a missing
key (`couldn't find key K in ConfigMap NS/X`) is the container's
`CreateContainerConfigError`, unless the reference is `optional`; the kubelet
retries until it can (here: when the ConfigMap changes, or after a doubling
back-off). Values read from a ConfigMap are not `$(VAR)`-expanded, as in
Kubernetes: they are handed to `build_plan` escaped.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .kubelet_volumes import RETRY_FIRST_S, RETRY_MAX_S, wait_configmaps
from .store import Store

Obj = dict[str, Any]
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")  # validation.IsEnvVarName


class ConfigError(Exception):
    """The container's config cannot be made yet; str() is the status message."""


def resolve_env(store: Store, ns: str, container: Obj) -> tuple[Obj, dict[str, list[str]]]:
    """(a copy of `container` whose env holds only plain values, {ConfigMap: the keys
    skipped as invalid names}). Raises ConfigError for a missing, non-optional
    ConfigMap or key."""
    resolved: list[Obj] = []
    skipped: dict[str, list[str]] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef")
        if ref is None:
            continue
        cm = _configmap(store, ns, ref)
        for key, value in ((cm or {}).get("data") or {}).items():
            name = str(source.get("prefix") or "") + key
            if _ENV_NAME.fullmatch(name):
                resolved.append({"name": name, "value": _escaped(value)})
            else:
                skipped.setdefault(ref.get("name", ""), []).append(name)
    for var in container.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("configMapKeyRef")
        if ref is None:
            resolved.append(var)
            continue
        cm = _configmap(store, ns, ref)
        data = (cm or {}).get("data") or {}
        if cm is None or (ref.get("key") not in data and ref.get("optional")):
            continue
        if ref.get("key") not in data:
            raise ConfigError(f"couldn't find key {ref.get('key')} in ConfigMap {ns}/{ref['name']}")
        resolved.append({"name": var["name"], "value": _escaped(data[ref["key"]])})
    out = copy.deepcopy(container)
    out.pop("envFrom", None)
    out["env"] = resolved
    return out, {name: sorted(keys) for name, keys in skipped.items()}


def names_of(container: Obj) -> set[str]:
    """Every ConfigMap the container's env reads."""
    names = {
        s["configMapRef"].get("name", "")
        for s in container.get("envFrom") or []
        if s.get("configMapRef")
    }
    for var in container.get("env") or []:
        if ref := (var.get("valueFrom") or {}).get("configMapKeyRef"):
            names.add(ref.get("name", ""))
    return names


async def wait_for_env(
    store: Store,
    ns: str,
    container: Obj,
    report: Callable[[str], Awaitable[None]],
    stopping: trio.Event,
) -> tuple[Obj, dict[str, list[str]]] | None:
    """`resolve_env`, retried while it fails (`report(message)` each time); None once
    `stopping` is set first."""
    delay = RETRY_FIRST_S
    while True:
        try:
            return resolve_env(store, ns, container)
        except ConfigError as exc:
            await report(str(exc))
        if not await wait_configmaps(store, ns, names_of(container), delay, stopping):
            return None
        delay = min(delay * 2, RETRY_MAX_S)


def skipped_message(ns: str, name: str, keys: list[str]) -> str:
    """The InvalidEnvironmentVariableNames event's text for one envFrom ConfigMap."""
    return (
        f"Keys [{', '.join(keys)}] from the EnvFrom configMap {ns}/{name} were skipped since "
        "they are considered invalid environment variable names."
    )


def _configmap(store: Store, ns: str, ref: Obj) -> Obj | None:
    cm = store.get("configmaps", ns, ref.get("name", ""))
    if cm is None and not ref.get("optional"):
        raise ConfigError(f'configmap "{ref.get("name", "")}" not found')
    return cm


def _escaped(value: Any) -> str:
    return str(value or "").replace("$", "$$")  # build_plan's $(VAR) expansion leaves it be
