"""The runner's self-description and its image gate. Pure.

Owns `build_capabilities` (the `GET /v1/capabilities` document), and the image
allowlist it advertises: `allowed_images` (what may run) and `check_image`
(the `400 invalid_config` gate at session start). Both come from the same
`Config`, so what is advertised and what is enforced never drift.

The allowlist is ALWAYS enforced (unlike the original runner, which advertised
a read-only default but accepted anything): with no `allowed_images` on a
backend without a runtime list, only `default_image` is accepted.

Secrecy: the catalog appears as name/title/description only. An app's image
and env never reach this document.
"""

from __future__ import annotations

from typing import Any

from runnerd.config_model import ENTRY, Config

PULL_POLICIES = ["missing", "always", "never"]


def allowed_images(config: Config) -> tuple[str, ...] | None:
    """The images a bundle session may pick, default first; None = only
    `default_image` (advertised read-only).

    The operator's `runner.allowed_images` when set. Otherwise, on the local
    backend, every runtime that runs bundles (`{entry}` in its command) and
    that no catalog app uses: a catalog image is never advertised, so a client
    cannot launch an app's runtime with its own bundle. On any other backend,
    None.
    """
    runner = config.runner
    if runner.allowed_images:
        images = list(runner.allowed_images)
    elif runner.backend == "local":
        app_images = {app.image for app in config.apps.values()}
        images = [
            name
            for name, rt in config.local.runtimes.items()
            if name not in app_images and any(ENTRY in arg for arg in rt.command)
        ]
    else:
        return None
    # Default first, so an editor's dropdown opens on it; always included
    # (config validation guarantees it for an operator list).
    rest = [image for image in images if image != runner.default_image]
    return (runner.default_image, *rest)


def check_image(config: Config, image: str) -> str | None:
    """None when a bundle session may run `image`; else the client-facing
    reason, naming the allowed images."""
    allowed = allowed_images(config) or (config.runner.default_image,)
    if image in allowed:
        return None
    return f"image {image!r} is not allowed by this runner. Allowed images: {', '.join(allowed)}"


def build_config_schema(config: Config) -> dict[str, Any]:
    """JSON Schema of the `SessionConfig` a client may send."""
    image: dict[str, Any] = {
        "type": "string",
        "title": "Image",
        "default": config.runner.default_image,
    }
    allowed = allowed_images(config)
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


def build_capabilities(config: Config, notices: tuple[str, ...] = ()) -> dict[str, Any]:
    """The `/v1/capabilities` document. `terms` only when configured; `apps`
    only when the catalog is non-empty, each entry with `title`/`description`
    only when set. `notices` (the backend's) follow the description."""
    doc: dict[str, Any] = {
        "displayName": config.runner.display_name,
        "description": " ".join((config.runner.description, *notices)).strip(),
        "features": {"io": True, "ports": True},
        "config": {"schema": build_config_schema(config)},
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
