/* transfer: messages of growing sizes between ranks 0 and 1, checked byte
 * by byte, and a ping-pong benchmark.
 *
 * Usage:
 *   transfer check MAX     sizes 0, 1, 8, 1000, then powers of two up to
 *                          MAX bytes, each with a distinct pattern: rank 0
 *                          sends, rank 1 checks it and sends it back, rank 0
 *                          checks the echo. Then 200 small messages back to
 *                          back (pipelined), checked for order. Rank 0 also
 *                          checks that a message of ZORILLA_MAX_MESSAGE + 1
 *                          bytes gets ZORILLA_ETOOBIG. Prints
 *                            transfer check ok sizes=N max=MAX
 *   transfer pingpong SIZE ITERATIONS [SIZE ITERATIONS ...]
 *                          round trips of SIZE bytes; rank 0 prints, per pair,
 *                            transfer size=SIZE iterations=N roundtrip_ns=T
 *                          (mean, after one warm-up round trip).
 *   transfer slow COUNT SIZE
 *                          rank 0 sends COUNT messages of SIZE bytes back to
 *                          back; rank 1 reads them slowly (20 ms apart) and
 *                          checks each. Prints "transfer slow ok count=COUNT".
 *   transfer stall SIZE    rank 1 never reads; rank 0 sends SIZE-byte
 *                          messages with a 500 ms send timeout until one
 *                          times out, prints
 *                            transfer stalled after N messages
 *                          then blocks in a send for ever (to be cancelled).
 * Ranks 2 and up do nothing. Exit status 1 on any mismatch or error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "zorilla.h"

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint8_t pattern(uint32_t i, uint32_t k) {
    return (uint8_t)(i * 31u + k * 7u + (i >> 12) + (i >> 20));
}

static void fill(uint8_t *buf, uint32_t len, uint32_t k) {
    for (uint32_t i = 0; i < len; i++) buf[i] = pattern(i, k);
}

static int check(const uint8_t *buf, uint32_t len, uint32_t k) {
    for (uint32_t i = 0; i < len; i++)
        if (buf[i] != pattern(i, k)) {
            fprintf(stderr, "transfer: message %u byte %u is wrong\n", k, i);
            return 0;
        }
    return 1;
}

/* Receives exactly `len` bytes from `from` into buf. */
static int recv_exact(int32_t from, uint8_t *buf, uint32_t cap, uint32_t len) {
    int32_t src = -1;
    int32_t n = zorilla_recv(&src, buf, cap, -1);
    if (n != (int32_t)len || src != from) {
        fprintf(stderr, "transfer: got %d bytes from %d, wanted %u from %d\n", n, src, len, from);
        return 0;
    }
    return 1;
}

static int sizes(uint32_t max, uint32_t *out) {
    int n = 0;
    uint32_t fixed[] = {0, 1, 8, 1000};
    for (int i = 0; i < 4; i++)
        if (fixed[i] <= max) out[n++] = fixed[i];
    for (uint32_t s = 1024; s <= max && n < 60; s *= 2) out[n++] = s;
    if (n > 0 && out[n - 1] != max && n < 64) out[n++] = max; /* an odd size at the end */
    return n;
}

static int check_mode(uint32_t max) {
    int rank = zorilla_rank();
    uint32_t list[64];
    int n = sizes(max, list);
    uint8_t *buf = malloc(max > 0 ? max : 1);
    if (!buf) { fprintf(stderr, "transfer: no memory for %u bytes\n", max); return 1; }
    if (rank == 0) {
        static uint8_t small[16];
        int32_t r = zorilla_send(1, small, (uint32_t)ZORILLA_MAX_MESSAGE + 1u);
        if (r != ZORILLA_ETOOBIG) { fprintf(stderr, "transfer: oversized send gave %d\n", r); return 1; }
    }
    for (int k = 0; k < n; k++) {
        uint32_t len = list[k];
        if (rank == 0) {
            fill(buf, len, (uint32_t)k);
            if (zorilla_send(1, buf, len) != ZORILLA_OK) return 1;
            memset(buf, 0, len);
            if (!recv_exact(1, buf, max, len) || !check(buf, len, (uint32_t)k + 1000)) return 1;
        } else if (rank == 1) {
            if (!recv_exact(0, buf, max, len) || !check(buf, len, (uint32_t)k)) return 1;
            fill(buf, len, (uint32_t)k + 1000);
            if (zorilla_send(0, buf, len) != ZORILLA_OK) return 1;
        }
    }
    /* Pipelined small messages: order. */
    for (uint32_t i = 0; i < 200; i++) {
        uint32_t v = i;
        if (rank == 0) {
            if (zorilla_send(1, &v, sizeof v) != ZORILLA_OK) return 1;
        } else if (rank == 1) {
            if (!recv_exact(0, (uint8_t *)&v, sizeof v, sizeof v)) return 1;
            if (v != i) { fprintf(stderr, "transfer: message %u arrived as %u\n", i, v); return 1; }
        }
    }
    if (rank == 1) {
        uint32_t done = 1;
        if (zorilla_send(0, &done, sizeof done) != ZORILLA_OK) return 1;
    } else if (rank == 0) {
        uint32_t done = 0;
        if (!recv_exact(1, (uint8_t *)&done, sizeof done, sizeof done)) return 1;
        printf("transfer check ok sizes=%d max=%u\n", n, max);
    }
    return 0;
}

