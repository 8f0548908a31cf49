"""Unit tests for runnerd.config.quantities: the Kubernetes quantity grammar."""

from __future__ import annotations

from decimal import Decimal

import pytest

from runnerd.config.quantities import QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("0.5", Decimal("0.5")),
        (".5", Decimal("0.5")),
        ("100Mi", Decimal(100 * 2**20)),
        ("1Gi", Decimal(2**30)),
        ("1Ki", Decimal(1024)),
        ("2Ti", Decimal(2 * 2**40)),
        ("512M", Decimal(512_000_000)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("5e-1", Decimal("0.5")),
        ("100n", Decimal("1e-7")),
        ("1048576", Decimal(1048576)),
        (" 1Gi ", Decimal(2**30)),
        ("0", Decimal(0)),
    ],
)
def test_limits_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-1", "+1", "1x", "1.2.3", "Mi", "1 Gi", "1e", "1gi"])
def test_limits_parse_quantity_rejects_and_quotes_the_text(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert f"'{text}' is not a Kubernetes quantity" in str(info.value)


def test_limits_parse_quantity_absurd_exponent_is_an_error() -> None:
    with pytest.raises(QuantityError):
        parse_quantity("1e99999999999")


def test_limits_binary_and_decimal_suffixes_compare() -> None:
    assert parse_quantity("1Gi") > parse_quantity("1G")
    assert parse_quantity("1000m") == parse_quantity("1")
