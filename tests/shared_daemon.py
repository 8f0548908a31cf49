"""One real runnerd for a whole test module: the `runnerd` fixture here.

For checks that need a real daemon but not a fresh one: requests a daemon
answers without keeping state (health, capabilities, probe, the OpenAPI
document, unknown routes), and refusals (a rejected request changes no
state, so the next test sees the same daemon). A test that counts sessions,
reloads or signals the daemon keeps its own (`tests.harness.start_daemon`).

pytest-trio runs each test in its own `trio.run`, so a fixture that outlives
one test cannot be async: this one starts `python -m runnerd serve` with
`subprocess`, waits for its `READY=1` on a blocking datagram socket, and at
the module's end sends SIGTERM and asserts exit 0, as `start_daemon` does.
Its stderr goes to a file, so `stderr_text()` reads what it logged so far.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    DaemonClient,
    DaemonExited,
    _merge,
    _short_base,
    build_config,
    daemon_env,
    dump_toml,
)


class SharedDaemon(DaemonClient):
    """The parts of `tests.harness.Daemon` a shared daemon can offer."""

    def __init__(self, base: Path, socket_path: Path, stderr_path: Path) -> None:
        self.base = base
        self.socket_path = socket_path
        self.workdir = base / "sessions"
        self._stderr_path = stderr_path
        self.backend = "local"

    def stderr_text(self) -> str:
        return self._stderr_path.read_text(errors="replace")


def _wait_ready(proc: subprocess.Popen[bytes], notify: socket.socket, stderr: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    notify.settimeout(0.05)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DaemonExited(proc.returncode, stderr.read_text(errors="replace"))
        with contextlib.suppress(TimeoutError):
            if "READY=1" in notify.recv(4096).decode().split("\n"):
                return
    raise TimeoutError(f"runnerd not ready within {READY_TIMEOUT_S} s")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.terminate()
    try:
        return proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


@contextlib.contextmanager
def shared_daemon(base: Path, overrides: Mapping[str, Any] | None = None) -> Iterator[SharedDaemon]:
    """Run runnerd on the harness's config (with `overrides`) in `base`."""
    sock_dir, remove_sock_dir = _short_base(base)
    socket_path = sock_dir / "runnerd.sock"
    (base / "sessions").mkdir(exist_ok=True)
    config_path = base / "runnerd.toml"
    config_path.write_text(dump_toml(build_config(base, socket_path, overrides)))
    stderr_path = base / "runnerd.stderr"
    argv = [sys.executable, "-m", "runnerd", "serve", "--config", str(config_path)]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
            notify.bind(str(sock_dir / "notify.sock"))
            with stderr_path.open("wb") as stderr:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    env=daemon_env(sock_dir / "notify.sock"),
                    cwd=str(base),
                )
            try:
                _wait_ready(proc, notify, stderr_path)
                yield SharedDaemon(base, socket_path, stderr_path)
            finally:
                code = _stop(proc)
        assert code == 0, f"runnerd exited {code}; stderr:\n{stderr_path.read_text()}"
    finally:
        if remove_sock_dir:
            shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.fixture(scope="module", name="runnerd")
def shared_runnerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    """`runnerd`, one per module: import it into a test module (or a
    conftest) whose tests share a daemon."""
    with shared_daemon(tmp_path_factory.mktemp("runnerd")) as daemon:
        yield daemon


# -- the same daemon on the Kubernetes backend ---------------------------------

KUBESIM_READY_S = 20.0
BACKENDS = ("local", "kubernetes")


@contextlib.contextmanager
def standalone_kubesim(base: Path) -> Iterator[Path]:
    """The test cluster as a subprocess (`python -m tests.kubesim`) for a
    module's life; yields its kubeconfig (TLS and its token). Its images are
    the defaults plus those written to `images_file(kubeconfig)`."""
    kubeconfig = base / "kubesim.kubeconfig"
    argv = [
        sys.executable,
        "-m",
        "tests.kubesim",
        "--listen",
        "127.0.0.1:0",
        "--kubeconfig-out",
        str(kubeconfig),
        "--images-file",
        str(images_file(kubeconfig)),
    ]
    with (base / "kubesim.stderr").open("wb") as stderr:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL
        )
    try:
        assert proc.stdout is not None
        # It prints its URL once listening with the kubeconfig written.
        ready = _readline_within(proc.stdout, KUBESIM_READY_S)
        assert ready.startswith("https://"), (base / "kubesim.stderr").read_text()
        yield kubeconfig
    finally:
        _stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def images_file(kubeconfig: Path) -> Path:
    """The standalone cluster's extra images (`tests.kubesim.images.FileImages`)."""
    return kubeconfig.with_name("images.json")


