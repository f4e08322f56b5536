/* halo: a checkpointing iterative stencil whose ranks exchange boundaries
 * every step, for coordinated rollback (the LBG-SQUARE case). The ranks
 * share one 1-D rod of SIZE * CELLS cells, CELLS each in rank order, and
 * relax it for ITERATIONS steps with an integer heat equation (each inner
 * cell becomes (left + 2 * itself + right) / 4; the rod's two ends are
 * held fixed). Every step, each rank sends its first and last cells to its
 * neighbours and receives theirs. Every EVERY steps all ranks meet at a
 * barrier and save their part under the same checkpoint generation
 * (iteration / EVERY): so every generation describes one state of the
 * whole rod, and a job that lost a rank can restart every rank from the
 * latest generation all of them hold (on_worker_lost = "rollback").
 *
 * Usage: halo [CELLS] [ITERATIONS] [EVERY] [PAUSE_US]   (defaults 1024 1000 100 0)
 *
 * PAUSE_US: microseconds to sleep after each step (0: none), so that tests
 * can make a run last seconds without using CPU time.
 *
 * Integer arithmetic makes the result exact and independent of where and
 * how often the job rolled back. Each rank prints:
 *   halo rank=R start=I generation=G   (I: 0, or the checkpoint's iteration G * EVERY)
 *   halo rank=R at=I                   (every EVERY / 10 steps, at least every step)
 *   halo rank=R checkpoint=I generation=G copies=C
 *   halo rank=R done iterations=N computed=K checksum=XXXXXXXXXXXXXXXX
 * where the `at` lines show how far a worker got before it was lost or
 * stopped, K is the number of steps this worker computed itself and the
 * checksum is sum over its cells of cell * (global index + 1), modulo 2^64.
 *
 * The initial rod: cell[i] = ((i * 2654435761) mod 1000003) * 65536 for the
 * global index i (64-bit arithmetic). Exits 0, or 1 on a bad argument, a
 * checkpoint that is not this run's, or a transport error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "zorilla.h"

#define MAGIC 0x48414c4fu /* "HALO" */

/* The checkpoint: a header, then the rank's cells. */
struct header {
    uint32_t magic;
    uint32_t cells;
    uint64_t iteration;
};

/* A boundary cell sent to a neighbour: the step it is for, and its value. */
struct halo {
    uint64_t step;
    uint64_t value;
};

/* A neighbour may be one step ahead of this rank (it needs this rank's
 * cell of the step before to go further): its message for the next step
 * waits here. */
struct side {
    int rank; /* -1: no neighbour on this side */
    int early; /* a message for the next step is waiting */
    struct halo next;
};

static int fail(int rank, const char *what, int code)
{
    fprintf(stderr, "halo rank=%d: %s (%d)\n", rank, what, code);
    return 1;
}

