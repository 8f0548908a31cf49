"""The Kubernetes backend has no watch sessions yet (issue 20): no watch io,
and `open_watch` refuses with the stage a client reads."""

from __future__ import annotations

import pytest

from runnerd.backend import StartError
from runnerd.kube.backend import KubeBackend
from tests.session.watchkit import watch_spec


class _Progress:
    def progress(self, phase: str, message: str, done: bool | None = None) -> None:
        raise AssertionError("nothing to report")


async def test_kube_offers_no_watch_io_and_open_watch_refuses() -> None:
    backend = object.__new__(KubeBackend)  # open_watch needs none of its state
    assert backend.watch_io == ()
    spec = watch_spec({"main.sh": "serve"}).watch
    with pytest.raises(StartError) as refused:
        async with backend.open_watch(spec, _Progress()):  # type: ignore[arg-type]
            raise AssertionError("entered")
    assert (
        str(refused.value)
        == "watch: watch sessions are not available on the kubernetes backend yet"
    )
