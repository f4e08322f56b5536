/* Benchmark of the collectives the OSU Micro-Benchmarks time:
 *   bench_coll allreduce BYTES ITERATIONS
 *       MPI_Allreduce(SUM) of a vector of doubles, called back to back.
 *       Rank 0 prints "allreduce_usec T": the mean time per call, in
 *       microseconds, of the slowest rank, after 3 warm-up calls.
 *   bench_coll bcast BYTES ITERATIONS
 *       MPI_Bcast of BYTES bytes from rank 0, timed as osu_bcast times it:
 *       each call alone, a barrier after it (so that the root cannot run
 *       ahead). Rank 0 prints "bcast_usec T": the mean over the ranks of
 *       their mean time per call (osu_bcast's "Avg Latency"), after 10
 *       warm-up calls. One more call, untimed, checks that every rank gets
 *       the root's bytes ("bcast_check FAIL" if one did not). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double allreduce(long bytes, int iters, int rank)
{
    int n = bytes / 8 > 0 ? (int)(bytes / 8) : 1;
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
    free(in);
    free(out);
    return slowest;
}

static double bcast(long bytes, int iters, int rank, int size)
{
    long n = bytes > 0 ? bytes : 1;
    unsigned char *buf = calloc(n, 1);
    double total = 0;
    /* Timed as osu_bcast times it: the call alone, then a barrier. */
    for (int i = -10; i < iters; i++) {
        double t0 = MPI_Wtime();
        MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;
        if (i >= 0)
            total += t;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* Then one more, untimed, that must carry the root's bytes. */
    for (long k = 0; k < n; k++)
        buf[k] = rank == 0 ? (unsigned char)(k * 7 + 1) : 0;
    MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    int bad = 0, any_bad = 0;
    for (long k = 0; k < n; k++)
        bad |= buf[k] != (unsigned char)(k * 7 + 1);
    double mean = total / (iters > 0 ? iters : 1), sum = 0;
    MPI_Reduce(&mean, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0 && any_bad)
        printf("bcast_check FAIL\n");
    free(buf);
    return sum / size;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const char *what = argc > 1 ? argv[1] : "allreduce";
    long bytes = argc > 2 ? atol(argv[2]) : 8;
    int iters = argc > 3 ? atoi(argv[3]) : 100;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double t;
    if (strcmp(what, "bcast") == 0)
        t = bcast(bytes, iters, rank, size);
    else if (strcmp(what, "allreduce") == 0)
        t = allreduce(bytes, iters, rank);
    else {
        if (rank == 0)
            fprintf(stderr, "usage: bench_coll allreduce|bcast BYTES ITERATIONS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    if (rank == 0)
        printf("%s_usec %.2f\n", what, t * 1e6);
    MPI_Finalize();
    return 0;
}
