"""Unit tests for runnerd.limits: Kubernetes quantities and tier clamping."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from runnerd.backend import Limits
from runnerd.config import TierLimits
from runnerd.limits import QuantityError, clamp_limits, parse_quantity

CEILING = TierLimits(cpu="500m", memory="512Mi", ephemeral_storage="1Gi", ttl_s=3600.0)


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


def test_limits_clamp_without_request_is_the_ceiling() -> None:
    expected = Limits(cpu="500m", memory="512Mi", ephemeral_storage="1Gi", ttl_s=3600.0)
    assert clamp_limits(None, CEILING) == expected
    assert clamp_limits({}, CEILING) == expected


def test_limits_clamp_takes_a_smaller_request() -> None:
    limits = clamp_limits(
        {"cpu": "250m", "memory": "100Mi", "ephemeral_storage": "512M", "ttl_s": 60}, CEILING
    )
    assert limits == Limits(cpu="250m", memory="100Mi", ephemeral_storage="512M", ttl_s=60.0)


def test_limits_clamp_never_exceeds_the_ceiling() -> None:
    limits = clamp_limits(
        {"cpu": "2", "memory": "1Gi", "ephemeral_storage": "10Gi", "ttl_s": 86400}, CEILING
    )
    assert limits == clamp_limits(None, CEILING)


@pytest.mark.parametrize(
    "bad",
    [
        {"cpu": "lots"},
        {"cpu": "-1"},
        {"cpu": "0"},
        {"cpu": True},
        {"cpu": None},
        {"cpu": ["1"]},
        {"ttl_s": "60"},
        {"ttl_s": -5},
        {"ttl_s": 0},
        {"ttl_s": float("nan")},
        {"ttl_s": False},
    ],
)
def test_limits_clamp_unparseable_is_the_ceiling(bad: dict[str, Any]) -> None:
    assert clamp_limits(bad, CEILING) == clamp_limits(None, CEILING)


def test_limits_clamp_accepts_numbers_as_quantities() -> None:
    assert clamp_limits({"cpu": 0.25, "memory": 1024}, CEILING).cpu == "0.25"
    assert clamp_limits({"memory": 1024}, CEILING).memory == "1024"
