/* The zorilla.h calls a native program makes (issue 32, item 4): its rank
 * and size, and its checkpoints, which the node keeps as it keeps a
 * WebAssembly worker's (on other nodes of the grid, found again by the
 * rank's next worker). Build with the program:
 *
 *   gcc -O2 -I examples/include prog.c sdk/native/zorilla_native.c -o prog
 *
 * The node hands each native worker a socket, its descriptor ZORILLA_FD,
 * and answers one request at a time on it (node/src/nativeapi.rs):
 * "save <generation> <len>\n" and the bytes -> "ok <places>\n";
 * "size\n" -> "ok <len> <generation>\n"; "load\n" -> the same and the
 * bytes; or "err <code>\n", a ZORILLA_E* status. Outside a native job
 * (no ZORILLA_FD) the checkpoint calls return ZORILLA_ENOTSUP, and the
 * program is rank 0 of 1. Not thread-safe: one thread makes the calls. */
#include "zorilla.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

int32_t zorilla_rank(void) { return env_int("ZORILLA_RANK", 0); }

int32_t zorilla_size(void) { return env_int("ZORILLA_SIZE", 1); }

static int channel(void) { return env_int("ZORILLA_FD", -1); }

static int write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *data, size_t len) {
    char *p = data;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One answer line into `line` (at most `cap` - 1 bytes). */
static int read_line(int fd, char *line, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        char c;
        if (read_all(fd, &c, 1) < 0) return -1;
        if (c == '\n') {
            line[n] = 0;
            return 0;
        }
        line[n++] = c;
    }
    return -1;
}

/* The answer's status: the number after "ok" (and in *second the one
 * after it), or the code after "err", or ZORILLA_ECHECKPOINT if the node
 * cannot be asked. */
static int64_t answer(int fd, int64_t *second) {
    char line[128];
    if (read_line(fd, line, sizeof line) < 0) return ZORILLA_ECHECKPOINT;
    long long a = 0, b = 0;
    if (sscanf(line, "ok %lld %lld", &a, &b) >= 1) {
        if (second) *second = b;
        return a;
    }
    if (sscanf(line, "err %lld", &a) == 1) return a;
    return ZORILLA_ECHECKPOINT;
}

static int32_t save(int64_t generation, const void *data, uint32_t len) {
    int fd = channel();
    if (fd < 0) return ZORILLA_ENOTSUP;
    if (len > 0 && data == NULL) return ZORILLA_EFAULT;
    char head[64];
    int n = snprintf(head, sizeof head, "save %lld %u\n", (long long)generation, len);
    if (write_all(fd, head, (size_t)n) < 0 || write_all(fd, data, len) < 0)
        return ZORILLA_ECHECKPOINT;
    return (int32_t)answer(fd, NULL);
}

int32_t zorilla_checkpoint_save(const void *data, uint32_t len) { return save(0, data, len); }

int32_t zorilla_checkpoint_save_generation(int64_t generation, const void *data, uint32_t len) {
    if (generation < 1 || generation > ZORILLA_MAX_GENERATION) return ZORILLA_EINVAL;
    return save(generation, data, len);
}

static int64_t ask_size(int64_t *generation) {
    int fd = channel();
    if (fd < 0) return ZORILLA_ENOTSUP;
    if (write_all(fd, "size\n", 5) < 0) return ZORILLA_ECHECKPOINT;
    return answer(fd, generation);
}

int32_t zorilla_checkpoint_size(void) { return (int32_t)ask_size(NULL); }

int64_t zorilla_checkpoint_generation(void) {
    int64_t generation = 0;
    int64_t size = ask_size(&generation);
    return size < 0 ? size : generation;
}

int32_t zorilla_checkpoint_load(void *buf, uint32_t cap) {
    int fd = channel();
    if (fd < 0) return ZORILLA_ENOTSUP;
    if (write_all(fd, "load\n", 5) < 0) return ZORILLA_ECHECKPOINT;
    int64_t size = answer(fd, NULL);
    if (size < 0) return (int32_t)size;
    /* The bytes come in any case: keep them if they fit, else drop them. */
    char sink[4096];
    for (int64_t left = size, at = 0; left > 0;) {
        size_t n = left < (int64_t)sizeof sink ? (size_t)left : sizeof sink;
        char *to = (size <= cap && buf != NULL) ? (char *)buf + at : sink;
        if (read_all(fd, to, n) < 0) return ZORILLA_ECHECKPOINT;
        left -= (int64_t)n;
        at += (int64_t)n;
    }
    return (int32_t)size;
}
