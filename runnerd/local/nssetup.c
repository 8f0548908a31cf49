/* A run session's containment, set up by the compiled init itself.
 *
 * What `runnerd.local.spawn._prepare_child` does in a forked daemon (the
 * cgroup, `containment.preexec_contained`: the session uid, the
 * parent-death signal, the namespaces and their uid maps, `lo` up,
 * `mounts.apply_view`, `no_new_privs`, an empty bounding set), done here
 * after the exec instead, so the daemon spawns without a `preexec_fn`:
 * `subprocess` then vforks, and nothing runs in a copy of the daemon's
 * address space (issue 22: a fork and a Python set-up in a copy of a
 * 50-100 MB process cost 10-20 ms a session on a loaded host). The order
 * and every system call are those of the Python functions named; their
 * docstrings are the contract. The daemon passes what it decided (the
 * covers, outermost first: `mounts.covers`) as arguments.
 *
 * Also `read_env`: the workload's environment, which the daemon hands
 * over in a memfd (`--env`, see `nsinit.c`) rather than the init's own.
 *
 * With `status_fd` (the init's with `--sockets`: a network namespace), `N`
 * goes there as soon as the namespaces exist with `lo` up (before the mounts), so that the daemon starts slirp4netns
 * alongside the rest of the set-up instead of after it.
 *
 * Errors: `setup_session` returns 0 or an errno; the caller reports it on
 * the status fd as `S<errno>` (the daemon's "cannot set up the session's
 * containment").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <linux/capability.h>
#include <unistd.h>

#include "nssetup.h"

#define COVER_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC)
static const char *const PRIVATE_DIRS[] = {"/tmp", "/var/tmp", "/dev/shm", "/run/lock"};
static const char *const HOST_PROC_READ_ONLY[] = {"/proc/sys", "/proc/sysrq-trigger"};

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != 0)                                                                           \
            return errno ? errno : EPERM;                                                          \
    } while (0)

static int inside(const char *path, const char *parent) {
    size_t n = strlen(parent);
    while (n > 0 && parent[n - 1] == '/')
        n--;
    if (strcmp(path, parent) == 0)
        return 1;
    /* n: `parent` without trailing slashes, so `/a/b/` holds `/a/b` too */
    return strncmp(path, parent, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    ssize_t n = write(fd, text, strlen(text));
    int err = n < 0 ? errno : 0;
    close(fd);
    return err;
}

/* identity.become: setgroups, setresgid, setresuid, stay dumpable. */
static int become(uid_t uid, gid_t gid) {
    TRY(setgroups(0, NULL));
    TRY(setresgid(gid, gid, gid));
    TRY(setresuid(uid, uid, uid));
    TRY(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0));
    return 0;
}

/* containment.enter_namespaces: unshare, and map our ids to themselves. */
static int enter_namespaces(int flags) {
    char map[64];
    uid_t uid = geteuid();
    gid_t gid = getegid();
    int err;
    TRY(unshare(flags));
    if (!(flags & CLONE_NEWUSER))
        return 0;
    snprintf(map, sizeof map, "%u %u 1\n", uid, uid);
    if ((err = write_file("/proc/self/uid_map", map)) != 0)
        return err;
    if ((err = write_file("/proc/self/setgroups", "deny")) != 0)
        return err;
    snprintf(map, sizeof map, "%u %u 1\n", gid, gid);
    return write_file("/proc/self/gid_map", map);
}

/* containment.loopback_up */
static int loopback_up(void) {
    struct ifreq req;
    int err = 0;
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return errno;
    memset(&req, 0, sizeof req);
    strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
    if (ioctl(sock, SIOCGIFFLAGS, &req) != 0)
        err = errno;
    req.ifr_flags |= IFF_UP;
    if (!err && ioctl(sock, SIOCSIFFLAGS, &req) != 0)
        err = errno;
    close(sock);
    return err;
}

