"""Fixtures for the local backend tests: a backend on a temp workdir."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runnerd.local import LocalBackend
from runnerd.local.settings import LocalConfig, RuntimeConfig
from tests.harness import SESSION_PYTHON


@pytest.fixture
def visible_dir() -> Iterator[Path]:
    """A temporary directory a session's uid can reach: not under the host's
    /tmp (each session has a private one) nor a 0700 home."""
    parent = "/run" if os.access("/run", os.W_OK) else str(Path.home())
    path = Path(tempfile.mkdtemp(prefix="rd-visible-", dir=parent))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# An interpreter by absolute path: it runs fine in the workload's minimal
# environment, as the session's uid.
PYTHON = SESSION_PYTHON


def runtimes() -> dict[str, RuntimeConfig]:
    return {
        "sh": RuntimeConfig(name="sh", command=("/bin/sh", "{entry}")),
        "python": RuntimeConfig(
            name="python",
            command=(PYTHON, "-u", "{entry}"),
            inspect_args=("--inspect-port", "{inspect_port}"),
        ),
        "hello-app": RuntimeConfig(
            name="hello-app", command=("/bin/sh", "-c", "echo app-ran in $PWD; exit 7")
        ),
        "missing": RuntimeConfig(name="missing", command=("no-such-program-xyz", "{entry}")),
    }


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


# Every backend test runs under both containments: the PID namespace (this
# machine allows it) and the process-group fallback, forced by config.
@pytest.fixture(params=["auto", "process-group"])
def backend(workdir: Path, request: pytest.FixtureRequest) -> LocalBackend:
    local = LocalConfig(
        workdir=workdir, stop_grace_s=0.5, runtimes=runtimes(), containment=request.param
    )
    return LocalBackend(local)
