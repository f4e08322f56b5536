/* pieces: every rank prints its lines in pieces, so that the pieces of
 * different ranks' lines reach the job's home mixed together.
 *
 * Usage: pieces [lines]   (default 3)
 *
 * For each line, every rank writes (and flushes) "rank R line K:", then
 * " first half,", then " second half\n", meeting the other ranks at a
 * barrier after each piece. Whoever shows the job's log must put each
 * rank's line back together:
 *   rank 2 line 0: first half, second half
 */
#include <stdio.h>
#include <stdlib.h>
#include "zorilla.h"

int main(int argc, char **argv) {
    int lines = argc > 1 ? atoi(argv[1]) : 3;
    int rank = zorilla_rank();
    for (int k = 0; k < lines; k++) {
        const char *pieces[3] = {"", " first half,", " second half\n"};
        for (int p = 0; p < 3; p++) {
            if (p == 0)
                printf("rank %d line %d:", rank, k);
            else
                fputs(pieces[p], stdout);
            fflush(stdout);
            if (zorilla_barrier() != ZORILLA_OK) return 1;
        }
    }
    return 0;
}
