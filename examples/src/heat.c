/* heat: a checkpointing iterative stencil. Every rank relaxes its own 1-D
 * rod of CELLS cells for ITERATIONS steps (an integer heat equation: each
 * inner cell becomes (left + 2 * itself + right) / 4, the two ends are held
 * fixed), and hands its iteration and grid to the node as a checkpoint
 * every EVERY steps. A fresh worker that replaces a lost rank loads that
 * checkpoint and carries on from there instead of from the start.
 *
 * Usage: heat [CELLS] [ITERATIONS] [EVERY] [PAUSE_US]   (defaults 4096 1000 100 0)
 *
 * PAUSE_US: microseconds to sleep after each step (0: none), so that tests
 * can make a run last seconds without using CPU time.
 *
 * The ranks do not talk to each other, so a rank that rolls back to its
 * checkpoint never disagrees with the others (no coordinated rollback is
 * needed). Integer arithmetic makes the result exact and independent of
 * where and how often the rank was restarted. Each rank prints:
 *   heat rank=R start=I            (I: 0, or the checkpoint's iteration)
 *   heat rank=R checkpoint=I copies=C
 *   heat rank=R done iterations=N computed=K checksum=XXXXXXXXXXXXXXXX
 * where K is the number of steps this worker computed itself and the
 * checksum is sum over i of grid[i] * (i + 1), modulo 2^64.
 *
 * The initial grid: grid[i] = ((i * 2654435761 + rank * 40503) mod 1000003)
 * * 65536 (64-bit arithmetic). Exits 0, or 1 on a bad argument or a
 * checkpoint that cannot be read (one that cannot be stored is reported on
 * stderr, and the previous one stays). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "zorilla.h"

#define MAGIC 0x48454154u /* "HEAT" */

/* The checkpoint: a header, then the grid. */
struct header {
    uint32_t magic;
    uint32_t cells;
    uint64_t iteration;
};

static void step(const uint64_t *from, uint64_t *to, uint32_t cells)
{
    to[0] = from[0];
    to[cells - 1] = from[cells - 1];
    for (uint32_t i = 1; i + 1 < cells; i++)
        to[i] = (from[i - 1] + 2 * from[i] + from[i + 1]) >> 2;
}

static uint64_t checksum(const uint64_t *grid, uint32_t cells)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < cells; i++)
        sum += grid[i] * (uint64_t)(i + 1);
    return sum;
}

int main(int argc, char **argv)
{
    long cells = argc > 1 ? atol(argv[1]) : 4096;
    long long iterations = argc > 2 ? atoll(argv[2]) : 1000;
    long long every = argc > 3 ? atoll(argv[3]) : 100;
    long pause_us = argc > 4 ? atol(argv[4]) : 0;
    if (cells < 3 || cells > (ZORILLA_MAX_CHECKPOINT - (long)sizeof(struct header)) / 8 ||
        iterations < 0 || every < 1 || pause_us < 0 || pause_us > 1000000) {
        fprintf(stderr, "usage: heat [CELLS 3..] [ITERATIONS >= 0] [EVERY >= 1] [PAUSE_US 0..1000000]\n");
        return 1;
    }
    int rank = zorilla_rank();
    size_t bytes = sizeof(struct header) + (size_t)cells * 8;
    unsigned char *state = malloc(bytes);
    uint64_t *other = malloc((size_t)cells * 8);
    if (!state || !other) {
        fprintf(stderr, "heat: out of memory\n");
        return 1;
    }
    struct header *h = (struct header *)state;
    uint64_t *grid = (uint64_t *)(state + sizeof *h);

    int32_t size = zorilla_checkpoint_size();
    int resumed = 0;
    if (size >= 0) {
        int32_t got = zorilla_checkpoint_load(state, (uint32_t)bytes);
        if (got != (int32_t)bytes || h->magic != MAGIC || h->cells != (uint32_t)cells ||
            h->iteration > (uint64_t)iterations) {
            fprintf(stderr, "heat rank=%d: the checkpoint (%d bytes) is not this run's\n", rank,
                    (int)got);
            return 1;
        }
        resumed = 1;
    } else if (size != ZORILLA_ENOCHECKPOINT && size != ZORILLA_ENOTSUP) {
        fprintf(stderr, "heat rank=%d: cannot read the checkpoint (%d)\n", rank, (int)size);
        return 1;
    }
    if (!resumed) {
        h->magic = MAGIC;
        h->cells = (uint32_t)cells;
        h->iteration = 0;
        for (long i = 0; i < cells; i++)
            grid[i] = (((uint64_t)i * 2654435761u + (uint64_t)rank * 40503u) % 1000003u) << 16;
    }
    printf("heat rank=%d start=%llu\n", rank, (unsigned long long)h->iteration);
    fflush(stdout);

    int checkpoints = size != ZORILLA_ENOTSUP;
    unsigned long long computed = 0;
    while (h->iteration < (uint64_t)iterations) {
        step(grid, other, (uint32_t)cells);
        memcpy(grid, other, (size_t)cells * 8);
        h->iteration++;
        computed++;
        if (pause_us > 0)
            usleep((useconds_t)pause_us);
        if (checkpoints && h->iteration % (uint64_t)every == 0 &&
            h->iteration < (uint64_t)iterations) {
            int32_t copies = zorilla_checkpoint_save(state, (uint32_t)bytes);
            if (copies == ZORILLA_ENOTSUP) {
                checkpoints = 0;
            } else if (copies < 0) {
                /* The previous checkpoint stays; carry on. */
                fprintf(stderr, "heat rank=%d: checkpoint=%llu failed (%d)\n", rank,
                        (unsigned long long)h->iteration, (int)copies);
            } else {
                printf("heat rank=%d checkpoint=%llu copies=%d\n", rank,
                       (unsigned long long)h->iteration, (int)copies);
                fflush(stdout);
            }
        }
    }
    printf("heat rank=%d done iterations=%llu computed=%llu checksum=%016llx\n", rank,
           (unsigned long long)h->iteration, computed,
           (unsigned long long)checksum(grid, (uint32_t)cells));
    return 0;
}
