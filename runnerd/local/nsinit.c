/* The init of a session's PID namespace, compiled: `nsinit.py` in C.
 *
 *     nsinit STATUS_FD [--proc] [--sockets FD] [--env FD] [SETUP] -- /abs/program arg...
 *     nsinit STATUS_FD --proc --sockets FD --warm SETUP --
 *     nsinit --check                (prints NSINIT_PROTOCOL: the start-up probe)
 *
 * SETUP (`--setup PARENT FLAGS [--identity UID GID] [--cgroup DIR]
 * [--keep DIR] [--cover PATH]...`): the init sets up the session's
 * containment itself, first thing (`nssetup.c`), instead of the daemon's
 * `preexec_fn` doing it before the exec, and writes `R` on STATUS_FD once
 * done (the daemon enters its namespaces only then), and before that, with
 * `--sockets`, `N` once the namespaces exist (`nssetup.c`: the
 * daemon attaches slirp4netns meanwhile); a failure is reported
 * there as `S<errno>` instead and the init exits 127.
 *
 * `--env FD`: the workload's environment, NUL-separated `NAME=value`s in
 * the file FD (a memfd), read and closed here and given to the workload's
 * execve only. The daemon execs this program as root, before any uid
 * change or namespace, so with a fixed environment of its own: the
 * client's (LD_PRELOAD, LD_AUDIT, ...) must never reach its loader.
 *
 * `--warm` (a sandbox made ahead, `runnerd.local.warm`): no program yet.
 * Once set up (`R`) it waits for the go `G` on the --sockets socket with a
 * file passed along (SCM_RIGHTS, a memfd) of NUL-separated fields: the
 * session's directory (the kept one, `--keep`, renamed there on the host:
 * its bind mount is moved to that name, `move_kept`), the workload's cwd,
 * its argc, its argv, then its environment (as `--env`'s); from there on
 * it runs as without `--warm`. A failure there is `S<errno>` too.
 *
 * The same processes, arguments, signals, pipes and exit codes as
 * `runnerd/local/nsinit.py`, whose docstring is the contract (read it
 * first); only `--nest` (a watch session's app) is left to the Python init,
 * which the daemon still runs there. Why a second implementation: a Python
 * interpreter per session cost ~11 ms of CPU and ~2.5 MB of memory for each
 * of the two init processes (issue 22); this one costs a fork and an exec.
 *
 * Built by `make` (`make run`, `make test`, `make bench`) into
 * `nsinit.bin` beside this file; when it is missing or does not run, the
 * daemon falls back to the Python init (`runnerd.local.initpython`).
 *
 * Every system call that can be interrupted by the forwarded signals is
 * retried on EINTR (Python does that for nsinit.py, PEP 475).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <termios.h>
#include <unistd.h>

#include "nssetup.h"

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

/* Changed with the arguments: `initpython.NSINIT_PROTOCOL` must match. */
#define NSINIT_PROTOCOL "runnerd-nsinit 5"

