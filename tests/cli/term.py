"""A real pseudo-terminal for driving the CLI as a user at a keyboard (pexpect).

pexpect blocks, so every wait runs in a worker thread: the trio loop (and
the harness draining the daemon's stderr) keeps running meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pexpect
import trio

from tests.cli.helpers import RUNNERD, cli_env
from tests.harness import Daemon


class Terminal:
    def __init__(self, child: pexpect.spawn) -> None:
        self.child = child

    @classmethod
    def spawn(
        cls,
        daemon: Daemon,
        argv: Sequence[str],
        *,
        rows: int = 24,
        cols: int = 80,
        env: Mapping[str, str] | None = None,
    ) -> Terminal:
        """`argv` in a new pty of `rows` x `cols` (argv[0] `runnerd` means our CLI),
        with `env` added to the CLI's environment."""
        full = [*RUNNERD, *argv[1:]] if argv[0] == "runnerd" else list(argv)
        child = pexpect.spawn(
            full[0], full[1:], env=cli_env(daemon, env), dimensions=(rows, cols), timeout=10
        )
        return cls(child)

    async def expect(self, pattern: str | bytes, timeout_s: float = 10.0) -> bytes:
        """Wait until the screen output matches the regex `pattern`; the text before it."""
        await trio.to_thread.run_sync(lambda: self.child.expect(pattern, timeout=timeout_s))
        before: bytes = self.child.before
        return before

    def send(self, data: str | bytes) -> None:
        self.child.send(data)

    def resize(self, rows: int, cols: int) -> None:
        self.child.setwinsize(rows, cols)

    async def exit_code(self, timeout_s: float = 10.0) -> int:
        """Wait for the end of output and the process; its exit status."""
        await trio.to_thread.run_sync(lambda: self.child.expect(pexpect.EOF, timeout=timeout_s))
        self.child.close()
        status = self.child.exitstatus
        assert status is not None, f"killed by signal {self.child.signalstatus}"
        return int(status)

    def close(self) -> None:
        if self.child.isalive():
            self.child.close(force=True)
