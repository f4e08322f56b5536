/* detcheck: prints, and writes to /outputs/det.txt, everything a worker
 * sees that a deterministic worker must see the same on every node and in
 * every run: random bytes, both clocks, the bits of NaNs that float
 * operations make, and a float computation.
 *
 * On the default engine the random bytes and clocks change from run to run
 * and the NaN bits are the CPU's (on x86_64, 0/0 gives fff8000000000000 and
 * an operation on a NaN keeps its payload); on the deterministic engine
 * every line depends only on the job's seed and the rank, and every NaN is
 * 7ff8000000000000 (7fc00000 in single precision).
 * Exits 3 if the output cannot be written. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zorilla.h"

static uint64_t bits64(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint32_t bits32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void line(FILE *a, FILE *b, const char *text) {
    fputs(text, a);
    if (b) fputs(text, b);
}

int main(void) {
    FILE *out = fopen("/outputs/det.txt", "w");
    if (!out) fprintf(stderr, "detcheck: cannot create /outputs/det.txt\n");
    char text[256];

    snprintf(text, sizeof text, "rank %d of %d\n", (int)zorilla_rank(), (int)zorilla_size());
    line(stdout, out, text);

    unsigned char random[16];
    if (getentropy(random, sizeof random) != 0) memset(random, 0, sizeof random);
    int n = snprintf(text, sizeof text, "random ");
    for (size_t i = 0; i < sizeof random; i++) n += snprintf(text + n, sizeof text - n, "%02x", random[i]);
    snprintf(text + n, sizeof text - n, "\n");
    line(stdout, out, text);

    struct timespec wall, mono1, mono2;
    clock_gettime(CLOCK_REALTIME, &wall);
    clock_gettime(CLOCK_MONOTONIC, &mono1);
    clock_gettime(CLOCK_MONOTONIC, &mono2);
    snprintf(text, sizeof text, "wall %lld.%09ld\nmonotonic %lld.%09ld then %lld.%09ld\n",
             (long long)wall.tv_sec, wall.tv_nsec, (long long)mono1.tv_sec, mono1.tv_nsec,
             (long long)mono2.tv_sec, mono2.tv_nsec);
    line(stdout, out, text);

    /* volatile: computed by the engine at run time, not by the compiler. */
    volatile double zero = 0.0, one = 1.0;
    volatile float zerof = 0.0f;
    volatile uint64_t payload = 0x7ff4000000000001ull;
    double signalling;
    memcpy(&signalling, (const void *)&payload, sizeof signalling);
    volatile double carried = signalling;
    snprintf(text, sizeof text,
             "nan 0/0 %016llx\nnan sqrt(-1) %016llx\nnan payload+1 %016llx\nnan f32 0/0 %08lx\n",
             (unsigned long long)bits64(zero / zero),
             (unsigned long long)bits64(sqrt(zero - one)),
             (unsigned long long)bits64(carried + one),
             (unsigned long)bits32(zerof / zerof));
    line(stdout, out, text);

    double sum = 0.0;
    for (int i = 0; i < 100000; i++) sum += sin(i * 0.001) * exp(-i * 1e-5);
    snprintf(text, sizeof text, "sum %a\n", sum);
    line(stdout, out, text);

    if (!out || fclose(out) != 0) return 3;
    return 0;
}
