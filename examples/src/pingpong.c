/* pingpong: measures the message round-trip time between ranks 0 and 1.
 *
 * Usage: pingpong [iterations]   (default 1000)
 *
 * Rank 0 sends an 8-byte message to rank 1, which sends it straight back;
 * rank 0 prints the mean round trip measured with the WASI monotonic clock:
 *   pingpong iterations=1000 roundtrip_ns=12345
 * Ranks 2 and up do nothing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "zorilla.h"

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    int iterations = argc > 1 ? atoi(argv[1]) : 1000;
    int rank = zorilla_rank();
    if (zorilla_size() < 2) { fprintf(stderr, "pingpong: needs 2 ranks\n"); return 2; }
    int64_t payload = 0;
    int32_t src;
    if (rank == 0) {
        /* One warm-up exchange so both workers are running before timing. */
        for (int warm = 1; warm >= 0; warm--) {
            int count = warm ? 1 : iterations;
            long long start = now_ns();
            for (int i = 0; i < count; i++) {
                payload = i;
                if (zorilla_send(1, &payload, sizeof payload) < 0) return 1;
                if (zorilla_recv(&src, &payload, sizeof payload, -1) != sizeof payload) return 1;
            }
            if (!warm)
                printf("pingpong iterations=%d roundtrip_ns=%lld\n", iterations,
                       (now_ns() - start) / iterations);
        }
    } else if (rank == 1) {
        for (int i = 0; i < iterations + 1; i++) {
            if (zorilla_recv(&src, &payload, sizeof payload, -1) != sizeof payload) return 1;
            if (zorilla_send(src, &payload, sizeof payload) < 0) return 1;
        }
    }
    return 0;
}
