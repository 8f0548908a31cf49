"""The init of a session's PID namespace. Run as a script, stdlib only:

    python -I -S nsinit.py STATUS_FD [--nest] [--proc] [--sockets FD] -- /abs/program arg...

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

With `--proc` the init first mounts a /proc of the namespace's own (the
daemon made the mount namespace private: see `mounts.apply_view`), so
the workload sees neither the daemon's processes nor other sessions', and
makes its /proc/sys and /proc/sysrq-trigger read-only (the host's kernel
settings: a root workload could otherwise write core_pattern). The
workload then gets no capability back: the ambient set (which carried
CAP_SYS_ADMIN of a user namespace to this mount) is cleared, and a root
workload loses the capabilities that would undo the mounts (umount, a
host /proc, open_by_handle_at, raw devices, ptrace).

With `--sockets FD` (the session has a network namespace of its own:
`runnerd.local.network`), FD is a UNIX stream socket to the daemon, and the
outer, which is in the new network namespace, is the daemon's way into it:

- before forking PID 1 it waits for one byte `g` ("go": the daemon has
  attached the namespace's outbound network, so the workload starts with
  it); EOF instead ends the outer (exit 1) before anything ran;
- then, for every byte `s` it reads, it sends back one byte with a fresh,
  unconnected TCP socket (AF_INET, SCM_RIGHTS) created in the namespace: a
  socket's network namespace is fixed at its creation, so the daemon connects
  it to the workload's 127.0.0.1 without entering the namespace. A socket
  that cannot be made (EMFILE) is answered `e` with no fd. EOF ends the
  serving, not the outer.

With `--nest` (an app of a watch session, `runnerd.local.sandbox`), the
daemon's child has joined the namespaces of the session's holder instead of
making its own (`joined.preexec_joined`: its children are born in the
session's PID namespace). It forks one more process, which unshares a PID
namespace nested in the session's (with the CAP_SYS_ADMIN the daemon made
ambient) and goes on as the outer above: the app's init is PID 1 of its
own namespace inside the session's, so a stop takes down exactly this app
(whatever detached in it) and nothing of the others, and the end of the
session's init takes every app down. With `--proc` too, that process also
unshares a mount namespace (a copy of the session's: the same workspace,
/tmp and covers) and takes the session's read-only binds off its /proc,
so that the init can mount the app's own /proc over it: what the app
reads there agrees with its getpid(). That process dies with the daemon's
child (a parent-death signal), which dies with the daemon.

`nsinit.c` is the same init compiled (and it also sets up the session's
containment itself: `nssetup.c`); `make` builds it, and the daemon runs it
wherever it is built (`runnerd.local.initpython`). This one runs where it
is not, when `local.init_python` is set, and for a watch session's apps
(`--nest`). The interpreter runs isolated (`-I -S`: no site, no PYTHON*
variables from the session env).

The daemon may pass this script as an open file (`python -I -S
/proc/self/fd/N`: its own path may be unreadable by a session's uid); that
fd is closed first thing, so the workload never inherits it.

STATUS_FD reports the workload's exec to the daemon: it is closed on a
successful exec (the daemon reads EOF) and carries the errno as decimal
text when exec fails (the workload then exits 127).
"""

import ctypes
import fcntl
import os
import select
import signal
import socket
import sys
import termios

FORWARDED = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
    signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
)  # fmt: skip
BLOCKED = (*FORWARDED, signal.SIGCHLD)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND = 32, 4096
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
CLONE_NEWNS, CLONE_NEWPID, MNT_DETACH = 0x00020000, 0x20000000, 2
# A root workload (only where the kernel refused a session uid) loses
# CAP_DAC_READ_SEARCH, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE,
# CAP_SYS_ADMIN, CAP_MKNOD (what could undo its mounts), and CAP_NET_ADMIN,
# CAP_NET_RAW, CAP_SYS_BOOT, CAP_SYS_TIME (the host's network and clock).
UNDO_MOUNTS = (2, 16, 17, 19, 21, 27, 12, 13, 22, 25)
READ_ONLY = (b"/proc/sys", b"/proc/sysrq-trigger")
libc = ctypes.CDLL(None, use_errno=True)


def mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int) -> None:
    if libc.mount(source, target, fstype, ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def mount_proc() -> None:
    """This namespace's own /proc over the host's, its kernel settings
    read-only. Raises OSError."""
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    mount(b"proc", b"/proc", b"proc", flags)
    for path in READ_ONLY:
        if os.path.exists(path):
            mount(path, path, None, MS_BIND)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]


