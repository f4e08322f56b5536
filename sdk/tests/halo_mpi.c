/* halo_mpi: examples/src/halo.c written with MPI and Zorilla's collective
 * checkpoint calls (ZMPI_Checkpoint_*), for the coordinated rollback of an
 * MPI job (on_worker_lost = "rollback"). The same rod, the same integer
 * heat equation, the same output lines and checksums as halo, so that the
 * node's rollback test checks both alike:
 *   halo rank=R start=I generation=G
 *   halo rank=R at=I
 *   halo rank=R checkpoint=I generation=G copies=C
 *   halo rank=R done iterations=N computed=K checksum=XXXXXXXXXXXXXXXX
 * Boundaries go by MPI_Sendrecv (MPI_PROC_NULL past the rod's ends); every
 * EVERY steps ZMPI_Checkpoint_save, which is collective (a barrier, then
 * every rank saves under the same generation: iteration / EVERY, since a
 * run starts at iteration 0 or at a generation's).
 *
 * Usage: halo_mpi [CELLS] [ITERATIONS] [EVERY] [PAUSE_US]   (defaults 1024 1000 100 0)
 * Exits 0, or 1 on a bad argument or a checkpoint that is not this run's
 * (MPI errors abort the job). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAGIC 0x48414c4fu /* "HALO" */
#define MAX_CELLS (1 << 20)

struct header {
    uint32_t magic;
    uint32_t cells;
    uint64_t iteration;
};

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long cells = argc > 1 ? atol(argv[1]) : 1024;
    long long iterations = argc > 2 ? atoll(argv[2]) : 1000;
    long long every = argc > 3 ? atoll(argv[3]) : 100;
    long pause_us = argc > 4 ? atol(argv[4]) : 0;
    if (cells < 1 || cells > MAX_CELLS || iterations < 0 || every < 1 || pause_us < 0 ||
        pause_us > 1000000) {
        fprintf(stderr, "usage: halo_mpi [CELLS 1..] [ITERATIONS >= 0] [EVERY >= 1] [PAUSE_US 0..1000000]\n");
        MPI_Finalize();
        return 1;
    }
    uint64_t total = (uint64_t)size * (uint64_t)cells;
    uint64_t base = (uint64_t)rank * (uint64_t)cells;
    int bytes = (int)(sizeof(struct header) + (size_t)cells * 8);
    unsigned char *state = malloc((size_t)bytes);
    uint64_t *other = malloc((size_t)cells * 8);
    if (!state || !other) {
        fprintf(stderr, "halo rank=%d: out of memory\n", rank);
        return 1;
    }
    struct header *h = (struct header *)state;
    uint64_t *grid = (uint64_t *)(state + sizeof *h);

    int held = 0, flag = 0;
    MPI_Status st;
    ZMPI_Checkpoint_size(&held, &flag);
    if (flag) {
        int got = 0;
        ZMPI_Checkpoint_load(state, bytes, &got, &flag);
        if (got != bytes || h->magic != MAGIC || h->cells != (uint32_t)cells ||
            h->iteration % (uint64_t)every != 0 || h->iteration > (uint64_t)iterations) {
            fprintf(stderr, "halo rank=%d: the checkpoint is not this run's (%d bytes)\n", rank, got);
            return 1;
        }
    } else {
        h->magic = MAGIC;
        h->cells = (uint32_t)cells;
        h->iteration = 0;
        for (long i = 0; i < cells; i++)
            grid[i] = (((base + (uint64_t)i) * 2654435761u) % 1000003u) << 16;
    }
    printf("halo rank=%d start=%llu generation=%lld\n", rank, (unsigned long long)h->iteration,
           (long long)(h->iteration / (uint64_t)every));
    fflush(stdout);

    int left = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    int right = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
    uint64_t report = (uint64_t)every / 10 > 0 ? (uint64_t)every / 10 : 1;
    unsigned long long computed = 0;
    while (h->iteration < (uint64_t)iterations) {
        uint64_t got[2] = {0, 0};
        /* My first cell goes left while the right neighbour's first comes
         * in; then my last goes right while the left one's last comes in. */
        MPI_Sendrecv(&grid[0], 1, MPI_UINT64_T, left, 0, &got[1], 1, MPI_UINT64_T, right, 0,
                     MPI_COMM_WORLD, &st);
        MPI_Sendrecv(&grid[cells - 1], 1, MPI_UINT64_T, right, 1, &got[0], 1, MPI_UINT64_T, left,
                     1, MPI_COMM_WORLD, &st);
        for (long i = 0; i < cells; i++) {
            uint64_t g = base + (uint64_t)i;
            if (g == 0 || g + 1 == total) {
                other[i] = grid[i];
                continue;
            }
            uint64_t l = i > 0 ? grid[i - 1] : got[0];
            uint64_t r = i + 1 < cells ? grid[i + 1] : got[1];
            other[i] = (l + 2 * grid[i] + r) >> 2;
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
        if (h->iteration % (uint64_t)every == 0 && h->iteration < (uint64_t)iterations) {
            int copies = 0;
            ZMPI_Checkpoint_save(state, bytes, &copies);
            printf("halo rank=%d checkpoint=%llu generation=%lld copies=%d\n", rank,
                   (unsigned long long)h->iteration,
                   (long long)(h->iteration / (uint64_t)every), copies);
            fflush(stdout);
        }
    }
    uint64_t sum = 0;
    for (long i = 0; i < cells; i++)
        sum += grid[i] * (base + (uint64_t)i + 1);
    printf("halo rank=%d done iterations=%llu computed=%llu checksum=%016llx\n", rank,
           (unsigned long long)h->iteration, computed, (unsigned long long)sum);
    MPI_Finalize();
    return 0;
}
