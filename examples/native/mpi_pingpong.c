/* A native MPI ping-pong between ranks 0 and 1, built with the
 * distribution's MPICH (mpicc.mpich -O2 mpi_pingpong.c -o mpi_pingpong) or
 * Open MPI (mpicc.openmpi).
 * Rank 0 prints how long MPI_Init took, the mean round trip of 8-byte
 * messages (half of it: the one-way latency, as OSU's osu_latency reports
 * it) and the bandwidth of 1 MiB messages sent one way, each acknowledged
 * by a 1-byte reply every WINDOW messages. Used by node/benches/native_mpi.rs
 * on Zorilla's native jobs and under the MPI's own launcher. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SMALL_ROUNDS 2000
#define BIG (1 << 20)
#define BIG_ROUNDS 200
#define WINDOW 8

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double t0 = now();
    MPI_Init(&argc, &argv);
    double init_s = now() - t0;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0) printf("needs 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    char small[8] = {0};
    char *big = calloc(BIG, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = 0;
    for (int i = 0; i < SMALL_ROUNDS + 100; i++) {
        if (i == 100) t = now(); /* the first 100 warm up */
        if (rank == 0) {
            MPI_Send(small, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(small, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(small, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(small, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
    }
    double latency_us = (now() - t) / SMALL_ROUNDS / 2 * 1e6;
    MPI_Barrier(MPI_COMM_WORLD);
    t = now();
    for (int i = 0; i < BIG_ROUNDS; i++) {
        if (rank == 0) {
            MPI_Send(big, BIG, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            if (i % WINDOW == WINDOW - 1)
                MPI_Recv(small, 1, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(big, BIG, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i % WINDOW == WINDOW - 1)
                MPI_Send(small, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
        }
    }
    double bw = (double)BIG * BIG_ROUNDS / (now() - t) / 1e6;
    if (rank == 0)
        printf("init_ms %.1f\nlatency_8B_us %.2f\nbandwidth_1MiB_MBps %.0f\n", init_s * 1e3,
               latency_us, bw);
    free(big);
    MPI_Finalize();
    return 0;
}
