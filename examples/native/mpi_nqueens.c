/* A compute-bound MPI program: the solutions of the N-Queens problem,
 * counted by all ranks (the placements of the first two rows dealt out in
 * turn) and summed on rank 0 with MPI_Reduce. Built unchanged with the
 * distribution's MPI (mpicc.mpich or mpicc.openmpi) for native jobs and
 * the MPI's own launcher, and with sdk/bin/zmpicc for WebAssembly jobs;
 * node/benches/native_mpi.rs runs it all three ways.
 *
 * Usage: mpi_nqueens [N]   (default 15, 4 <= N <= 20)
 * Rank 0 prints the count and the time from the first barrier after
 * MPI_Init to the end of the reduction:
 *   solutions 2279184
 *   compute_s 1.234 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int n;
static uint32_t all;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Bitmask backtracking from `row` with the columns and diagonals taken. */
static int64_t solve(int row, uint32_t cols, uint32_t ld, uint32_t rd) {
    if (row == n) return 1;
    int64_t count = 0;
    uint32_t free = all & ~(cols | ld | rd);
    while (free) {
        uint32_t bit = free & -free;
        free ^= bit;
        count += solve(row + 1, cols | bit, ((ld | bit) << 1) & all, (rd | bit) >> 1);
    }
    return count;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    n = argc > 1 ? atoi(argv[1]) : 15;
    if (n < 4 || n > 20) {
        if (rank == 0) fprintf(stderr, "N must be 4 to 20\n");
        MPI_Finalize();
        return 2;
    }
    all = (1u << n) - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t = now();
    /* Task k: the first queen in column k / n, the second in column
     * k % n; the tasks that attack each other count nothing. */
    int64_t mine = 0;
    for (int k = rank; k < n * n; k += size) {
        uint32_t a = 1u << (k / n), b = 1u << (k % n);
        uint32_t ld = (a << 1) & all, rd = a >> 1;
        if (b & (a | ld | rd)) continue;
        mine += solve(2, a | b, ((ld | b) << 1) & all, (rd | b) >> 1);
    }
    long long total = 0, part = (long long)mine;
    MPI_Reduce(&part, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    double seconds = now() - t;
    if (rank == 0) printf("solutions %lld\ncompute_s %.3f\n", total, seconds);
    MPI_Finalize();
    return 0;
}
