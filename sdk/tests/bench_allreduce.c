/* Benchmark: MPI_Allreduce(SUM) of a vector of doubles.
 *   bench_allreduce BYTES ITERATIONS
 * Rank 0 prints "allreduce_usec T": the mean time per call, in
 * microseconds, of the slowest rank, after 3 warm-up calls. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    long bytes = argc > 1 ? atol(argv[1]) : 8;
    int iters = argc > 2 ? atoi(argv[2]) : 100;
    int n = bytes / 8 > 0 ? (int)(bytes / 8) : 1, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
    for (int i = 0; i < n; i++)
        in[i] = rank + i;
    for (int i = 0; i < 3; i++)
        MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters, slowest = 0;
    MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("allreduce_usec %.2f\n", slowest * 1e6);
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
