"""What a session sees of the host, through the real daemon: neither the
config file (catalog secrets), nor another live session's directory, nor the
API or metrics socket, nor anyone else's processes and environments; its own
bundle and HOME stay readable and writable. (Its declared ports stay
reachable: tests/e2e/test_lifecycle.py, same containment.)"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Daemon, read_pty_until, session_body, start_daemon

SECRET = "catalog-secret-5b9f"
VICTIM_ENV = "victim-env-31c7"

# The attacker: each probe prints `name=open …` or `name=refused …`; then
# every environment it can read under /proc, its own files, and `done`.
ATTACKER = """\
import ctypes, os, socket, sys

def probe(name, fn):
    try:
        print(f"{name}=open {fn()!r}")
    except OSError as exc:
        print(f"{name}=refused {exc.strerror}")

def connect(path):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(b"GET /v1/health HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n")
        return s.recv(200)

probe("config", lambda: open(os.environ["CONFIG"]).read())
probe("config-dir", lambda: os.listdir(os.path.dirname(os.environ["CONFIG"])))
probe("workdir", lambda: os.listdir(os.path.dirname(os.environ["VICTIM"])))
probe("victim-dir", lambda: os.listdir(os.environ["VICTIM"]))
probe("victim-file", lambda: open(os.environ["VICTIM"] + "/work/note").read())
probe("api-socket", lambda: connect(os.environ["SOCK"]))
probe("metrics-socket", lambda: connect(os.environ["METRICS"]))
libc = ctypes.CDLL(None, use_errno=True)
code = libc.umount2(os.path.dirname(os.environ["CONFIG"]).encode(), 0)
print(f"umount={code} {os.strerror(ctypes.get_errno())}")
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("pids=" + ",".join(map(str, pids)))
for pid in pids:
    probe(f"environ-{pid}", lambda: open(f"/proc/{pid}/environ", "rb").read())
with open(os.path.join(os.environ["HOME"], "mine"), "w") as f:
    f.write("mine-ok")
print("home=" + open(os.path.join(os.environ["HOME"], "mine")).read())
print("bundle=" + ",".join(os.listdir(os.path.join(os.environ["HOME"], "..", "app"))))
print("done")
sys.stdin.readline()
"""


@pytest.fixture
def metrics_dir() -> Iterator[Path]:
    # Short: a unix socket path must fit in 108 bytes; tmp_path may not.
    path = Path(tempfile.mkdtemp(prefix="rnd-m-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def start(daemon: Daemon, body: dict[str, Any], ready: bytes, app: str = "") -> str:
    async with daemon.client() as client:
        url = f"/v1/apps/{app}/sessions" if app else "/v1/sessions"
        response = await client.post(url, json=body)
        assert response.status_code == 201, response.text
    session_id: str = response.json()["sessionId"]
    await read_pty_until(daemon.socket_path, session_id, ready)
    return session_id


async def test_a_session_sees_nothing_of_the_daemon_or_other_sessions(
    tmp_path: Path, metrics_dir: Path
) -> None:
    metrics_sock = metrics_dir / "metrics.sock"
    overrides = {
        "local": {"runtimes": {"greet": {"command": ["/bin/sh", "-c", "echo app-up; exec cat"]}}},
        "apps": {"greeter": {"image": "greet", "env": {"TOKEN": SECRET}}},
        "metrics": {"listen": [f"unix:{metrics_sock}"]},
    }
    async with start_daemon(tmp_path, overrides) as daemon:
        # The config file holds the secret; an app session's environment too.
        assert SECRET in daemon.config_path.read_text()
        await start(daemon, {"env": {}}, rb"app-up", app="greeter")
        victim_script = "echo victim-note > note; echo victim-up; exec sleep 1000"
        victim = await start(
            daemon, session_body(victim_script, env={"V": VICTIM_ENV}), rb"victim-up"
        )
        env = {
            "CONFIG": str(daemon.config_path),
            "VICTIM": str(daemon.workdir / victim),
            "SOCK": str(daemon.socket_path),
            "METRICS": str(metrics_sock),
        }
        body = session_body(ATTACKER, image="python", entry="main.py", env=env)
        attacker = await start(daemon, body, rb"done\r?\n")
        output = await read_pty_until(daemon.socket_path, attacker, rb"done\r?\n")
    lines = output.decode().splitlines()
    for name in ("config", "victim-dir", "victim-file"):
        assert f"{name}=refused No such file or directory" in lines, output
    # The harness keeps the workdir inside the config's directory: of both,
    # only the way down to the session's own directory is left.
    assert "config-dir=open ['sessions']" in lines, output
    assert f"workdir=open [{attacker!r}]" in lines, output
    for name in ("api-socket", "metrics-socket"):
        assert any(line.startswith(f"{name}=refused") for line in lines), output
    # Not even as root (this test's daemon may be) can it undo the cover.
    assert "umount=-1 Operation not permitted" in lines, output
    # Its own namespace only: its init and itself.
    assert "pids=1,2" in lines, output
    assert SECRET not in output.decode() and VICTIM_ENV not in output.decode()
    assert "home=mine-ok" in lines and "bundle=main.py" in lines, output
