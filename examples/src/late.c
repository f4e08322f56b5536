/* late: rank 1 sends rank 0 one number and ends; rank 0 first waits
 * SECONDS seconds (sleeping, without using the CPU), then receives it and
 * prints
 *   late got 42 from rank 1
 *
 * Usage: late SECONDS. With two ranks and on_worker_lost = "replace", a
 * rank 0 lost after rank 1 ended is replaced by a fresh worker that waits
 * for a message sent to the worker it replaced: it can never come, and the
 * job's home must end the job with a sentence rather than let it hang
 * (node/tests/stall.rs). Ranks 2 and up end at once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "zorilla.h"

int main(int argc, char **argv) {
    long seconds = argc > 1 ? atol(argv[1]) : 0;
    int rank = zorilla_rank();
    if (zorilla_size() < 2) { fprintf(stderr, "late: needs 2 ranks\n"); return 2; }
    int64_t number = 42;
    int32_t src;
    if (rank == 1) {
        if (zorilla_send(0, &number, sizeof number) < 0) { fprintf(stderr, "late: send failed\n"); return 1; }
        printf("late sent %lld to rank 0\n", (long long)number);
    } else if (rank == 0) {
        printf("late rank 0 waits %ld s\n", seconds);
        fflush(stdout);
        /* Sleeps rather than waits in a receive: rank 1's number stays
         * unread meanwhile. */
        for (long s = 0; s < seconds; s++)
            usleep(1000000);
        int32_t r = zorilla_recv(&src, &number, sizeof number, -1);
        if (r != (int32_t)sizeof number) { fprintf(stderr, "late: recv failed: %d\n", (int)r); return 1; }
        printf("late got %lld from rank %d\n", (long long)number, (int)src);
    }
    return 0;
}
