"""LocalBackend start failures, app sessions and probe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from runnerd.backend import Exited, ImageSpec, StartError
from runnerd.local import LocalBackend
from runnerd.local.settings import LocalConfig, RuntimeConfig

from .conftest import runtimes
from .recording import RecordingSink, start_session
from .specs import app_spec, bundle_spec


def entries(directory: Path) -> list[Path]:
    return list(directory.iterdir()) if directory.exists() else []


async def start_failure(backend: LocalBackend, spec: object) -> StartError:
    sink = RecordingSink()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            with pytest.raises(StartError) as caught:
                await nursery.start(backend.run, spec, sink)
    assert sink.statuses == [] and sink.out == b""
    return caught.value


async def test_unknown_runtime_is_a_start_error_listing_no_runtimes(
    backend: LocalBackend, workdir: Path
) -> None:
    error = await start_failure(backend, bundle_spec("ruby", "puts 1"))
    assert error.stage == "provision"
    assert "no local runtime named 'ruby'" in error.message
    # The configured runtimes include catalog apps' images: never listed.
    assert "hello-app" not in error.message and "python" not in error.message
    assert entries(workdir) == []


async def test_missing_executable_is_a_start_error(backend: LocalBackend) -> None:
    error = await start_failure(backend, bundle_spec("missing", "x"))
    assert error.stage == "provision"
    assert "executable 'no-such-program-xyz' not found" in error.message


async def test_exec_failure_is_a_boot_error_and_leaves_no_session_dir(
    visible_dir: Path, workdir: Path
) -> None:
    # Where a session uid may reach it: the failure is the exec's, not the path's.
    garbage = visible_dir / "not-a-program"
    garbage.write_bytes(b"\x00\x01\x02\x03 not an executable format")
    garbage.chmod(0o755)
    local = LocalConfig(
        workdir=workdir,
        runtimes={"bad": RuntimeConfig(name="bad", command=(str(garbage), "{entry}"))},
    )
    error = await start_failure(LocalBackend(local), bundle_spec("bad", "x"))
    assert error.stage == "boot"
    assert "could not execute" in error.message
    assert entries(workdir) == []


async def test_unwritable_workdir_is_a_start_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    local = LocalConfig(workdir=blocker / "sessions", runtimes=runtimes())
    error = await start_failure(LocalBackend(local), bundle_spec("sh", "true"))
    assert error.stage == "provision"
    assert "cannot create the session directory" in error.message
    assert str(tmp_path) not in error.message  # no host paths to the client


async def test_colliding_bundle_paths_are_a_start_error(
    backend: LocalBackend, workdir: Path
) -> None:
    spec = bundle_spec("sh", "true", entry="a", extra_files={"a/b": "x"})
    error = await start_failure(backend, spec)
    assert error.stage == "provision"
    assert "'a/b'" in error.message
    assert entries(workdir) == []


async def test_traversal_in_bundle_is_refused_even_if_admission_missed_it(
    backend: LocalBackend, workdir: Path, tmp_path: Path
) -> None:
    spec = bundle_spec("sh", "true", extra_files={"../../escaped": "x"})
    error = await start_failure(backend, spec)
    assert "'../../escaped'" in error.message
    assert not (tmp_path / "escaped").exists()
    assert entries(workdir) == []


async def test_app_session_runs_its_runtime_without_a_bundle(
    backend: LocalBackend, workdir: Path
) -> None:
    sink = RecordingSink()
    spec = app_spec("hello", "hello-app")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(7)
    assert f"app-ran in {workdir / spec.session_id / 'work'}".encode() in sink.out
    assert not (workdir / spec.session_id).exists()


async def test_app_on_a_runtime_that_needs_an_entry_is_a_start_error(
    backend: LocalBackend,
) -> None:
    error = await start_failure(backend, app_spec("scripted", "sh"))
    assert error.stage == "provision"
    assert "runtime 'sh' runs a bundle entry" in error.message


async def test_probe_ready_when_runtime_and_executable_exist(backend: LocalBackend) -> None:
    assert await backend.probe(ImageSpec("sh", "missing")) == {"status": "ready"}
    assert await backend.probe(ImageSpec("python", "always")) == {"status": "ready"}


async def test_probe_unavailable_for_unknown_runtime_says_how_to_fix(
    backend: LocalBackend,
) -> None:
    report = await backend.probe(ImageSpec("node", "missing"))
    assert report["status"] == "unavailable"
    assert "no local runtime named 'node'" in report["message"]
    assert "[local.runtimes.node]" in report.get("remediation", "")


async def test_probe_unavailable_when_executable_is_missing(backend: LocalBackend) -> None:
    report = await backend.probe(ImageSpec("missing", "missing"))
    assert report["status"] == "unavailable"
    assert "install 'no-such-program-xyz'" in report.get("remediation", "")


async def test_env_value_with_nul_is_a_start_error_naming_only_the_key(
    backend: LocalBackend, workdir: Path
) -> None:
    error = await start_failure(backend, bundle_spec("sh", "true", env={"TOKEN": "a\0secret"}))
    assert error.stage == "provision"
    assert error.message == "env TOKEN contains a NUL character"
    assert entries(workdir) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a non-root daemon's sessions keep its uid")
async def test_an_init_interpreter_out_of_the_session_uids_reach_is_named(
    tmp_path: Path, workdir: Path
) -> None:
    # Issue 17 item 7: the start failed with "could not execute '/bin/sh'"
    # when what the session could not run was the init's interpreter. One
    # in the host's /tmp is out of reach (a session's /tmp is its own);
    # `open_backend` would refuse it, and a session started anyway says so.
    python = tmp_path / "python3"
    python.symlink_to("/usr/bin/python3")
    local = LocalConfig(workdir=workdir, runtimes=runtimes(), init_python=str(python))
    backend = LocalBackend(local)
    assert backend.init_problem is not None and str(python) in backend.init_problem
    error = await start_failure(backend, bundle_spec("sh", "true"))
    assert error.stage == "boot"
    uid = LocalConfig.session_uid_base
    assert error.message == (
        f"could not execute '{python}' (the session init's interpreter, as uid {uid}):"
        " No such file or directory"
    )
    assert entries(workdir) == []
