"""The image allowlist: which images a bundle session may pick. Pure.

Owns `allowed_images` (what the capabilities advertise) and `check_image` (the
`400 invalid_config` gate at session start); both read the same `Config`, so
what is advertised and what is enforced never drift.

The allowlist is ALWAYS enforced (unlike the original runner, which advertised
a read-only default but accepted anything): with no `allowed_images` on a
backend without a runtime list, only `default_image` is accepted.
"""

from __future__ import annotations

from runnerd.config.model import Config

# What a backend offers when the operator lists no images (its provider's
# `offered_images`); None: nothing beyond `default_image`.
Offered = tuple[str, ...] | None


def allowed_images(config: Config, offered: Offered) -> tuple[str, ...] | None:
    """The images a bundle session may pick, default first; None = only
    `default_image` (advertised read-only).

    The operator's `runner.allowed_images` when set; otherwise what the
    backend `offered` (the local backend: its bundle runtimes no catalog app
    uses, so a client cannot launch an app's runtime with its own bundle).
    """
    runner = config.runner
    if runner.allowed_images:
        images = list(runner.allowed_images)
    elif offered is not None:
        images = list(offered)
    else:
        return None
    # Default first, so an editor's dropdown opens on it; always included
    # (config validation guarantees it for an operator list).
    rest = [image for image in images if image != runner.default_image]
    return (runner.default_image, *rest)


def check_image(config: Config, image: str, offered: Offered) -> str | None:
    """None when a bundle session may run `image`; else the client-facing
    reason, naming the allowed images."""
    allowed = allowed_images(config, offered) or (config.runner.default_image,)
    if image in allowed:
        return None
    return f"image {image!r} is not allowed by this runner. Allowed images: {', '.join(allowed)}"
