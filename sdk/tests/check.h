/* check.h — shared by the MPI test programs (plain MPI: they build with
 * zmpicc and with OpenMPI's mpicc alike). Only rank 0 prints to stdout, so
 * a run's stdout is the same whichever MPI ran it; failures go to stderr. */
#ifndef CHECK_H
#define CHECK_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            int r_;                                                           \
            MPI_Comm_rank(MPI_COMM_WORLD, &r_);                               \
            fprintf(stderr, "rank %d: check failed at %s:%d: ", r_, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            check_failures++;                                                 \
        }                                                                     \
    } while (0)

/* Rank 0 prints a result line. */
#define SAY(...)                                                              \
    do {                                                                      \
        int r_;                                                               \
        MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                   \
        if (r_ == 0) {                                                        \
            printf(__VA_ARGS__);                                              \
            printf("\n");                                                     \
        }                                                                     \
    } while (0)

/* Sums the failures of every rank, prints OK or FAIL on rank 0, finalizes. */
static int check_finish(void)
{
    int total = 0;
    MPI_Allreduce(&check_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total)
        SAY("FAIL %d", total);
    else
        SAY("OK");
    fflush(stdout);
    MPI_Finalize();
    return total ? 1 : 0;
}

/* A deterministic pseudo-random sequence (the same under every MPI). */
static inline unsigned long long lcg_next(unsigned long long *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}
#endif
