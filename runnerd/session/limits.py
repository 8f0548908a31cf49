"""Limit clamping: what a request asked for, within its tier's ceiling. Pure.

Owns `clamp_limits`, which turns what a request asked for into the effective
limits of one session: `min(requested, ceiling)` per field, the ceiling
whenever the request is absent or unparseable (a request may ask for less,
never more, and a garbled one never lifts a limit).
"""

from __future__ import annotations

from collections.abc import Mapping

from runnerd.backend import Limits
from runnerd.config.model import TierLimits
from runnerd.config.quantities import QuantityError, parse_quantity


def _min_quantity(requested: object, ceiling: str) -> str:
    """The requested quantity when it parses, is positive and is below the
    ceiling; the ceiling otherwise (unparseable never lifts a limit)."""
    if isinstance(requested, bool) or not isinstance(requested, str | int | float):
        return ceiling
    text = str(requested).strip()
    try:
        value = parse_quantity(text)
    except QuantityError:
        return ceiling
    if value <= 0 or value >= parse_quantity(ceiling):
        return ceiling
    return text


def _min_ttl(requested: object, ceiling_s: float) -> float:
    if isinstance(requested, bool) or not isinstance(requested, int | float):
        return ceiling_s
    if not requested > 0 or requested >= ceiling_s:  # `not >` also catches NaN
        return ceiling_s
    return float(requested)


def clamp_limits(requested: Mapping[str, object] | None, ceiling: TierLimits) -> Limits:
    """Effective limits: `min(requested, ceiling)` per field.

    `requested` may carry `cpu`, `memory`, `ephemeral_storage` (quantities,
    as strings or numbers) and `ttl_s` (seconds); a missing, unparseable,
    zero or negative field takes the ceiling. Other keys are ignored.
    """
    req = requested or {}
    return Limits(
        cpu=_min_quantity(req.get("cpu"), ceiling.cpu),
        memory=_min_quantity(req.get("memory"), ceiling.memory),
        ephemeral_storage=_min_quantity(req.get("ephemeral_storage"), ceiling.ephemeral_storage),
        ttl_s=_min_ttl(req.get("ttl_s"), ceiling.ttl_s),
    )
