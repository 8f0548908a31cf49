"""The compiled init (`runnerd/local/nsinit.c`) against what an outside
review found, through the real daemon: the client's env never reaches the
loader of the init the daemon execs as root (it reaches the workload,
unchanged), and the init keeps no capability the Python init drops."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from runnerd.local.containment import Containment, probe_containment
from runnerd.local.initpython import NSINIT_BIN, SYSTEM_PYTHON
from tests.harness import Daemon, read_pty_until, session_body, start_daemon

needs_binary = pytest.mark.skipif(
    not os.access(NSINIT_BIN, os.X_OK), reason=f"{NSINIT_BIN} is not built (make builds it)"
)


def _has_pid_namespace() -> bool:
    root = os.geteuid() == 0
    plan = probe_containment(allow_namespaces=True, session_uid=0x70000000 if root else None)
    return plan.containment is Containment.PID_NAMESPACE


pytestmark = [
    needs_binary,
    pytest.mark.skipif(not _has_pid_namespace(), reason="no PID namespace: no init runs"),
]

_EVIL_C = """
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
    int fd = open("%s", O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (fd >= 0) { (void)!write(fd, "ran\\n", 4); close(fd); }
}
"""


def _evil_library(tmp_path: Path, marker: Path) -> Path:
    """A shared library whose constructor appends to `marker`."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the library")
    source = tmp_path / "evil.c"
    source.write_text(_EVIL_C % marker)
    library = tmp_path / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", library, source], check=True)
    library.chmod(0o755)
    return library


async def test_the_clients_loader_env_never_reaches_the_init_but_the_workload_has_it(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "elsewhere"  # as another session's files are
    elsewhere.mkdir()
    marker = elsewhere / "constructor-ran"
    library = _evil_library(elsewhere, marker)
    env = {"LD_PRELOAD": str(library), "LD_AUDIT": str(library)}
    env["LD_LIBRARY_PATH"] = str(elsewhere)
    async with start_daemon(tmp_path) as daemon:
        with trio.fail_after(60):
            out = await _run_env(daemon, env)
    # Outside the sandbox (the host's /tmp, as root): never loaded there.
    assert not marker.exists(), marker.read_text()
    for name, value in env.items():
        assert f"{name}={value}".encode() in out, out


async def _run_env(daemon: Daemon, env: dict[str, str]) -> bytes:
    """What a session with `env` prints running `env`."""
    async with daemon.client() as client:
        body = session_body("env; echo env-done\n", env=env)
        response = await client.post("/v1/sessions", json=body)
        assert response.status_code == 201, response.text
    session = response.json()["sessionId"]
    return await read_pty_until(daemon.socket_path, session, rb"env-done", timeout_s=30)


_CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapAmb", "CapBnd")


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _status(int(entry.name)).get("PPid") == str(pid):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def _init_capabilities(tmp_path: Path, overrides: dict[str, Any]) -> list[dict[str, str]]:
    """The capability sets of a running session's outer init and PID 1."""
    os.mkdir(tmp_path)
    async with start_daemon(tmp_path, overrides) as daemon:
        async with daemon.client() as client:
            body = session_body("echo ready; exec sleep 300\n")
            response = await client.post("/v1/sessions", json=body)
            assert response.status_code == 201, response.text
        session = response.json()["sessionId"]
        await read_pty_until(daemon.socket_path, session, rb"ready", timeout_s=30)
        outer = [p for p in _children(daemon.proc.pid) if _status(p)["Name"] != "slirp4netns"]
        outer = [p for p in outer if _children(p)]  # not a warm sandbox, still waiting
        assert len(outer) == 1, outer
        (pid1,) = _children(outer[0])
        inits = [_status(pid) for pid in (outer[0], pid1)]
    return [{name: status[name] for name in _CAP_SETS} for status in inits]


@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"no {SYSTEM_PYTHON}")
async def test_the_compiled_inits_keep_the_capabilities_the_python_inits_keep(
    tmp_path: Path,
) -> None:
    with trio.fail_after(90):
        compiled = await _init_capabilities(tmp_path / "c", {})
        python = await _init_capabilities(tmp_path / "p", {"local": {"init_python": SYSTEM_PYTHON}})
    assert compiled == python
    for sets in compiled:  # at most CAP_SYS_ADMIN (of the session's user namespace)
        assert all(int(sets[name], 16) & ~(1 << 21) == 0 for name in _CAP_SETS), sets