static const int FORWARDED[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define N_FORWARDED (sizeof FORWARDED / sizeof FORWARDED[0])
/* What a root workload loses: see UNDO_MOUNTS in nsinit.py. */
static const int UNDO_MOUNTS[] = {2, 16, 17, 19, 21, 27, 12, 13, 22, 25};
static const char *const READ_ONLY[] = {"/proc/sys", "/proc/sysrq-trigger"};

static char **workload_env;         /* --env's, else this process's own */
static volatile pid_t forward_to;   /* the outer: PID 1; PID 1: the workload */
static int wake_w = -1;             /* PID 1's self-pipe */

/* Report `err` on the status fd as decimal text (the daemon's OSError). */
static void report(int status_fd, int err) {
    char text[16];
    int n = snprintf(text, sizeof text, "%d", err);
    ssize_t ignored = write(status_fd, text, (size_t)n);
    (void)ignored;
}

static void fail(int status_fd, int err) {
    report(status_fd, err);
    _exit(127);
}

/* A containment set-up that failed: `S<errno>` (see the usage above). */
static void fail_setup(int status_fd, int err) {
    char text[16];
    int n = snprintf(text, sizeof text, "S%d", err);
    ssize_t ignored = write(status_fd, text, (size_t)n);
    (void)ignored;
    _exit(127);
}

static int exit_code(int status) {
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

static sigset_t blocked_set(void) {
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < N_FORWARDED; i++)
        sigaddset(&set, FORWARDED[i]);
    sigaddset(&set, SIGCHLD);
    return set;
}

static void set_blocked(int how) {
    sigset_t set = blocked_set();
    sigprocmask(how, &set, NULL);
}

static void on_signal(int handler_sig, void (*fn)(int)) {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = fn;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    sigaction(handler_sig, &act, NULL);
}

static void wake(void) {
    int saved = errno;
    if (wake_w >= 0) {
        ssize_t ignored = write(wake_w, "", 1);
        (void)ignored;
    }
    errno = saved;
}

static void forward(int sig) {
    int saved = errno;
    kill(forward_to, sig);
    errno = saved;
}

/* PID 1's handlers: SIGTERM to every process of the namespace, the others
 * to the workload's process group, SIGCHLD only wakes the loop. */
static void init_term(int sig) {
    int saved = errno;
    kill(-1, sig);
    errno = saved;
    wake();
}

static void init_forward(int sig) {
    int saved = errno;
    kill(-forward_to, sig);
    errno = saved;
    wake();
}

static void init_child(int sig) {
    (void)sig;
    wake();
}

static pid_t wait_retrying(pid_t pid, int *status, int options) {
    pid_t got;
    do
        got = waitpid(pid, status, options);
    while (got < 0 && errno == EINTR);
    return got;
}

/* This namespace's own /proc over the host's, its kernel settings
 * read-only. Returns 0 or an errno. */
static int mount_proc(void) {
    unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    struct stat st;
    if (mount("proc", "/proc", "proc", flags, NULL) != 0)
        return errno;
    for (size_t i = 0; i < sizeof READ_ONLY / sizeof READ_ONLY[0]; i++) {
        if (stat(READ_ONLY[i], &st) != 0)
            continue;
        if (mount(READ_ONLY[i], READ_ONLY[i], NULL, MS_BIND, NULL) != 0)
            return errno;
        if (mount(NULL, READ_ONLY[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, NULL) != 0)
            return errno;
    }
    return 0;
}

/* No ambient or inheritable capabilities; as root none that undo the
 * mounts. Returns 0 or an errno. */
static int drop_capabilities(void) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (syscall(SYS_capget, &header, data) != 0)
        return errno;
    data[0].inheritable = data[1].inheritable = 0;
    if (syscall(SYS_capset, &header, data) != 0)
        return errno;
    if (geteuid() == 0)
        for (size_t i = 0; i < sizeof UNDO_MOUNTS / sizeof UNDO_MOUNTS[0]; i++)
            prctl(PR_CAPBSET_DROP, UNDO_MOUNTS[i], 0, 0, 0);
    return 0;
}

/* In the workload's process: take the terminal, reset signals, exec. */
static void exec_workload(char **argv, int status_fd, int drop_caps) {
    sigset_t empty;
    int err;
    if (drop_caps && (err = drop_capabilities()) != 0)
        fail(status_fd, err);
    setsid();
    ioctl(0, TIOCSCTTY, 0); /* fails when stdin is not a terminal: fine */
    for (int sig = 1; sig < NSIG; sig++)
        signal(sig, SIG_DFL); /* SIGKILL, SIGSTOP refuse: fine */
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, NULL);
    fcntl(status_fd, F_SETFD, FD_CLOEXEC);
    execve(argv[0], argv, workload_env);
    fail(status_fd, errno);
}

/* Reap every exited child; the workload's exit code once reaped, else -1. */
static int reap(pid_t workload) {
    for (;;) {
        int status;
        pid_t pid = wait_retrying(-1, &status, WNOHANG);
        if (pid <= 0)
            return -1;
        if (pid == workload)
            return exit_code(status);
    }
}

/* Block until `a` or `b` (-1: none) is readable or hung up; 1 when `a` is. */
static int first_readable(int a, int b) {
    struct pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    while (poll(fds, b < 0 ? 1 : 2, -1) < 0)
        if (errno != EINTR)
            _exit(1);
    return fds[0].revents != 0;
}