def _readline_within(stream: Any, timeout_s: float) -> str:
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise TimeoutError(f"no line within {timeout_s} s")
    return str(stream.readline().decode())


def kube_overrides(base: Path, kubeconfig: Path) -> dict[str, Any]:
    """The harness config on the kubernetes backend, whose `sh` and `python`
    images run bundles as the local runtimes of those names do.

    Each daemon gets its own `managed_by`: several daemons share a module's
    cluster (the module's `runnerd` beside a test's own), and a daemon reaps
    every managed pod it did not create when it starts."""
    with socket.socket() as sock:  # self_url must name the port: not 0
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return {
        "runner": {
            "backend": "kubernetes",
            "default_image": "sh",
            "allowed_images": ["sh", "python"],
        },
        "local": None,
        "kubernetes": {
            "kubeconfig": str(kubeconfig),
            "self_url": f"http://127.0.0.1:{port}",
            "bundle_listen": f"tcp:127.0.0.1:{port}",
            "managed_by": f"runnerd-test-{port}",
        },
    }


class OnBackend:
    """One backend for a module's tests: its name, and `overrides(extra)`,
    the config a test's own daemon (`start_daemon`) needs to run on it."""

    def __init__(self, name: str, kubeconfig: Path | None = None) -> None:
        self.name = name
        self._kubeconfig = kubeconfig

    def overrides(
        self, extra: Mapping[str, Any] | None = None, kube: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """`extra` on this backend; on kubernetes `kube` is merged last (what
        the test needs said differently there, e.g. its catalog's images)."""
        if self._kubeconfig is None:
            return _merge({}, extra or {})
        self._add_images((extra or {}).get("local", {}).get("runtimes", {}))
        base = kube_overrides(self._kubeconfig.parent, self._kubeconfig)
        return _merge(
            _merge(base, {k: v for k, v in (extra or {}).items() if k != "local"}), kube or {}
        )

    def _add_images(self, runtimes: Mapping[str, Any]) -> None:
        """A local runtime `NAME` (a catalog app's image) becomes the cluster's
        image `NAME`, whose entrypoint is the runtime's command."""
        assert self._kubeconfig is not None
        path = images_file(self._kubeconfig)
        images = json.loads(path.read_text()) if path.exists() else {}
        images.update({name: list(rt["command"]) for name, rt in runtimes.items()})
        staged = path.with_suffix(".tmp")  # the cluster may read it at any moment
        staged.write_text(json.dumps(images))
        staged.replace(path)


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test cluster of every module on the kubernetes backend (its
    kubeconfig), one per worker: started once (~0.5 CPU s each), not once per
    module. The modules cannot see each other through it: each daemon has
    its own `managed_by` (`kube_overrides`) and deletes its pods when it
    stops, and an image a module adds (`OnBackend.overrides`) is written
    before that module's daemons start."""
    with standalone_kubesim(tmp_path_factory.mktemp("kubesim")) as kubeconfig:
        yield kubeconfig


@pytest.fixture(scope="module", name="on_backend", params=BACKENDS)
def on_each_backend(request: pytest.FixtureRequest) -> OnBackend:
    """Each backend in turn for a module (on kubernetes, the worker's test
    cluster, `standalone_cluster`): a module whose tests start their own
    daemons runs each of them on both with `on_backend.overrides(...)`."""
    if request.param == "local":
        return OnBackend("local")
    return OnBackend("kubernetes", request.getfixturevalue("standalone_cluster"))


@pytest.fixture(scope="module", name="runnerd")
def shared_runnerd_on_each_backend(
    on_backend: OnBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharedDaemon]:
    """`runnerd` once per backend: a module that imports this (and
    `on_each_backend`) as its `runnerd` runs each of its tests on both (the
    same `/v1` promises)."""
    base = tmp_path_factory.mktemp(f"runnerd-{on_backend.name}")
    with shared_daemon(base, on_backend.overrides()) as daemon:
        daemon.backend = on_backend.name
        yield daemon