static int make_dirs(const char *path) {
    char buf[4096];
    if (strlen(path) >= sizeof buf)
        return ENAMETOOLONG;
    strcpy(buf, path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return errno;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0)
        return errno; /* os.makedirs: the last one must be new */
    return 0;
}

/* mounts._cover; `bind`: `keep` bound back in this one (else only its
 * mount point made: --warm binds it in the visible cover alone) */
static int cover(const char *path, const char *keep, int keep_fd, int private_dir, int bind) {
    struct stat st;
    char source[64];
    int err;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : errno;
    int is_dir = S_ISDIR(st.st_mode);
    if (private_dir && !is_dir)
        return 0;
    if (!is_dir) {
        TRY(mount("/dev/null", path, NULL, MS_BIND, ""));
        return 0;
    }
    if (private_dir)
        TRY(mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
    else
        TRY(mount("tmpfs", path, "tmpfs", COVER_FLAGS, "mode=0755,size=16k"));
    if (keep != NULL && keep_fd >= 0 && inside(keep, path)) {
        if ((err = make_dirs(keep)) != 0)
            return err;
        snprintf(source, sizeof source, "/proc/self/fd/%d", keep_fd);
        if (bind)
            TRY(mount(source, keep, NULL, MS_BIND | MS_REC, ""));
    }
    if (!private_dir)
        TRY(mount(NULL, path, NULL, MS_REMOUNT | MS_RDONLY | COVER_FLAGS, ""));
    return 0;
}

/* mountinfo's escapes (a space as \040), in place. */
static void unescape(char *s) {
    char *out = s;
    for (char *in = s; *in; out++) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '7' && in[2] >= '0' && in[2] <= '7' &&
            in[3] >= '0' && in[3] <= '7') {
            *out = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else {
            *out = *in++;
        }
    }
    *out = '\0';
}

static int remount_read_only(const char *point, const char *path) {
    struct statvfs vfs;
    unsigned long flags = 0;
    if (statvfs(point, &vfs) == 0) {
        flags |= (vfs.f_flag & ST_NOSUID) ? MS_NOSUID : 0;
        flags |= (vfs.f_flag & ST_NODEV) ? MS_NODEV : 0;
        flags |= (vfs.f_flag & ST_NOEXEC) ? MS_NOEXEC : 0;
        if (mount(NULL, point, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, "") == 0)
            return 0;
    }
    /* mounts.read_only: one out of reach is skipped, unless it is `path` */
    int err = errno;
    if ((err == EACCES || err == EPERM || err == ENOENT) && strcmp(point, path) != 0)
        return 0;
    return err;
}

/* mounts.read_only */
static int read_only(const char *path) {
    struct stat st;
    static char line[65536]; /* a mountinfo line; the init is single-threaded */
    int err = 0;
    if (lstat(path, &st) != 0)
        return 0;
    TRY(mount(path, path, NULL, MS_BIND | MS_REC, ""));
    FILE *info = fopen("/proc/self/mountinfo", "re");
    if (info == NULL)
        return errno;
    while (!err && fgets(line, sizeof line, info) != NULL) {
        char *sep = strstr(line, " - ");
        if (sep == NULL || strncmp(sep + 3, "autofs ", 7) == 0)
            continue;
        *sep = '\0';
        char *field = strtok(line, " ");
        for (int i = 0; field != NULL && i < 4; i++)
            field = strtok(NULL, " ");
        if (field == NULL)
            continue;
        unescape(field);
        if (inside(field, path))
            err = remount_read_only(field, path);
    }
    fclose(info);
    return err;
}

/* mounts._open_kept: by the way from the cwd when it is inside. A way
 * longer than `rel` fails closed (ENAMETOOLONG), never truncated. */
