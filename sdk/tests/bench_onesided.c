/* Benchmark of one-sided communication with fence synchronisation, what
 * osu_put_latency, osu_get_latency, osu_put_bw and osu_get_bw time:
 *   bench_onesided put|get BYTES ITERATIONS WINDOW
 * on 2 ranks (others only take part in the fences). Every epoch rank 0
 * issues WINDOW MPI_Put (or MPI_Get) of BYTES bytes each to (from)
 * consecutive places of rank 1's window (MPI_Win_allocate), then every
 * rank calls MPI_Win_fence. After 3 warm-up epochs, rank 0 prints
 * "put_usec T" (get_usec): the mean time of an epoch in microseconds, and
 * "put_mbs B" (get_mbs): the bytes moved per second, in MB/s. WINDOW 1
 * measures the latency of one operation and its fence, a large WINDOW the
 * bandwidth. The data moved is checked once at the end ("onesided_check
 * FAIL" if it is wrong). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(long k, int who) { return (unsigned char)(k * 13 + who * 101 + 1); }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *what = argc > 1 ? argv[1] : "put";
    long bytes = argc > 2 ? atol(argv[2]) : 8;
    int iters = argc > 3 ? atoi(argv[3]) : 100;
    int window = argc > 4 ? atoi(argv[4]) : 1;
    int put = strcmp(what, "put") == 0;
    if (size < 2 || bytes < 1 || iters < 1 || window < 1 || (!put && strcmp(what, "get") != 0)) {
        if (rank == 0)
            fprintf(stderr, "usage: bench_onesided put|get BYTES ITERATIONS WINDOW, on 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    long span = bytes * window;
    unsigned char *local = malloc(span), *exposed;
    MPI_Win win;
    MPI_Win_allocate(span, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &exposed, &win);
    /* Rank 0's origin buffer and rank 1's window hold distinct patterns:
     * a put carries rank 0's into the window, a get rank 1's out of it. */
    for (long k = 0; k < span; k++) {
        local[k] = rank == 0 ? pattern(k, 0) : 0;
        exposed[k] = rank == 1 ? pattern(k, 1) : 0;
    }
    MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
    double t0 = 0;
    for (int i = -3; i < iters; i++) {
        if (i == 0)
            t0 = MPI_Wtime();
        if (rank == 0)
            for (int j = 0; j < window; j++) {
                if (put)
                    MPI_Put(local + j * bytes, (int)bytes, MPI_BYTE, 1, j * bytes, (int)bytes,
                            MPI_BYTE, win);
                else
                    MPI_Get(local + j * bytes, (int)bytes, MPI_BYTE, 1, j * bytes, (int)bytes,
                            MPI_BYTE, win);
            }
        MPI_Win_fence(0, win);
    }
    double t = MPI_Wtime() - t0;
    int bad = 0;
    if (put && rank == 1)
        for (long k = 0; k < span; k++)
            bad |= exposed[k] != pattern(k, 0);
    if (!put && rank == 0)
        for (long k = 0; k < span; k++)
            bad |= local[k] != pattern(k, 1);
    int any_bad = 0;
    MPI_Reduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (any_bad)
            printf("onesided_check FAIL\n");
        printf("%s_usec %.2f\n", what, t / iters * 1e6);
        printf("%s_mbs %.1f\n", what, (double)span * iters / t / 1e6);
    }
    MPI_Win_free(&win);
    free(local);
    MPI_Finalize();
    return 0;
}
