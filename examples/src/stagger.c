/* stagger: ranks that end at different times, each leaving an output.
 *
 * Usage: stagger EARLY SECONDS. Every rank writes /outputs/rank.txt
 * ("rank R of N") and prints the same line. Ranks below EARLY then exit at
 * once; the others wait SECONDS seconds (without using the CPU) and then
 * print "rank R done" and exit. For tests of a job whose home is lost
 * after some of its ranks ended and while others still run: the outputs
 * and logs of both kinds must reach the job's next home. */
#include <stdio.h>
#include <stdlib.h>
#include "zorilla.h"

int main(int argc, char **argv) {
    int early = argc > 1 ? atoi(argv[1]) : 0;
    long seconds = argc > 2 ? atol(argv[2]) : 0;
    int rank = zorilla_rank(), size = zorilla_size();
    FILE *out = fopen("/outputs/rank.txt", "w");
    if (!out) {
        fprintf(stderr, "stagger: cannot create /outputs/rank.txt\n");
        return 3;
    }
    fprintf(out, "rank %d of %d\n", rank, size);
    fclose(out);
    printf("rank %d of %d\n", rank, size);
    fflush(stdout);
    if (rank < early) return 0;
    /* Waits for a message nobody sends: the time passes without CPU. */
    char buf[16];
    int32_t src;
    int32_t r = zorilla_recv(&src, buf, sizeof buf, seconds * 1000);
    if (r != ZORILLA_ETIMEDOUT && r != ZORILLA_EMEMBERSHIP) {
        fprintf(stderr, "stagger: unexpected receive: %d\n", (int)r);
        return 4;
    }
    printf("rank %d done\n", rank);
    return 0;
}
