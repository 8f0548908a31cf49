"""Resource limits: Kubernetes quantities and per-tier clamping. Pure.

Owns `parse_quantity` (the Kubernetes quantity grammar: `500m`, `2`, `0.5`,
`100Mi`, `1Gi`, `512M`, `1e3`), and `clamp_limits`, which turns what a request
asked for into the effective limits of one session: `min(requested, ceiling)`
per field, the ceiling whenever the request is absent or unparseable (a
request may ask for less, never more, and a garbled one never lifts a limit).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

from runnerd.backend import Limits

if TYPE_CHECKING:  # config imports parse_quantity from here; avoid the cycle
    from runnerd.config import TierLimits

# Binary (Ki = 1024) and decimal (k = 1000) SI suffixes, as Kubernetes reads them.
# The decimal exponent form (`1e3`, `1E3`) is handled by the number grammar.
_SUFFIXES: Mapping[str, Decimal] = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

# A non-negative decimal number (`2`, `0.5`, `.5`, `5.`), then either an
# exponent (`e3`, `E-2`) or one SI suffix. A sign is refused: a limit is never
# negative, and `+1` is more likely a typo than intent.
_QUANTITY = re.compile(
    r"(?P<number>\d+\.?\d*|\.\d+)"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)


class QuantityError(ValueError):
    """Not a Kubernetes quantity. The message quotes the text."""


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity in base units (cores, bytes), exactly.

    `parse_quantity("500m") == Decimal("0.5")`, `parse_quantity("1Gi") == 2**30`.

    Raises:
        QuantityError: `text` is not a non-negative quantity.
    """
    match = _QUANTITY.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"'{text}' is not a Kubernetes quantity (e.g. 500m, 2, 100Mi, 1Gi)")
    try:
        number = Decimal(match["number"])
        if match["exp"]:
            number = number.scaleb(int(match["exp"][1:]))
    except (ArithmeticError, ValueError) as exc:  # an absurd exponent overflows
        raise QuantityError(f"'{text}' is not a Kubernetes quantity") from exc
    return number * _SUFFIXES[match["suffix"] or ""]


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
