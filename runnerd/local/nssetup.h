/* The compiled init's containment set-up (nssetup.c), as nsinit.c parses it. */
#ifndef RUNNERD_NSSETUP_H
#define RUNNERD_NSSETUP_H
#include <sys/types.h>

#define MAX_COVERS 256

struct setup {
    pid_t parent;      /* the daemon: the parent-death signal's check */
    int flags;         /* unshare(2) flags: the plan's */
    long uid, gid;     /* a root daemon's session uid; -1: keep the daemon's */
    int fresh_proc;    /* the init mounts its own /proc (--proc) */
    const char *cgroup;
    const char *keep;  /* the session's directory, bound back */
    const char *covers[MAX_COVERS];
    int n_covers;
    int status_fd;     /* -1: none; else (with --sockets) `N` is written
                        * there once the namespaces exist with `lo` up */
    int warm;          /* --warm: `keep` is bound in the visible cover only,
                        * for `move_kept` to move at the go */
};

int setup_session(const struct setup *s);
/* --warm's go: `s->keep`'s bind mount moved to `to` (a sibling of it),
 * its old mount point removed. Returns 0 or an errno. */
int move_kept(const struct setup *s, const char *to);
/* `--env FD`'s NUL-separated environment, `fd` closed; NULL and errno. */
char **read_env(int fd);
#endif
