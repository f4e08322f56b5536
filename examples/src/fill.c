/* fill: misbehaves: writes to /outputs/fill.bin without end, to show that
 * a worker's disk limit stops it. Exits 3 if the file cannot be written. */
#include <stdio.h>
#include <string.h>

int main(void) {
    static char block[1 << 16];
    memset(block, 'z', sizeof block);
    FILE *out = fopen("/outputs/fill.bin", "w");
    if (!out) {
        fprintf(stderr, "fill: cannot create /outputs/fill.bin\n");
        return 3;
    }
    for (;;) {
        if (fwrite(block, 1, sizeof block, out) != sizeof block) return 3;
        fflush(out);
    }
}
