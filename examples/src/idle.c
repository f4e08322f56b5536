/* idle: prints one line, then waits for a message that never comes, using no
 * CPU, until the job is cancelled (or its transport closes). For measuring
 * how fast a job's workers start without the workers loading the machine. */
#include <stdio.h>
#include "zorilla.h"

int main(void) {
    printf("idle rank %d of %d\n", zorilla_rank(), zorilla_size());
    fflush(stdout);
    char buf[16];
    int32_t src;
    for (;;) {
        int32_t r = zorilla_recv(&src, buf, sizeof buf, -1);
        if (r == ZORILLA_ECLOSED) return 0;
    }
}
