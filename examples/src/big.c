/* big: writes argv[1] MiB (default 1) of a fixed pattern to
 * /outputs/big.bin and says so on stdout: for tests and benchmarks of
 * large outputs. The pattern is xorshift32 from seed 1 (x ^= x << 13;
 * x ^= x >> 17; x ^= x << 5), each value as 4 little-endian bytes, so a
 * test can compute what the file must hold. Exits 3 if it cannot write. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 1;
    static uint32_t block[1 << 14]; /* 64 KiB */
    uint32_t x = 1;
    FILE *out = fopen("/outputs/big.bin", "w");
    if (!out) {
        fprintf(stderr, "big: cannot create /outputs/big.bin\n");
        return 3;
    }
    for (long i = 0; i < mib * 16; i++) {
        for (size_t j = 0; j < sizeof block / sizeof block[0]; j++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            block[j] = x;
        }
        if (fwrite(block, 1, sizeof block, out) != sizeof block) {
            fprintf(stderr, "big: writing /outputs/big.bin failed after %ld MiB: %s\n",
                    i / 16, strerror(errno));
            return 3;
        }
    }
    if (fclose(out) != 0) {
        fprintf(stderr, "big: closing /outputs/big.bin failed\n");
        return 3;
    }
    printf("big: wrote %ld MiB\n", mib);
    return 0;
}
