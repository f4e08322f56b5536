/* barrier: checks that zorilla_barrier() holds every rank until the last one
 * has entered it. Used by the sandbox's tests.
 *
 * Usage: barrier [rounds] [delay_ms]   (defaults: one round per rank, 20 ms)
 *
 * In round k the rank k % size is late: it waits delay_ms before entering
 * the barrier, and nothing may arrive for it meanwhile. Every other rank
 * enters at once and, as soon as its barrier returns, sends k to the late
 * rank, which expects exactly one such message from each of them after its
 * own barrier returned. A barrier that lets a rank through early shows as a
 * message during the late rank's wait.
 *
 * Prints "FAIL ..." for each violation and exits with their number; rank 0
 * finally prints:
 *   barrier ranks=4 rounds=4 ok
 */
#include <stdio.h>
#include <stdlib.h>
#include "zorilla.h"

static int failures;
static char *heard;

static void fail(const char *what, int32_t a, int32_t b) {
    printf("FAIL rank %d: %s (%d, %d)\n", zorilla_rank(), what, a, b);
    failures++;
}

/* The late rank of round k takes in one message; returns 0 if it could not. */
static int take(int32_t k, int32_t timeout_ms) {
    int32_t src = -1, got = -1;
    int32_t r = zorilla_recv(&src, &got, sizeof got, timeout_ms);
    if (r == ZORILLA_ETIMEDOUT) return 0;
    if (r != (int32_t)sizeof got) {
        fail("recv", r, k);
        return 0;
    }
    if (got != k) fail("message of another round", src, got);
    if (src < 0 || src >= zorilla_size() || src == zorilla_rank() || heard[src])
        fail("unexpected sender", src, got);
    else
        heard[src] = 1;
    return 1;
}

int main(int argc, char **argv) {
    int32_t rank = zorilla_rank(), size = zorilla_size();
    int rounds = argc > 1 ? atoi(argv[1]) : size;
    int delay_ms = argc > 2 ? atoi(argv[2]) : 20;
    heard = calloc(size, 1);
    if (!heard) return 1;

    for (int32_t k = 0; k < rounds; k++) {
        int32_t late = k % size, taken = 0;
        if (rank == late) {
            for (int32_t i = 0; i < size; i++) heard[i] = 0;
            /* Whatever arrives before this rank enters came through the
             * barrier early (it still counts towards the round, so that a
             * broken barrier fails the run instead of hanging it). */
            while (taken < size - 1 && take(k, delay_ms)) {
                fail("a message arrived before the late rank entered the barrier", k, taken);
                taken++;
            }
        }
        int32_t r = zorilla_barrier();
        if (r != ZORILLA_OK) fail("barrier", r, k);
        if (rank != late) {
            r = zorilla_send(late, &k, sizeof k);
            if (r != ZORILLA_OK) fail("send", r, k);
            continue;
        }
        while (taken < size - 1 && take(k, -1)) taken++;
        if (taken < size - 1) fail("messages missing", k, taken);
    }
    if (rank == 0) printf("barrier ranks=%d rounds=%d %s\n", size, rounds, failures ? "FAILED" : "ok");
    return failures;
}
