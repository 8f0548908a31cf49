"""Unit tests for runnerd.session.limits: a request clamped to its tier."""

from __future__ import annotations

from typing import Any

import pytest

from runnerd.backend import Limits
from runnerd.config import TierLimits
from runnerd.session.limits import clamp_limits

CEILING = TierLimits(cpu="500m", memory="512Mi", ephemeral_storage="1Gi", ttl_s=3600.0)


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
