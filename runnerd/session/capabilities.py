"""The runner's self-description. Pure.

Owns `build_capabilities` (the `GET /v1/capabilities` document) and the
config schema in it. The image list it advertises comes from
`runnerd.config.images`, the same place the start gate asks, so what is
advertised and what is enforced never drift.

`features` says what sessions may ask for: with watch sessions off (the
config's `[watch] enabled`, on a backend that offers watch io) it is the
contract's `{io: true, ports: true}`; with them on, `io` lists the backend's
watch io modes, `watch` is true and `agents` names the catalog entries that
declare a `port` (present only when there is one).

Secrecy: the catalog appears as name/title/description only (an agent by
its name). An app's image and env never reach this document.
"""

from __future__ import annotations

from typing import Any

from runnerd.config.images import Offered, allowed_images
from runnerd.config.model import DEFAULT_DESCRIPTION, Config
from runnerd.contract import IoMode

PULL_POLICIES = ["missing", "always", "never"]


def build_config_schema(config: Config, offered: Offered) -> dict[str, Any]:
    """JSON Schema of the `SessionConfig` a client may send."""
    image: dict[str, Any] = {
        "type": "string",
        "title": "Image",
        "default": config.runner.default_image,
    }
    allowed = allowed_images(config, offered)
    if allowed is None:
        image["readOnly"] = True
    else:
        image["enum"] = list(allowed)
    return {
        "type": "object",
        "required": ["image", "pullPolicy"],
        # The request body forbids unknown fields; say so to the editor too.
        "additionalProperties": False,
        "properties": {
            "image": image,
            "pullPolicy": {
                "type": "string",
                "title": "Pull policy",
                "enum": list(PULL_POLICIES),
                "default": "missing",
            },
            "registryUrl": {
                "type": "string",
                "title": "Registry URL",
                "description": "TELO_REGISTRY_URL for the workload; blank uses the runner's.",
            },
        },
    }


def build_features(config: Config, watch_io: tuple[IoMode, ...]) -> dict[str, Any]:
    """`features`: the run-session form unless watch sessions are on."""
    if not (config.watch.enabled and watch_io):
        return {"io": True, "ports": True}
    features: dict[str, Any] = {"io": list(watch_io), "ports": True, "watch": True}
    agents = [app.name for app in config.apps.values() if app.port is not None]
    if agents:
        features["agents"] = agents
    return features


def build_capabilities(
    config: Config,
    offered: Offered,
    notices: tuple[str, ...] = (),
    watch_io: tuple[IoMode, ...] = (),
    backend_description: str | None = None,
) -> dict[str, Any]:
    """The `/v1/capabilities` document. `terms` only when configured; `apps`
    only when the catalog is non-empty, each entry with `title`/`description`
    only when set. `notices` (the backend's) follow the description.
    `watch_io`: the backend's watch io modes (none: no watch sessions).
    `backend_description`: the backend's own, shown instead of the default
    `runner.description` (which says "on this host": the local backend's)."""
    description = config.runner.description
    if backend_description and description == DEFAULT_DESCRIPTION:
        description = backend_description
    doc: dict[str, Any] = {
        "displayName": config.runner.display_name,
        "description": " ".join((description, *notices)).strip(),
        "features": build_features(config, watch_io),
        "config": {"schema": build_config_schema(config, offered)},
    }
    if config.terms is not None:
        terms = config.terms
        doc["terms"] = {"version": terms.version, "title": terms.title, "body": terms.body}
    apps = []
    for app in config.apps.values():
        entry = {"name": app.name}
        if app.title is not None:
            entry["title"] = app.title
        if app.description is not None:
            entry["description"] = app.description
        apps.append(entry)
    if apps:
        doc["apps"] = apps
    return doc