def drop_capabilities() -> None:
    """Before the workload's exec: no ambient or inheritable capabilities
    (a file capability could otherwise bring CAP_SYS_ADMIN back), and as
    root none that undo the mounts (the bounding set limits what exec
    grants). Raises OSError."""
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[0].inheritable = data[1].inheritable = 0
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if os.geteuid() == 0:
        for cap in UNDO_MOUNTS:
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails only without CAP_SETPCAP


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the code, or 128+N for signal N."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass  # already gone (or nothing left to signal)


def exec_workload(argv: list[str], status_fd: int, drop_caps: bool) -> None:
    """In the workload's process: take the terminal, reset signals, exec."""
    try:
        if drop_caps:
            drop_capabilities()
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


def run_init(
    argv: list[str], status_fd: int, outer_alive: int, own_proc: bool, drop_caps: bool
) -> None:
    """PID 1 of the namespace. Never returns."""
    if own_proc:
        try:
            mount_proc()
        except OSError as exc:
            os.write(status_fd, str(exc.errno or 0).encode())
            os._exit(127)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    workload = os.fork()
    if workload == 0:
        exec_workload(argv, status_fd, drop_caps)
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
        if outer_alive in wait_readable(outer_alive, wake_r):
            os._exit(128 + signal.SIGKILL)  # the outer, so the daemon, is gone
        try:
            while os.read(wake_r, 256):
                pass
        except BlockingIOError:
            pass


def serve_sockets(sock: socket.socket) -> bool:
    """Answer one request on the daemon's socket; False once it is closed."""
    try:
        request = sock.recv(1)
    except OSError:
        return False
    if not request:
        return False
    try:
        made = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        socket.send_fds(sock, [b"e"], [])
        return True
    try:
        socket.send_fds(sock, [b"s"], [made.fileno()])
    except OSError:
        return False
    finally:
        made.close()
    return True


def wait_readable(*fds: int) -> set[int]:
    """Block until one of `fds` is readable or hung up; return those that are.
    poll, not select: a daemon with hundreds of sessions hands over fds
    numbered past select()'s FD_SETSIZE (1024), which select refuses."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return {fd for fd, _ in poller.poll()}


def wait_serving(init: int, sock: socket.socket | None) -> int:
    """Wait for PID 1's exit, serving the daemon's socket requests meanwhile."""
    pidfd = os.pidfd_open(init)
    while sock is not None:
        if pidfd in wait_readable(pidfd, sock.fileno()):
            break
        if not serve_sockets(sock):
            sock.close()
            sock = None
    return os.waitpid(init, 0)[1]


def nest(status_fd: int, own_proc: bool) -> None:
    """`--nest`: fork the process that unshares the app's nested PID (and,
    with `own_proc`, mount) namespace and returns to go on as its outer;
    this one forwards the daemon's signals to it and exits with its status.
    Never returns here."""
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
    child = os.fork()
    if child == 0:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The outer is outside the session's PID namespace: its pid reads as
        # 0 here; anything else is the session's init, which took us in.
        if os.getppid() != 0:
            os._exit(1)  # the outer died before the signal was armed
        if libc.unshare(CLONE_NEWPID | (CLONE_NEWNS if own_proc else 0)) != 0:
            os.write(status_fd, str(ctypes.get_errno() or 0).encode())
            os._exit(127)
        if own_proc:
            # The kernel mounts a new /proc only over one fully visible.
            for path in READ_ONLY:
                libc.umount2(path, MNT_DETACH)  # EINVAL: not mounted there
        signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
        return
    os.close(status_fd)
    for sig in FORWARDED:
        signal.signal(sig, lambda s, f: send(child, s))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
    os._exit(exit_code(os.waitpid(child, 0)[1]))


def main() -> None:
    if sys.argv[0].startswith("/proc/self/fd/"):
        os.close(int(sys.argv[0].rpartition("/")[2]))  # this script, passed open
    status_fd = int(sys.argv[1])
    split = sys.argv.index("--")
    own_proc = "--proc" in sys.argv[2:split]
    nested = "--nest" in sys.argv[2:split]
    argv = sys.argv[split + 1 :]
    if nested:
        nest(status_fd, own_proc)
    sock: socket.socket | None = None
    if "--sockets" in sys.argv[2:split]:
        fd = int(sys.argv[sys.argv.index("--sockets") + 1])
        os.set_inheritable(fd, False)  # the workload never gets it
        sock = socket.socket(fileno=fd)
        if sock.recv(1) != b"g":
            os._exit(1)  # the daemon gave up on this session before it ran
    # Blocked across the fork: a signal then waits for the right handler.
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
    alive_r, alive_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(alive_w)
        if sock is not None:
            sock.close()
        run_init(argv, status_fd, alive_r, own_proc, own_proc or nested)
    os.close(alive_r)
    os.close(status_fd)
    for sig in FORWARDED:
        signal.signal(sig, lambda s, f: send(init, s))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
    os._exit(exit_code(wait_serving(init, sock)))


if __name__ == "__main__":
    main()