/* PID 1 of the namespace. Never returns. */
static void run_init(char **argv, int status_fd, int outer_alive, int own_proc, int drop_caps) {
    int wake_pipe[2], err;
    char drain[256];
    if (own_proc && (err = mount_proc()) != 0)
        fail(status_fd, err);
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        fail(status_fd, errno);
    pid_t workload = fork();
    if (workload == 0)
        exec_workload(argv, status_fd, drop_caps);
    if (workload < 0)
        fail(status_fd, errno);
    close(status_fd);
    forward_to = workload;
    wake_w = wake_pipe[1];
    on_signal(SIGCHLD, init_child);
    on_signal(SIGTERM, init_term);
    for (size_t i = 1; i < N_FORWARDED; i++)
        on_signal(FORWARDED[i], init_forward);
    set_blocked(SIG_UNBLOCK);
    for (;;) {
        int code = reap(workload);
        if (code >= 0)
            _exit(code); /* the kernel now kills the rest of the namespace */
        if (first_readable(outer_alive, wake_pipe[0]))
            _exit(128 + SIGKILL); /* the outer, so the daemon, is gone */
        while (read(wake_pipe[0], drain, sizeof drain) > 0)
            ;
    }
}

static ssize_t recv_retrying(int fd, char *byte) {
    ssize_t n;
    do
        n = recv(fd, byte, 1, 0);
    while (n < 0 && errno == EINTR);
    return n;
}

/* --warm's go: one byte and the fd passed with it (-1: none). Returns recvmsg's. */
static ssize_t recv_go(int sock, char *byte, int *fd) {
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {byte, 1};
    struct msghdr msg;
    ssize_t n;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    *fd = -1;
    struct cmsghdr *cmsg = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
    if (cmsg != NULL && cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS &&
        cmsg->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(fd, CMSG_DATA(cmsg), sizeof *fd);
    return n;
}

/* --warm: wait for the go (see the usage) and take what it says: the
 * kept directory moved, the cwd entered, the workload's argv and env.
 * Returns the argv; exits (1) when the daemon gave up on this sandbox. */
static char **take_go(int sock, int status_fd, const struct setup *setup) {
    char go;
    int fd, err;
    if (recv_go(sock, &go, &fd) != 1 || go != 'G') {
        if (fd >= 0)
            close(fd);
        _exit(1); /* closed unused (the pool's end), or not ours to run */
    }
    char **fields = fd < 0 ? NULL : read_env(fd);
    if (fields == NULL)
        fail_setup(status_fd, fd < 0 ? EINVAL : errno);
    size_t n = 0;
    while (fields[n] != NULL)
        n++;
    long argc = n >= 3 ? strtol(fields[2], NULL, 10) : -1;
    if (argc < 1 || (size_t)argc > n - 3)
        fail_setup(status_fd, EINVAL);
    if (fields[0][0] != '\0' && (err = move_kept(setup, fields[0])) != 0)
        fail_setup(status_fd, err);
    if (chdir(fields[1]) != 0)
        fail_setup(status_fd, errno);
    char **argv = calloc((size_t)argc + 1, sizeof *argv);
    if (argv == NULL)
        fail_setup(status_fd, ENOMEM);
    memcpy(argv, fields + 3, (size_t)argc * sizeof *argv);
    workload_env = fields + 3 + argc;
    return argv;
}

/* Send one byte, with `fd` attached unless it is -1. Returns sendmsg's. */
static ssize_t send_byte(int sock, char byte, int fd) {
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {&byte, 1};
    struct msghdr msg;
    ssize_t n;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fd >= 0) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
    }
    do
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

/* Answer one request on the daemon's socket; 0 once it is closed. */
static int serve_sockets(int sock) {
    char request;
    if (recv_retrying(sock, &request) <= 0)
        return 0;
    int made = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (made < 0) { /* EMFILE, say: answered, and the serving goes on */
        send_byte(sock, 'e', -1);
        return 1;
    }
    ssize_t sent = send_byte(sock, 's', made);
    close(made);
    return sent >= 0;
}

/* Wait for PID 1's exit, serving the daemon's socket requests meanwhile. */
static int wait_serving(pid_t init, int sock) {
    int status;
    int pidfd = -1;
    if (sock >= 0 && (pidfd = (int)syscall(SYS_pidfd_open, init, 0)) < 0) {
        /* As nsinit.py's os.pidfd_open raising: never serve blind, or
         * leave the daemon's requests unanswered while PID 1 runs. */
        int err = errno;
        kill(init, SIGKILL);
        wait_retrying(init, &status, 0);
        dprintf(2, "nsinit: pidfd_open: %s\n", strerror(err));
        _exit(1);
    }
    while (sock >= 0) {
        if (first_readable(pidfd, sock))
            break;
        if (!serve_sockets(sock)) {
            close(sock);
            sock = -1;
        }
    }
    wait_retrying(init, &status, 0);
    return status;
}

