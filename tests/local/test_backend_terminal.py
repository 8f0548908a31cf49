"""The workload's terminal: a real controlling tty, its size, and SIGWINCH."""

from __future__ import annotations

import trio

from runnerd.backend import Exited
from runnerd.local import LocalBackend

from .recording import RecordingSink, start_session
from .specs import bundle_spec


async def test_terminal_is_controlling_tty_of_a_new_session(backend: LocalBackend) -> None:
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        """
        import os, subprocess
        print("isatty", [os.isatty(fd) for fd in (0, 1, 2)])
        print("ttyname", os.ttyname(0))
        # /dev/tty opens only for a process that has a controlling terminal.
        os.close(os.open("/dev/tty", os.O_RDWR))
        print("leader", os.getsid(0) == os.getpid() == os.getpgrp())
        print("foreground", os.tcgetpgrp(0) == os.getpgrp())
        print("tty-cmd", subprocess.run(["tty"], capture_output=True, text=True).stdout.strip())
        """,
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(0)
    text = sink.out.decode()
    assert "isatty [True, True, True]" in text
    ttyname = text.split("ttyname ", 1)[1].split("\r\n", 1)[0]
    assert ttyname.startswith("/dev/pts/")
    assert "leader True" in text
    assert "foreground True" in text
    assert f"tty-cmd {ttyname}" in text


async def test_resize_reaches_program_as_sigwinch(backend: LocalBackend) -> None:
    sink = RecordingSink()
    spec = bundle_spec(
        "python",
        """
        import os, signal, sys
        def on_winch(signum, frame):
            size = os.get_terminal_size(0)
            print(f"winch {size.columns}x{size.lines}", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGWINCH, on_winch)
        size = os.get_terminal_size(0)
        print(f"start {size.columns}x{size.lines}", flush=True)
        while True:
            signal.pause()
        """,
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            await sink.wait_output(b"start 80x24")
            session.handle.resize(132, 43)
            assert await session.result() == Exited(0)
    assert b"winch 132x43" in sink.out


async def test_stty_sees_resized_terminal(backend: LocalBackend) -> None:
    sink = RecordingSink()
    spec = bundle_spec("sh", "read line\nstty size\n")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            session.handle.resize(100, 30)
            session.handle.write(b"go\n")
            assert await session.result() == Exited(0)
    assert b"30 100\r\n" in sink.out


async def test_handle_is_noop_after_exit(backend: LocalBackend) -> None:
    sink = RecordingSink()
    spec = bundle_spec("sh", "exit 0\n")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            session = await start_session(nursery, backend, spec, sink)
            assert await session.result() == Exited(0)
    session.handle.write(b"too late\n")
    session.handle.resize(10, 10)
