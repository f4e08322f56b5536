/* zorilla_solo: the Zorilla host API for a native build of a guest as rank
 * 0 of a job of one, so that the same C source can be timed natively and in
 * the sandbox (scripts/bench.sh, sandbox/benches/compute.rs):
 *
 *   gcc -O2 -Wno-attributes -I examples/include -o nqueens \
 *       examples/src/nqueens.c examples/native/zorilla_solo.c
 *
 * Messages a rank sends to itself are queued (up to QUEUE of them); a recv
 * with nothing queued times out, or, when it would wait for ever, reports
 * the transport closed, as nobody else could ever send.
 *
 * With ZORILLA_SOLO_CPU_TIME set in the environment, the process prints the
 * CPU time it used to stderr as it exits (`zorilla-solo cpu_ns=123`), for
 * the benchmark to compare with the sandbox's measure of a worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "zorilla.h"

enum { QUEUE = 64, MAX_BYTES = 4096 };

static struct { uint32_t len; unsigned char data[MAX_BYTES]; } queue[QUEUE];
static int head, count;

int32_t zorilla_rank(void) { return 0; }

int32_t zorilla_size(void) { return 1; }

int32_t zorilla_send(int32_t dest, const void *data, uint32_t len) {
    if (dest != 0) return ZORILLA_EBADRANK;
    if (len > MAX_BYTES) return ZORILLA_ETOOBIG;
    if (count == QUEUE) return ZORILLA_ECLOSED; /* would wait for ever */
    int slot = (head + count) % QUEUE;
    queue[slot].len = len;
    memcpy(queue[slot].data, data, len);
    count++;
    return ZORILLA_OK;
}

int32_t zorilla_recv(int32_t *source, void *buf, uint32_t cap, int64_t timeout_ms) {
    if (count == 0) return timeout_ms < 0 ? ZORILLA_ECLOSED : ZORILLA_ETIMEDOUT;
    uint32_t len = queue[head].len;
    memcpy(buf, queue[head].data, len < cap ? len : cap);
    head = (head + 1) % QUEUE;
    count--;
    *source = 0;
    return (int32_t)len;
}

int32_t zorilla_barrier(void) { return ZORILLA_OK; }

int32_t zorilla_membership_next(struct zorilla_membership *event) {
    (void)event;
    return 0;
}

int32_t zorilla_watch_membership(int32_t enable) {
    (void)enable;
    return ZORILLA_OK;
}

/* A job of one on one machine keeps no checkpoints. */
int32_t zorilla_checkpoint_save(const void *data, uint32_t len) {
    (void)data;
    (void)len;
    return ZORILLA_ENOTSUP;
}

int32_t zorilla_checkpoint_size(void) { return ZORILLA_ENOTSUP; }

int32_t zorilla_checkpoint_load(void *buf, uint32_t cap) {
    (void)buf;
    (void)cap;
    return ZORILLA_ENOTSUP;
}

__attribute__((destructor)) static void report_cpu_time(void) {
    if (!getenv("ZORILLA_SOLO_CPU_TIME")) return;
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return;
    fprintf(stderr, "zorilla-solo cpu_ns=%lld\n",
            (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}
