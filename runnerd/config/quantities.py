"""Kubernetes quantities. Pure.

Owns `parse_quantity` (the Kubernetes quantity grammar: `500m`, `2`, `0.5`,
`100Mi`, `1Gi`, `512M`, `1e3`): the config reads its ceilings with it, a
backend converts limits with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

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
