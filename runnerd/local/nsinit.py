"""The init of a session's PID namespace. Run as a script, stdlib only:

    python -I -S nsinit.py STATUS_FD -- /abs/program arg...

The daemon forks this process after `unshare(CLONE_NEWPID)` (see
`runnerd.local.containment`), so it stands *outside* the new namespace and
its first child is the namespace's PID 1. Three processes per session:

- this one (the "outer"): the daemon's child, in a session of its own.
  It forwards the daemon's signals to PID 1 and exits with PID 1's status;
  its parent-death signal (set before exec) ends it with the daemon.
- PID 1 (the "init"): forks the workload, reaps every orphan in the
  namespace, forwards SIGTERM to *every* process in the namespace (a stop
  reaches what detached too) and other signals to the workload's process
  group, and exits with the workload's status (signal N → 128+N). When it
  exits, the kernel kills whatever is left in the namespace. It also exits
  when the outer is gone (the pipe from the outer reads EOF), which is how a
  SIGKILLed daemon takes the namespace down.
- the workload: a session of its own with the PTY as its controlling
  terminal (so Ctrl-C, SIGWINCH and a hangup reach it, not the inits; the
  daemon leaves the terminal untaken in this mode), default signal
  dispositions and an empty mask, then exec.

Why Python and not a C init: nothing to build on install. The interpreter
runs isolated (`-I -S`: no site, no PYTHON* variables from the session env).

STATUS_FD reports the workload's exec to the daemon: it is closed on a
successful exec (the daemon reads EOF) and carries the errno as decimal
text when exec fails (the workload then exits 127).
"""

import fcntl
import os
import select
import signal
import sys
import termios

FORWARDED = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
    signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
)  # fmt: skip
BLOCKED = (*FORWARDED, signal.SIGCHLD)


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the code, or 128+N for signal N."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass  # already gone (or nothing left to signal)


def exec_workload(argv: list[str], status_fd: int) -> None:
    """In the workload's process: take the terminal, reset signals, exec."""
    try:
        # A session of its own whose controlling terminal is the PTY, as
        # without a namespace: the inits' session never took the terminal.
        os.setsid()
        try:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        except OSError:
            pass  # stdin is not a terminal
        for sig in signal.valid_signals():
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass  # SIGKILL, SIGSTOP and the realtime ones Python refuses
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.set_inheritable(status_fd, False)
        os.execv(argv[0], argv)
    except OSError as exc:
        os.write(status_fd, str(exc.errno or 0).encode())
    os._exit(127)


def reap(workload: int) -> int | None:
    """Reap every exited child; the workload's exit code once it is reaped."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return None
        if pid == 0:
            return None
        if pid == workload:
            return exit_code(status)


def run_init(argv: list[str], status_fd: int, outer_alive: int) -> None:
    """PID 1 of the namespace. Never returns."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    workload = os.fork()
    if workload == 0:
        exec_workload(argv, status_fd)
    os.close(status_fd)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda s, f: None)
    signal.signal(signal.SIGTERM, lambda s, f: send(-1, s))  # all but PID 1 itself
    for sig in FORWARDED[1:]:
        signal.signal(sig, lambda s, f: send(-workload, s))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
    while True:
        code = reap(workload)
        if code is not None:
            os._exit(code)  # the kernel now kills the rest of the namespace
        ready, _, _ = select.select([outer_alive, wake_r], [], [])
        if outer_alive in ready:
            os._exit(128 + signal.SIGKILL)  # the outer, so the daemon, is gone
        try:
            while os.read(wake_r, 256):
                pass
        except BlockingIOError:
            pass


def main() -> None:
    status_fd = int(sys.argv[1])
    argv = sys.argv[3:]
    # Blocked across the fork: a signal then waits for the right handler.
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
    alive_r, alive_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(alive_w)
        run_init(argv, status_fd, alive_r)
    os.close(alive_r)
    os.close(status_fd)
    for sig in FORWARDED:
        signal.signal(sig, lambda s, f: send(init, s))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
    _, status = os.waitpid(init, 0)
    os._exit(exit_code(status))


if __name__ == "__main__":
    main()