int main(int argc, char **argv) {
    const char *passed = "/proc/self/fd/";
    int status_fd, own_proc = 0, sock = -1, env_fd = -1, split = -1, alive[2], setup_wanted = 0, err;
    struct setup setup = {0, 0, -1, -1, 0, NULL, NULL, {NULL}, 0, -1, 0};
    char go, **workload_argv;
    if (argc == 2 && strcmp(argv[1], "--check") == 0) {
        /* The arguments this build takes: a stale build is not used. */
        fputs(NSINIT_PROTOCOL "\n", stdout);
        return 0;
    }
    if (argc < 4)
        return 2; /* argc 0 too: argv[0] is then NULL */
    if (strncmp(argv[0], passed, strlen(passed)) == 0)
        close(atoi(argv[0] + strlen(passed))); /* this program, passed open */
    status_fd = atoi(argv[1]);
    for (int i = 2; i < argc && split < 0; i++) {
        if (strcmp(argv[i], "--") == 0)
            split = i;
        else if (strcmp(argv[i], "--proc") == 0)
            own_proc = setup.fresh_proc = 1;
        else if (strcmp(argv[i], "--sockets") == 0 && i + 1 < argc)
            sock = atoi(argv[++i]);
        else if (strcmp(argv[i], "--env") == 0 && i + 1 < argc)
            env_fd = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warm") == 0)
            setup.warm = 1;
        else if (strcmp(argv[i], "--setup") == 0 && i + 2 < argc) {
            setup_wanted = 1;
            setup.parent = (pid_t)atol(argv[++i]);
            setup.flags = (int)strtol(argv[++i], NULL, 0);
        } else if (strcmp(argv[i], "--identity") == 0 && i + 2 < argc) {
            setup.uid = atol(argv[++i]);
            setup.gid = atol(argv[++i]);
        } else if (strcmp(argv[i], "--cgroup") == 0 && i + 1 < argc)
            setup.cgroup = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc)
            setup.keep = argv[++i];
        else if (strcmp(argv[i], "--cover") == 0 && i + 1 < argc) {
            if (setup.n_covers == MAX_COVERS)
                fail_setup(status_fd, E2BIG); /* never a cover left out: refuse */
            setup.covers[setup.n_covers++] = argv[++i];
        }
        else
            fail(status_fd, EINVAL); /* --nest is the Python init's */
    }
    /* --warm: its program comes with the go, which needs the socket and,
     * for the move, PID 1's CAP_SYS_ADMIN kept (--proc) */
    if (split < 0 || (setup.warm ? split + 1 != argc || sock < 0 || !own_proc || env_fd >= 0
                                 : split + 1 >= argc))
        fail(status_fd, EINVAL);
    workload_argv = argv + split + 1;
    setup.status_fd = sock >= 0 ? status_fd : -1; /* `N`: see the usage */
    workload_env = environ;
    if (env_fd >= 0 && (workload_env = read_env(env_fd)) == NULL)
        fail(status_fd, errno);
    if (setup_wanted && (err = setup_session(&setup)) != 0)
        fail_setup(status_fd, err);
    if (setup_wanted) {
        /* "R": contained, so the daemon may enter our namespaces now. */
        ssize_t ignored = write(status_fd, "R", 1);
        (void)ignored;
    }
    if (sock >= 0) {
        fcntl(sock, F_SETFD, FD_CLOEXEC); /* the workload never gets it */
        if (setup.warm)
            workload_argv = take_go(sock, status_fd, &setup);
        else if (recv_retrying(sock, &go) != 1 || go != 'g')
            _exit(1); /* the daemon gave up on this session before it ran */
    }
    /* Blocked across the fork: a signal then waits for the right handler. */
    set_blocked(SIG_BLOCK);
    if (pipe2(alive, O_CLOEXEC) != 0)
        fail(status_fd, errno);
    pid_t init = fork();
    if (init == 0) {
        close(alive[1]);
        if (sock >= 0)
            close(sock);
        run_init(workload_argv, status_fd, alive[0], own_proc, own_proc);
    }
    if (init < 0)
        fail(status_fd, errno);
    close(alive[0]);
    close(status_fd);
    forward_to = init;
    for (size_t i = 0; i < N_FORWARDED; i++)
        on_signal(FORWARDED[i], forward);
    set_blocked(SIG_UNBLOCK);
    _exit(exit_code(wait_serving(init, sock)));
}
