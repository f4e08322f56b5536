/* pingpong-mpi: the OpenMPI side of the ping-pong benchmark
 * (node/benches/pingpong.rs), measured as examples/src/transfer.c measures
 * Zorilla: rank 0 sends SIZE bytes to rank 1, which sends them back; after
 * one warm-up round trip, the mean of ITERATIONS round trips.
 *
 *   mpicc -O2 -o pingpong-mpi pingpong-mpi.c
 *   mpirun -np 2 ./pingpong-mpi SIZE ITERATIONS [SIZE ITERATIONS ...]
 * prints, per pair:
 *   mpi size=SIZE iterations=N roundtrip_ns=T */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int a = 1; a + 1 < argc; a += 2) {
        int size = atoi(argv[a]), iterations = atoi(argv[a + 1]);
        char *buf = malloc(size > 0 ? (size_t)size : 1);
        memset(buf, 7, (size_t)size);
        for (int warm = 1; warm >= 0; warm--) {
            int count = warm ? 1 : iterations;
            MPI_Barrier(MPI_COMM_WORLD);
            double start = MPI_Wtime();
            for (int i = 0; i < count; i++) {
                if (rank == 0) {
                    MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                    MPI_Recv(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
                }
            }
            if (!warm && rank == 0)
                printf("mpi size=%d iterations=%d roundtrip_ns=%.0f\n", size, iterations,
                       (MPI_Wtime() - start) * 1e9 / iterations);
        }
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