static int open_kept(const char *keep) {
    char cwd[4096];
    const char *path = keep;
    char rel[4096];
    if (getcwd(cwd, sizeof cwd) != NULL && inside(cwd, keep)) {
        size_t n = strlen(keep), used = 0;
        while (n > 0 && keep[n - 1] == '/')
            n--; /* `--keep /a/b/`: the cwd's rest starts after /a/b */
        int depth = 0;
        for (const char *p = cwd + n; *p; p++)
            depth += *p == '/';
        for (int i = 0; i < depth; i++) {
            const char *step = i ? "/.." : "..";
            size_t len = strlen(step);
            if (used + len >= sizeof rel) {
                errno = ENAMETOOLONG;
                return -1;
            }
            memcpy(rel + used, step, len);
            used += len;
        }
        rel[used] = '\0';
        path = depth ? rel : ".";
    }
    return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

#define N_PRIVATE ((int)(sizeof PRIVATE_DIRS / sizeof PRIVATE_DIRS[0]))

/* The i-th cover in `apply_view`'s order: the private dirs, then --cover's. */
static const char *cover_path(const struct setup *s, int i) {
    return i < N_PRIVATE ? PRIVATE_DIRS[i] : s->covers[i - N_PRIVATE];
}

/* The last cover (in `apply_view`'s order) that holds `keep`: the one its
 * bind mount is visible in, each one mounted over the one before; -1 for
 * none. A private dir only where it is a directory, as `cover` skips a
 * symlink (/var/tmp -> /tmp); a --cover that holds `keep` is one of its
 * parents, so a directory (`cover` fails the set-up when it cannot see
 * it; not looked at here: before the private dirs' tmpfs, a 0700 parent
 * on the host hides it from a session uid). */
static int visible_cover(const struct setup *s) {
    struct stat st;
    int found = -1;
    for (int i = 0; s->keep != NULL && i < N_PRIVATE + s->n_covers; i++) {
        if (!inside(s->keep, cover_path(s, i)))
            continue;
        if (i >= N_PRIVATE || (lstat(cover_path(s, i), &st) == 0 && S_ISDIR(st.st_mode)))
            found = i;
    }
    return found;
}

/* mounts.apply_view */
static int apply_view(const struct setup *s) {
    char cwd[4096];
    int keep_fd = -1, err = 0;
    /* --warm: only the visible bind, so that `move_kept` leaves no mount
     * named after the slot under a cover */
    int bound = s->warm ? visible_cover(s) : -1;
    TRY(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, ""));
    if (s->keep != NULL && (keep_fd = open_kept(s->keep)) < 0)
        return errno;
    for (int i = 0; !err && i < N_PRIVATE + s->n_covers; i++)
        err = cover(cover_path(s, i), s->keep, keep_fd, i < N_PRIVATE, !s->warm || i == bound);
    if (keep_fd >= 0)
        close(keep_fd);
    if (!err)
        err = read_only("/sys");
    for (size_t i = 0; !err && !s->fresh_proc && i < 2; i++)
        err = read_only(HOST_PROC_READ_ONLY[i]);
    if (err)
        return err;
    if (getcwd(cwd, sizeof cwd) == NULL)
        return errno;
    TRY(chdir(cwd));
    return 0;
}

static int join_cgroup(const char *cgroup) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/cgroup.procs", cgroup);
    if (n < 0 || (size_t)n >= sizeof path)
        return ENAMETOOLONG; /* truncated: another file, never written */
    return write_file(path, "0");
}

/* Keep only what the init needs once set up, as the Python init is left
 * with after its exec: CAP_SYS_ADMIN of the session's user namespace (for
 * PID 1's /proc, `fresh_proc`), else nothing; ambient as the Python init's
 * (the workload's exec clears it). `inheritable_only`: set the inheritable
 * set alone, before the bounding set goes (a capability outside it cannot
 * become inheritable after). Returns 0 or an errno. */
static int keep_only_needed(int fresh_proc, int inheritable_only) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    unsigned int kept = fresh_proc ? 1u << CAP_SYS_ADMIN : 0;
    if (syscall(SYS_capget, &header, data) != 0)
        return errno;
    data[0].inheritable = kept;
    data[1].inheritable = 0;
    if (!inheritable_only) {
        data[0].effective = data[0].permitted = kept;
        data[1].effective = data[1].permitted = 0;
    }
    if (syscall(SYS_capset, &header, data) != 0)
        return errno;
    if (fresh_proc && !inheritable_only)
        TRY(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0));
    return 0;
}