/* Receives the boundaries of step `step` from both neighbours. */
static int exchange(int rank, struct side sides[2], uint64_t step, uint64_t first, uint64_t last,
                    uint64_t got[2])
{
    struct halo out[2] = {{step, first}, {step, last}};
    for (int s = 0; s < 2; s++) {
        if (sides[s].rank < 0)
            continue;
        int32_t sent = zorilla_send(sides[s].rank, &out[s], sizeof out[s]);
        if (sent != ZORILLA_OK)
            return fail(rank, "send", sent);
    }
    int need[2] = {sides[0].rank >= 0, sides[1].rank >= 0};
    for (int s = 0; s < 2; s++) {
        if (need[s] && sides[s].early) {
            got[s] = sides[s].next.value;
            sides[s].early = 0;
            need[s] = 0;
        }
    }
    while (need[0] || need[1]) {
        struct halo in;
        int32_t source = -1;
        int32_t n = zorilla_recv(&source, &in, sizeof in, -1);
        if (n != (int32_t)sizeof in)
            return fail(rank, "recv", n);
        int s = source == sides[0].rank ? 0 : source == sides[1].rank ? 1 : -1;
        if (s < 0)
            return fail(rank, "a message from a rank that is no neighbour", source);
        if (in.step == step && need[s]) {
            got[s] = in.value;
            need[s] = 0;
        } else if (in.step == step + 1 && !sides[s].early) {
            sides[s].next = in;
            sides[s].early = 1;
        } else {
            return fail(rank, "a boundary of an unexpected step", (int)in.step);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    long cells = argc > 1 ? atol(argv[1]) : 1024;
    long long iterations = argc > 2 ? atoll(argv[2]) : 1000;
    long long every = argc > 3 ? atoll(argv[3]) : 100;
    long pause_us = argc > 4 ? atol(argv[4]) : 0;
    if (cells < 1 || cells > (ZORILLA_MAX_CHECKPOINT - (long)sizeof(struct header)) / 8 ||
        iterations < 0 || every < 1 || pause_us < 0 || pause_us > 1000000) {
        fprintf(stderr, "usage: halo [CELLS 1..] [ITERATIONS >= 0] [EVERY >= 1] [PAUSE_US 0..1000000]\n");
        return 1;
    }
    int rank = zorilla_rank();
    int size = zorilla_size();
    uint64_t total = (uint64_t)size * (uint64_t)cells;
    uint64_t base = (uint64_t)rank * (uint64_t)cells;
    size_t bytes = sizeof(struct header) + (size_t)cells * 8;
    unsigned char *state = malloc(bytes);
    uint64_t *other = malloc((size_t)cells * 8);
    if (!state || !other)
        return fail(rank, "out of memory", 0);
    struct header *h = (struct header *)state;
    uint64_t *grid = (uint64_t *)(state + sizeof *h);

    int64_t generation = zorilla_checkpoint_generation();
    if (generation > 0) {
        int32_t got = zorilla_checkpoint_load(state, (uint32_t)bytes);
        if (got != (int32_t)bytes || h->magic != MAGIC || h->cells != (uint32_t)cells ||
            h->iteration != (uint64_t)generation * (uint64_t)every ||
            h->iteration > (uint64_t)iterations)
            return fail(rank, "the checkpoint is not this run's", (int)got);
    } else if (generation != 0 && generation != ZORILLA_ENOCHECKPOINT &&
               generation != ZORILLA_ENOTSUP) {
        return fail(rank, "cannot read the checkpoint", (int)generation);
    } else {
        generation = 0;
        h->magic = MAGIC;
        h->cells = (uint32_t)cells;
        h->iteration = 0;
        for (long i = 0; i < cells; i++)
            grid[i] = (((base + (uint64_t)i) * 2654435761u) % 1000003u) << 16;
    }
    printf("halo rank=%d start=%llu generation=%lld\n", rank, (unsigned long long)h->iteration,
           (long long)generation);
    fflush(stdout);

    struct side sides[2] = {{rank > 0 ? rank - 1 : -1, 0, {0, 0}},
                            {rank + 1 < size ? rank + 1 : -1, 0, {0, 0}}};
    int checkpoints = 1;
    uint64_t report = (uint64_t)every / 10 > 0 ? (uint64_t)every / 10 : 1;
    unsigned long long computed = 0;
    while (h->iteration < (uint64_t)iterations) {
        uint64_t got[2] = {0, 0};
        if (exchange(rank, sides, h->iteration, grid[0], grid[cells - 1], got))
            return 1;
        for (long i = 0; i < cells; i++) {
            uint64_t g = base + (uint64_t)i;
            if (g == 0 || g + 1 == total) {
                other[i] = grid[i];
                continue;
            }
            uint64_t left = i > 0 ? grid[i - 1] : got[0];
            uint64_t right = i + 1 < cells ? grid[i + 1] : got[1];
            other[i] = (left + 2 * grid[i] + right) >> 2;
        }
        memcpy(grid, other, (size_t)cells * 8);
        h->iteration++;
        computed++;
        if (pause_us > 0)
            usleep((useconds_t)pause_us);
        if (h->iteration % report == 0) {
            printf("halo rank=%d at=%llu\n", rank, (unsigned long long)h->iteration);
            fflush(stdout);
        }
        if (checkpoints && h->iteration % (uint64_t)every == 0 &&
            h->iteration < (uint64_t)iterations) {
            /* Every rank saved the generation before before any saves this
             * one: a generation all ranks hold always exists. */
            int32_t met = zorilla_barrier();
            if (met != ZORILLA_OK)
                return fail(rank, "barrier", met);
            int64_t g = (int64_t)(h->iteration / (uint64_t)every);
            int32_t copies = zorilla_checkpoint_save_generation(g, state, (uint32_t)bytes);
            if (copies == ZORILLA_ENOTSUP) {
                checkpoints = 0;
            } else if (copies < 0) {
                fprintf(stderr, "halo rank=%d: checkpoint=%llu failed (%d)\n", rank,
                        (unsigned long long)h->iteration, (int)copies);
            } else {
                printf("halo rank=%d checkpoint=%llu generation=%lld copies=%d\n", rank,
                       (unsigned long long)h->iteration, (long long)g, (int)copies);
                fflush(stdout);
            }
        }
    }
    uint64_t sum = 0;
    for (long i = 0; i < cells; i++)
        sum += grid[i] * (base + (uint64_t)i + 1);
    printf("halo rank=%d done iterations=%llu computed=%llu checksum=%016llx\n", rank,
           (unsigned long long)h->iteration, computed, (unsigned long long)sum);
    return 0;
}