static int pingpong_mode(uint32_t size, int iterations) {
    int rank = zorilla_rank();
    uint8_t *buf = malloc(size > 0 ? size : 1);
    if (!buf) return 1;
    memset(buf, 7, size);
    zorilla_barrier();
    if (rank == 0) {
        for (int warm = 1; warm >= 0; warm--) {
            int count = warm ? 1 : iterations;
            long long start = now_ns();
            for (int i = 0; i < count; i++) {
                if (zorilla_send(1, buf, size) != ZORILLA_OK) return 1;
                if (!recv_exact(1, buf, size, size)) return 1;
            }
            if (!warm)
                printf("transfer size=%u iterations=%d roundtrip_ns=%lld\n", size, iterations,
                       (now_ns() - start) / iterations);
        }
    } else if (rank == 1) {
        for (int i = 0; i < iterations + 1; i++) {
            if (!recv_exact(0, buf, size, size)) return 1;
            if (zorilla_send(0, buf, size) != ZORILLA_OK) return 1;
        }
    }
    free(buf);
    return 0;
}

static int slow_mode(uint32_t count, uint32_t size) {
    int rank = zorilla_rank();
    uint8_t *buf = malloc(size > 0 ? size : 1);
    if (!buf) return 1;
    for (uint32_t k = 0; k < count; k++) {
        if (rank == 0) {
            fill(buf, size, k);
            if (zorilla_send(1, buf, size) != ZORILLA_OK) return 1;
        } else if (rank == 1) {
            struct timespec pause = {0, 20 * 1000 * 1000};
            nanosleep(&pause, 0);
            if (!recv_exact(0, buf, size, size) || !check(buf, size, k)) return 1;
        }
    }
    if (rank == 1) printf("transfer slow ok count=%u\n", count);
    return 0;
}

static int stall_mode(uint32_t size) {
    int rank = zorilla_rank();
    uint8_t *buf = calloc(size > 0 ? size : 1, 1);
    if (!buf) return 1;
    if (rank == 1) {
        zorilla_barrier(); /* rank 0 never comes: never reads */
        return 1;
    }
    if (rank != 0) return 0;
    int sent = 0;
    for (;;) {
        int32_t r = zorilla_send_timeout(1, buf, size, 500);
        if (r == ZORILLA_ETIMEDOUT) break;
        if (r != ZORILLA_OK || sent > 100000) return 1;
        sent++;
    }
    printf("transfer stalled after %d messages\n", sent);
    fflush(stdout);
    zorilla_send(1, buf, size); /* blocks until cancelled */
    return 1;
}

int main(int argc, char **argv) {
    if (zorilla_size() < 2) { fprintf(stderr, "transfer: needs 2 ranks\n"); return 2; }
    if (argc >= 3 && strcmp(argv[1], "check") == 0)
        return check_mode((uint32_t)strtoul(argv[2], 0, 10));
    if (argc >= 4 && strcmp(argv[1], "pingpong") == 0) {
        for (int a = 2; a + 1 < argc; a += 2)
            if (pingpong_mode((uint32_t)strtoul(argv[a], 0, 10), atoi(argv[a + 1]))) return 1;
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "slow") == 0)
        return slow_mode((uint32_t)strtoul(argv[2], 0, 10), (uint32_t)strtoul(argv[3], 0, 10));
    if (argc >= 3 && strcmp(argv[1], "stall") == 0)
        return stall_mode((uint32_t)strtoul(argv[2], 0, 10));
    fprintf(stderr, "usage: transfer check MAX | pingpong SIZE ITERATIONS... | slow COUNT SIZE | stall SIZE\n");
    return 2;
}
