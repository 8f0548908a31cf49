"""`runnerd completion bash|zsh`: what a user gets on Tab."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.cli.helpers import RUNNERD, start
from tests.harness import Daemon
from tests.shared_daemon import shared_runnerd_on_each_backend  # noqa: F401  (`runnerd`)


def complete(words: list[str], shell_script: str) -> list[str]:
    """Run bash's completion function for `runnerd WORDS` and return COMPREPLY
    (with this interpreter's `runnerd` first on PATH)."""
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f"{shell_script}\nCOMP_WORDS=(runnerd {line}); COMP_CWORD={len(words)}\n"
        '_runnerd; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path}
    env.pop("RUNNERD_SOCKET", None)
    result = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, timeout=20, env=env
    )
    assert result.returncode == 0, result.stderr
    return sorted(result.stdout.split())


@pytest.fixture(scope="module")
def bash_script() -> str:
    result = subprocess.run([*RUNNERD, "completion", "bash"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_bash_completes_verbs_and_each_verbs_options(bash_script: str) -> None:
    assert "run" in complete([""], bash_script) and "ls" in complete([""], bash_script)
    assert complete(["st"], bash_script) == ["stop"]
    assert complete(["run", "--de"], bash_script) == ["--detach"]
    assert complete(["ls", "-"], bash_script) == sorted(
        ["-a", "--all", "-q", "--quiet", "--json", "-h", "--help", "--socket", "--url"]
    )


async def test_bash_completes_session_ids_from_the_daemon_the_line_names(
    runnerd: Daemon, bash_script: str
) -> None:
    session_id = await start(runnerd, "exit 0")
    words = ["logs", "--socket", str(runnerd.socket_path), ""]
    assert await trio.to_thread.run_sync(complete, words, bash_script) == [session_id]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here")
def test_zsh_loads_the_script() -> None:
    script = subprocess.run(
        [*RUNNERD, "completion", "zsh"], capture_output=True, text=True, check=True
    ).stdout
    result = subprocess.run(
        ["zsh", "-c", f"autoload -U compinit && compinit -u\n{script}\nwhence -w _runnerd"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert "_runnerd: function" in result.stdout, result.stderr
