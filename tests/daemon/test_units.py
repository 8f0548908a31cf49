"""The systemd units: `make check-unit` fails on a broken unit, and the
three places that create /run/runnerd agree on its mode."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"

needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or shutil.which("make") is None,
    reason="systemd-analyze (apt-get install systemd) and make are needed",
)


def check_unit(unit_src: Path, rendered: Path) -> subprocess.CompletedProcess[str]:
    """`make check-unit`'s check, rendered into `rendered` (never into the
    repository) against the runnerd under test, installing nothing."""
    runnerd = shutil.which("runnerd", path=str(Path(sys.executable).parent))
    assert runnerd is not None, "runnerd is not installed next to this python"
    return subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(REPO),
            "check-unit-files",
            f"UNIT_SRC={unit_src}",
            f"UNIT_CHECK={rendered}",
            f"RUNNERD_BIN={runnerd}",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,
    )


@needs_analyze
def test_check_unit_passes_on_the_shipped_units(tmp_path: Path) -> None:
    result = check_unit(UNITS, tmp_path / "rendered")
    assert result.returncode == 0, result.stderr
    assert "Overall exposure level for runnerd.service" in result.stdout


@needs_analyze
@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (("Restart=on-failure", "Restartt=on-failure"), "Unknown key 'Restartt'"),
        (("ExecStart=/usr/bin/runnerd", "ExecStart=/opt/nowhere/runnerd"), "is not executable"),
        (("User=runnerd", "User=root"), ""),
    ],
    ids=["typo", "missing-command", "no-sandbox"],
)
def test_check_unit_fails_on_a_broken_unit(
    tmp_path: Path, broken: tuple[str, str], expected: str
) -> None:
    shutil.copytree(UNITS, tmp_path / "units")
    service = tmp_path / "units" / "runnerd.service"
    text = service.read_text()
    assert broken[0] in text
    text = text.replace(broken[0], broken[1])
    if broken[1] == "User=root":  # and no sandbox at all: exposure far above 2.0
        text = text.split("# --- Sandbox.")[0] + "[Install]" + text.split("[Install]")[1]
    service.write_text(text)
    result = check_unit(tmp_path / "units", tmp_path / "rendered")
    assert result.returncode != 0, result.stdout + result.stderr
    assert expected in result.stderr


def mode(path: Path, pattern: str) -> str:
    match = re.search(pattern, path.read_text(), re.MULTILINE)
    assert match is not None, (path, pattern)
    return match.group(1)


def test_run_directory_modes_agree() -> None:
    modes = {
        "socket DirectoryMode": mode(UNITS / "runnerd.socket", r"^DirectoryMode=(\d+)"),
        "service RuntimeDirectoryMode": mode(
            UNITS / "runnerd.service", r"^RuntimeDirectoryMode=(\d+)"
        ),
        "tmpfiles /run/runnerd": mode(UNITS / "runnerd.tmpfiles.conf", r"^d /run/runnerd\s+(\d+)"),
    }
    assert set(modes.values()) == {"0750"}, modes


def test_documentation_points_at_what_the_readme_installs() -> None:
    readme = (REPO / "README.md").read_text()
    for unit in ("runnerd.service", "runnerd.socket"):
        doc = mode(UNITS / unit, r"^Documentation=file://(\S+)")
        assert f"README.md {doc}" in readme, (unit, doc)
