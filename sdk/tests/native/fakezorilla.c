/*
 * fakezorilla.c — a native stand-in for the Zorilla host API, for debugging
 * the MPI library quickly outside WebAssembly (not used by the tests):
 * every rank is a process, messages are Unix datagrams between sockets
 * $ZF_DIR/<rank>. See run.sh.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zorilla.h>

static int fd = -1, me, n;

static void setup(void)
{
    if (fd >= 0)
        return;
    me = atoi(getenv("ZF_RANK"));
    n = atoi(getenv("ZF_SIZE"));
    fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/%d", getenv("ZF_DIR"), me);
    unlink(a.sun_path);
    if (bind(fd, (struct sockaddr *)&a, sizeof a)) {
        perror("bind");
        exit(99);
    }
    /* wait until every rank's socket exists */
    for (int r = 0; r < n; r++) {
        char p[200];
        snprintf(p, sizeof p, "%s/%d", getenv("ZF_DIR"), r);
        while (access(p, F_OK))
            usleep(1000);
    }
}

int32_t zorilla_rank(void) { setup(); return me; }
int32_t zorilla_size(void) { setup(); return n; }

int32_t zorilla_send(int32_t dest, const void *data, uint32_t len)
{
    setup();
    if (dest < 0 || dest >= n)
        return ZORILLA_EBADRANK;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/%d", getenv("ZF_DIR"), dest);
    for (;;) {
        if (sendto(fd, data, len, 0, (struct sockaddr *)&a, sizeof a) >= 0)
            return 0;
        if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) {
            usleep(100);
            continue;
        }
        perror("sendto");
        return ZORILLA_ECLOSED;
    }
}

int32_t zorilla_send_timeout(int32_t dest, const void *data, uint32_t len, int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return zorilla_send(dest, data, len);
    setup();
    if (dest < 0 || dest >= n)
        return ZORILLA_EBADRANK;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/%d", getenv("ZF_DIR"), dest);
    for (int64_t waited_us = 0;; waited_us += 100) {
        if (sendto(fd, data, len, MSG_DONTWAIT, (struct sockaddr *)&a, sizeof a) >= 0)
            return 0;
        if (errno != EAGAIN && errno != ENOBUFS && errno != EINTR) {
            perror("sendto");
            return ZORILLA_ECLOSED;
        }
        if (waited_us >= timeout_ms * 1000)
            return ZORILLA_ETIMEDOUT;
        usleep(100);
    }
}

int32_t zorilla_recv(int32_t *source, void *buf, uint32_t cap, int64_t timeout_ms)
{
    setup();
    struct pollfd p = {fd, POLLIN, 0};
    int rc = poll(&p, 1, timeout_ms < 0 ? -1 : (int)timeout_ms);
    if (rc == 0)
        return ZORILLA_ETIMEDOUT;
    struct sockaddr_un a;
    socklen_t al = sizeof a;
    ssize_t len = recvfrom(fd, buf, cap, MSG_PEEK | MSG_TRUNC, (struct sockaddr *)&a, &al);
    if (len < 0)
        return ZORILLA_ECLOSED;
    const char *slash = strrchr(a.sun_path, '/');
    *source = atoi(slash ? slash + 1 : a.sun_path);
    if ((uint32_t)len > cap)
        return (int32_t)len;
    recv(fd, buf, cap, 0);
    return (int32_t)len;
}

int32_t zorilla_barrier(void) { return ZORILLA_ECLOSED; }
int32_t zorilla_membership_next(struct zorilla_membership *e) { (void)e; return 0; }
int32_t zorilla_watch_membership(int32_t enable) { (void)enable; return 0; }
/* No checkpoint store here, as in a local run. */
int32_t zorilla_checkpoint_save(const void *data, uint32_t len)
{
    (void)data;
    (void)len;
    return ZORILLA_ENOTSUP;
}
int32_t zorilla_checkpoint_size(void) { return ZORILLA_ENOTSUP; }
int32_t zorilla_checkpoint_load(void *buf, uint32_t cap)
{
    (void)buf;
    (void)cap;
    return ZORILLA_ENOTSUP;
}
int32_t zorilla_checkpoint_save_generation(int64_t generation, const void *data, uint32_t len)
{
    (void)generation;
    (void)data;
    (void)len;
    return ZORILLA_ENOTSUP;
}
int64_t zorilla_checkpoint_generation(void) { return ZORILLA_ENOTSUP; }
