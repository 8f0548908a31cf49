"""The `target` fixture: each backend in turn (see targets.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance.targets import OPENERS, Target


@pytest.fixture(params=list(OPENERS))
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    """A backend to open, on its own cluster or host for the test's life."""
    async with OPENERS[request.param](tmp_path) as opened:
        yield opened
