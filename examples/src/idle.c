/* idle: prints one line, then waits for a message that never comes, using no
 * CPU, until the job is cancelled (or its transport closes). For measuring
 * how fast a job's workers start without the workers loading the machine.
 * It waits an hour at a time, not for ever: a job whose ranks all wait for
 * ever with nothing in flight can never go on, and its home ends it. */
#include <stdio.h>
#include "zorilla.h"

int main(void) {
    printf("idle rank %d of %d\n", zorilla_rank(), zorilla_size());
    fflush(stdout);
    char buf[16];
    int32_t src;
    for (;;) {
        int32_t r = zorilla_recv(&src, buf, sizeof buf, 3600 * 1000);
        if (r == ZORILLA_ECLOSED) return 0;
    }
}
