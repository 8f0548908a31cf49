/* The compiled relay floor (bench/relayfloor_c.py builds and runs it): the
 * least any relay of a PTY to a WebSocket client can cost on this machine,
 * with no interpreter at all, beside the same bare read in C.
 *
 *   relayfloor bare  SCRIPT   one blocking read loop on the PTY's master
 *   relayfloor relay SCRIPT   a non-blocking burst reader (up to 64 KiB per
 *                             chunk, `poll` when nothing is ready), each
 *                             chunk copied into a 16 MiB ring (as the
 *                             replay ring keeps it), framed as a binary
 *                             WebSocket message and sent with one `writev`
 *                             per chunk to a UNIX socket whose other end a
 *                             forked client reads and counts
 *
 * SCRIPT runs under `/bin/sh -c` on the PTY's slave, in its own session,
 * after a "go" line; it writes the bytes. Prints one line: MB/s (at the
 * reader, or at the client for `relay`), then the reader's or relay's CPU
 * milliseconds per MB. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
#define RING (16 * 1024 * 1024)
#define MB 1e6

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_self(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static int open_pty(const char *script, pid_t *writer) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) || unlockpt(master)) die("posix_openpt");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        setsid();
        int slave = open(ptsname(master), O_RDWR);
        if (slave < 0) die("open slave");
        dup2(slave, 0), dup2(slave, 1), dup2(slave, 2);
        if (slave > 2) close(slave);
        execl("/bin/sh", "sh", "-c", script, (char *)NULL);
        _exit(127);
    }
    *writer = pid;
    if (write(master, "go\n", 3) != 3) die("write go");
    return master;
}

/* The client: recv into one buffer, count bytes, until the Close frame's
 * last bytes arrive (the relay shuts its end down after it). */
static void client(int sock, int report) {
    static char buffer[1 << 20];
    long long received = 0;
    double first = 0;
    for (;;) {
        ssize_t got = recv(sock, buffer, sizeof buffer, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        if (!received) first = now();
        received += got;
    }
    double rate = received / (now() - first) / MB;
    dprintf(report, "%f\n", rate);
    _exit(0);
}

static long long bare(int master) {
    static char buffer[CHUNK];
    long long received = 0;
    for (;;) {
        ssize_t got = read(master, buffer, sizeof buffer);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break; /* EIO: every slave fd closed */
        received += got;
    }
    return received;
}

static long long relay(int master, int sock) {
    static char chunk[CHUNK];
    char *ring = malloc(RING);
    if (!ring) die("malloc");
    memset(ring, 0, RING); /* a ring in use is resident */
    size_t at = 0;
    long long received = 0;
    int eof = 0;
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    struct pollfd pfd = {.fd = master, .events = POLLIN};
    while (!eof) {
        size_t size = 0;
        while (size < CHUNK) {
            ssize_t got = read(master, chunk + size, CHUNK - size);
            if (got > 0) {
                size += got;
                continue;
            }
            if (got < 0 && errno == EAGAIN) break;
            if (got < 0 && errno == EINTR) continue;
            eof = 1;
            break;
        }
        if (!size) {
            if (!eof) poll(&pfd, 1, -1);
            continue;
        }
        if (at + size > RING) at = 0;
        memcpy(ring + at, chunk, size); /* kept, as the replay ring keeps it */
        /* A binary frame's head, 64-bit length: the server sends unmasked. */
        unsigned char head[10] = {0x82, 127};
        for (int i = 0; i < 8; i++) head[2 + i] = (uint64_t)size >> (56 - 8 * i);
        struct iovec iov[2] = {{head, sizeof head}, {ring + at, size}};
        size_t want = sizeof head + size, sent = 0;
        while (sent < want) {
            ssize_t put = writev(sock, iov, 2);
            if (put < 0) {
                if (errno == EINTR) continue;
                die("writev");
            }
            sent += put;
            /* a short write: move the vector past what went */
            size_t skip = put;
            for (int i = 0; i < 2; i++) {
                size_t take = skip < iov[i].iov_len ? skip : iov[i].iov_len;
                iov[i].iov_base = (char *)iov[i].iov_base + take;
                iov[i].iov_len -= take;
                skip -= take;
            }
        }
        at += size;
        received += size;
    }
    static const unsigned char close_frame[] = {0x88, 0x02, 0x03, 0xe8};
    if (write(sock, close_frame, sizeof close_frame) != sizeof close_frame) die("close frame");
    shutdown(sock, SHUT_WR);
    free(ring);
    return received;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "bare") && strcmp(argv[1], "relay"))) {
        fprintf(stderr, "usage: relayfloor bare|relay SCRIPT\n");
        return 2;
    }
    int is_relay = !strcmp(argv[1], "relay");
    int pair[2] = {-1, -1}, report[2] = {-1, -1};
    pid_t counter = -1;
    if (is_relay) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) || pipe2(report, O_CLOEXEC))
            die("socketpair");
        counter = fork();
        if (counter < 0) die("fork");
        if (counter == 0) {
            close(pair[0]), close(report[0]);
            client(pair[1], report[1]);
        }
        close(pair[1]), close(report[1]);
    }
    pid_t writer;
    int master = open_pty(argv[2], &writer);
    double t0 = now(), cpu0 = cpu_self();
    long long received = is_relay ? relay(master, pair[0]) : bare(master);
    double elapsed = now() - t0, cpu = cpu_self() - cpu0;
    double rate = received / elapsed / MB;
    waitpid(writer, NULL, 0);
    if (is_relay) {
        char line[64] = {0};
        if (read(report[0], line, sizeof line - 1) <= 0) die("client report");
        rate = atof(line);
        waitpid(counter, NULL, 0);
    }
    printf("%f %f\n", rate, cpu * 1000 / (received / MB));
    return 0;
}