int move_kept(const struct setup *s, const char *to) {
    int at = visible_cover(s), err = 0;
    const char *slash = s->keep == NULL ? NULL : strrchr(s->keep, '/');
    const char *to_slash = strrchr(to, '/');
    if (at < 0 || slash == NULL || to_slash == NULL || slash - s->keep != to_slash - to ||
        strncmp(s->keep, to, (size_t)(slash - s->keep)) != 0 || to_slash[1] == '\0' ||
        strcmp(to_slash + 1, ".") == 0 || strcmp(to_slash + 1, "..") == 0)
        return EINVAL; /* only ever renamed within its directory, as on the host */
    const char *point = cover_path(s, at);
    int read_only_cover = at >= N_PRIVATE; /* a private dir's stays writable */
    if (read_only_cover)
        TRY(mount(NULL, point, NULL, MS_REMOUNT | COVER_FLAGS, ""));
    if (mkdir(to, 0755) != 0 || mount(s->keep, to, NULL, MS_MOVE, NULL) != 0 || rmdir(s->keep) != 0)
        err = errno ? errno : EPERM;
    if (read_only_cover && mount(NULL, point, NULL, MS_REMOUNT | MS_RDONLY | COVER_FLAGS, "") != 0)
        err = err ? err : errno;
    return err;
}

int setup_session(const struct setup *s) {
    int err;
    if (s->cgroup != NULL && (err = join_cgroup(s->cgroup)) != 0)
        return err;
    if (s->uid >= 0 && (err = become((uid_t)s->uid, (gid_t)s->gid)) != 0)
        return err;
    /* After the uid change: a credential change clears the signal. */
    TRY(prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0));
    if (getppid() != s->parent)
        _exit(1); /* the daemon died before the signal was armed */
    if (s->flags && (err = enter_namespaces(s->flags)) != 0)
        return err;
    if ((s->flags & CLONE_NEWNET) && (err = loopback_up()) != 0)
        return err;
    if (s->status_fd >= 0) {
        /* "N": the daemon may attach slirp4netns (it joins only the user
         * and network namespaces, both final now) while the mounts below
         * are made; the workload still waits for "R" and the daemon's go. */
        ssize_t ignored = write(s->status_fd, "N", 1);
        (void)ignored;
    }
    if ((s->flags & CLONE_NEWNS) && (err = apply_view(s)) != 0)
        return err;
    TRY(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
    if (!(s->flags & CLONE_NEWUSER))
        return 0;
    if ((err = keep_only_needed(s->fresh_proc, 1)) != 0)
        return err;
    for (int cap = 0; cap < 64; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            return errno;
    return keep_only_needed(s->fresh_proc, 0);
}

/* The NUL-separated environment in `fd` (see the usage), closed; NULL
 * with errno set when it cannot be read. */
char **read_env(int fd) {
    struct stat st;
    size_t count = 0, at = 0;
    if (fstat(fd, &st) != 0)
        return NULL;
    if (st.st_size < 0 || (unsigned long long)st.st_size > (1ULL << 30)) {
        errno = E2BIG;
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    char *text = malloc(size + 1);
    if (text == NULL)
        return NULL;
    while (at < size) {
        ssize_t n = pread(fd, text + at, size - at, (off_t)at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            errno = n == 0 ? EIO : errno;
            return NULL;
        }
        at += (size_t)n;
    }
    close(fd);
    text[size] = '\0';
    for (size_t i = 0; i < size; i++)
        count += text[i] == '\0';
    char **env = calloc(count + 2, sizeof *env);
    if (env == NULL)
        return NULL;
    for (size_t i = 0, n = 0; i < size; i += strlen(text + i) + 1)
        env[n++] = text + i;
    return env;
}
