"""RunSpec builders for the local backend tests."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Mapping

from runnerd.backend import BundleSpec, ImageSpec, Limits, RunSpec
from runnerd.contract import PortMapping

_ids = itertools.count(1)
LIMITS = Limits(cpu="1", memory="256Mi", ephemeral_storage="1Gi", ttl_s=3600.0)


def bundle_spec(
    runtime: str,
    source: str,
    *,
    entry: str = "main",
    extra_files: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    ports: tuple[PortMapping, ...] = (),
    inspect: bool = False,
) -> RunSpec:
    files = {entry: textwrap.dedent(source), **(extra_files or {})}
    return RunSpec.create(
        session_id=f"sess{next(_ids):08d}",
        image=ImageSpec(image=runtime, pull_policy="missing"),
        env=dict(env or {}),
        limits=LIMITS,
        bundle=BundleSpec(entry=entry, files=tuple(files.items())),
        ports=ports,
        inspect=inspect,
    )


def app_spec(app: str, image: str, env: Mapping[str, str] | None = None) -> RunSpec:
    return RunSpec.create(
        session_id=f"app{next(_ids):09d}",
        image=ImageSpec(image=image, pull_policy="missing"),
        env=dict(env or {}),
        limits=LIMITS,
        app=app,
    )
