/* bomb (misbehaving): allocates and touches memory 1 MiB at a time, for ever.
 * A sandbox must end it at the worker's memory limit. The pointer is stored
 * in a volatile so the compiler cannot delete the allocations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

int main(void) {
    size_t mib = 0;
    for (;;) {
        char *p = malloc(1 << 20);
        if (!p) {
            printf("bomb: malloc returned NULL after %zu MiB\n", mib);
            return 3;
        }
        memset(p, 0xA5, 1 << 20);
        sink = p;
        mib++;
    }
}
