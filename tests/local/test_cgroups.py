"""Session ceilings: quantities → cgroup v2 values, finding a delegated
subtree (against a fake /sys tree in tmp), the per-session cgroup's files,
and, where the host gives runnerd a delegated cgroup, a memory ceiling that
ends a session with a clear failure."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from runnerd.backend import Limits
from runnerd.local.cgroups import (
    PIDS_MAX,
    SessionCgroups,
    build_ceilings,
    find_delegated_cgroup,
    own_cgroup_path,
    read_oom_kills,
)
from tests.harness import iter_sse, session_body, start_daemon


@pytest.mark.parametrize(
    ("cpu", "memory", "cpu_max", "memory_max"),
    [
        ("500m", "100Mi", "50000 100000", "104857600"),
        ("2", "1Gi", "200000 100000", "1073741824"),
        ("1m", "1k", "1000 100000", "1000"),  # at least 1 ms per period
        ("0.25", "1.5Mi", "25000 100000", "1572864"),
        ("1n", "1e3", "1000 100000", "1000"),
    ],
)
def test_build_ceilings(cpu: str, memory: str, cpu_max: str, memory_max: str) -> None:
    ceilings = build_ceilings(Limits(cpu=cpu, memory=memory, ephemeral_storage="1Gi", ttl_s=60))
    assert ceilings == {
        "cpu.max": cpu_max,
        "memory.max": memory_max,
        "memory.swap.max": "0",
        "memory.oom.group": "1",
        "pids.max": str(PIDS_MAX),
    }


def test_own_cgroup_path() -> None:
    assert own_cgroup_path("0::/system.slice/runnerd.service\n") == "/system.slice/runnerd.service"
    hybrid = "9:name=systemd:/\n4:memory:/x\n0::/\n"
    assert own_cgroup_path(hybrid) == "/"
    assert own_cgroup_path("4:memory:/x\n1:cpu:/\n") is None


SERVICE = "/system.slice/runnerd.service"


def fake_tree(root: Path, controllers: str = "cpu memory pids io") -> Path:
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory pids io\n")
    service = root / SERVICE.lstrip("/")
    service.mkdir(parents=True)
    (service / "cgroup.controllers").write_text(controllers + "\n")
    return service


def marked(value: bytes) -> Any:
    def getxattr(path: Path, name: str) -> bytes:
        if name == "trusted.delegate":
            return value
        raise OSError(61, "No data available")

    return getxattr


def unmarked(path: Path, name: str) -> bytes:
    raise OSError(61, "No data available")


def test_a_systemd_delegated_cgroup_is_found(tmp_path: Path) -> None:
    service = fake_tree(tmp_path)
    found = find_delegated_cgroup(f"0::{SERVICE}\n", root=tmp_path, euid=0, getxattr=marked(b"1"))
    assert found.cgroup == service


def test_an_undelegated_cgroup_is_never_used(tmp_path: Path) -> None:
    fake_tree(tmp_path)
    for getxattr in (unmarked, marked(b"0")):
        found = find_delegated_cgroup(f"0::{SERVICE}\n", root=tmp_path, euid=0, getxattr=getxattr)
        assert found.cgroup is None
        assert "was not delegated to it (systemd: Delegate=yes)" in found.reason


def test_a_cgroup_owned_by_a_non_root_runnerd_counts_as_delegated(tmp_path: Path) -> None:
    service = fake_tree(tmp_path)
    os.chown(service, 4242, 4242)
    found = find_delegated_cgroup(f"0::{SERVICE}\n", root=tmp_path, euid=4242, getxattr=unmarked)
    assert found.cgroup == service
    other = find_delegated_cgroup(f"0::{SERVICE}\n", root=tmp_path, euid=4343, getxattr=unmarked)
    assert other.cgroup is None


def test_a_v1_or_hybrid_host_has_no_delegated_cgroup(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()  # v1 controllers, no cgroup.controllers at the root
    text = "4:memory:/x\n0::/\n"
    found = find_delegated_cgroup(text, root=tmp_path, euid=0, getxattr=marked(b"1"))
    assert found.cgroup is None and "cgroup v1/hybrid" in found.reason


def test_missing_controllers_are_named(tmp_path: Path) -> None:
    fake_tree(tmp_path, controllers="cpu io")
    found = find_delegated_cgroup(f"0::{SERVICE}\n", root=tmp_path, euid=0, getxattr=marked(b"1"))
    assert found.cgroup is None and found.reason.endswith("lacks memory, pids")


def test_session_cgroup_files_and_oom_reading(tmp_path: Path) -> None:
    # A plain directory stands in for cgroupfs: what is written is what the
    # kernel would be told.
    cgroups = SessionCgroups(tmp_path)
    limits = Limits(cpu="250m", memory="64Mi", ephemeral_storage="1Gi", ttl_s=60)
    cgroup = cgroups.create("abc", limits)
    assert cgroup == tmp_path / "session-abc"
    assert (cgroup / "cpu.max").read_text() == "25000 100000"
    assert (cgroup / "memory.max").read_text() == str(64 * 2**20)
    assert not (cgroup / "memory.swap.max").exists()  # no swap accounting here
    assert not cgroups.oom_killed(cgroup)
    (cgroup / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cgroups.oom_killed(cgroup)
    assert read_oom_kills("oom 0\noom_kill 0\n") == 0


def test_this_host_is_reported_without_ceilings_when_not_delegated() -> None:
    found = find_delegated_cgroup(Path("/proc/self/cgroup").read_text(), euid=os.geteuid())
    if found.cgroup is not None:
        pytest.skip("this host delegates a cgroup to the tests")
    assert found.reason


# A delegated, empty cgroup v2 directory for the daemon under test (e.g. made
# with `systemd-run --scope -p Delegate=yes`); without it the test is skipped.
TEST_CGROUP = os.environ.get("RUNNERD_TEST_CGROUP")


@pytest.mark.skipif(
    TEST_CGROUP is None,
    reason="no delegated cgroup v2 subtree on this host (cgroup v1/hybrid here); set"
    " RUNNERD_TEST_CGROUP to a delegated, empty cgroup v2 directory to run it",
)
async def test_a_memory_ceiling_ends_the_session_with_a_clear_failure(tmp_path: Path) -> None:
    assert TEST_CGROUP is not None
    join = (
        "import os, sys; open(sys.argv[1] + '/cgroup.procs', 'w').write('0');"
        " os.execv(sys.executable, [sys.executable, '-m', 'runnerd', 'serve', '--config',"
        " sys.argv[2]])"
    )
    command = [sys.executable, "-c", join, TEST_CGROUP]
    overrides = {"limits": {"session": {"memory": "32Mi"}}}
    async with start_daemon(tmp_path, overrides, command=command) as daemon:
        async with daemon.client() as client:
            body = session_body("python", image="python", entry="main.py")
            body["bundle"]["files"][0]["contents"] = "x = bytearray(512 * 2**20)\n"
            session_id = (await client.post("/v1/sessions", json=body)).json()["sessionId"]
            url = f"/v1/sessions/{session_id}/events"
            with trio.fail_after(30):
                async with client.stream("GET", url, timeout=httpx.Timeout(5, read=None)) as r:
                    statuses = [f.data["status"] async for f in iter_sse(r) if f.event == "status"]
    status = statuses[-1]
    assert status == {
        "kind": "failed",
        "message": "memory limit 32Mi exceeded: the session was killed (OOM)",
    }
