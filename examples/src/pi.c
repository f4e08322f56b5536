/* pi: embarrassingly parallel Monte Carlo estimate of pi.
 *
 * Usage: pi [samples-per-rank]   (default 1000000)
 *
 * Every rank throws darts at the unit square with its own seeded generator
 * (so a run is reproducible), then the hit counts are summed up a binary tree
 * of messages to rank 0, which prints:
 *   pi ranks=4 samples=4000000 hits=3141... estimate=3.14...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "zorilla.h"

static uint64_t state;

/* xorshift64*: small, fast, good enough for darts. */
static uint64_t next_random(void) {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 2685821657736338717ULL;
}

int main(int argc, char **argv) {
    long long samples = argc > 1 ? atoll(argv[1]) : 1000000;
    if (samples < 1) { fprintf(stderr, "pi: samples must be positive\n"); return 2; }
    int rank = zorilla_rank(), size = zorilla_size();
    state = 0x9E3779B97F4A7C15ULL * (uint64_t)(rank + 1);

    int64_t hits = 0;
    for (long long i = 0; i < samples; i++) {
        double x = (next_random() >> 11) * 0x1.0p-53;
        double y = (next_random() >> 11) * 0x1.0p-53;
        hits += x * x + y * y <= 1.0;
    }

    int children = (2 * rank + 1 < size) + (2 * rank + 2 < size);
    for (int i = 0; i < children; i++) {
        int64_t part;
        int32_t src;
        int32_t r = zorilla_recv(&src, &part, sizeof part, -1);
        if (r != (int32_t)sizeof part) { fprintf(stderr, "pi: recv failed: %d\n", r); return 1; }
        hits += part;
    }
    if (rank > 0) {
        int32_t r = zorilla_send((rank - 1) / 2, &hits, sizeof hits);
        if (r < 0) { fprintf(stderr, "pi: send failed: %d\n", r); return 1; }
    } else {
        long long total = samples * size;
        printf("pi ranks=%d samples=%lld hits=%lld estimate=%.6f\n", size, total,
               (long long)hits, 4.0 * (double)hits / (double)total);
    }
    return 0;
}
