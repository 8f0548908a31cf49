"""The image allowlist: which images a bundle session may pick. Pure.

Owns `allowed_images` (what the capabilities advertise) and `check_image` (the
`400 invalid_config` gate at session start); both read the same `Config`, so
what is advertised and what is enforced never drift.

The allowlist is ALWAYS enforced (unlike the original runner, which advertised
a read-only default but accepted anything): with no `allowed_images` on a
backend without a runtime list, only `default_image` is accepted.
"""

from __future__ import annotations

from runnerd.config.model import ENTRY, Config


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
