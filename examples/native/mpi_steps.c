/* A native MPI program (MPICH) that takes N steps, each an MPI_Allreduce
 * of the ranks' step counters and 20 ms of "work", saving a collective
 * checkpoint (ZMPI_Checkpoint_save) every 10 steps; after a rollback its
 * ranks resume together from the latest generation all of them hold.
 *
 *   mpicc.mpich -O2 -I examples/include -I sdk/native examples/native/mpi_steps.c \
 *       sdk/native/zmpi_checkpoint.c sdk/native/zorilla_native.c -o mpi_steps */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "zmpi_checkpoint.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long n = argc > 1 ? atol(argv[1]) : 100;
    long step = 0;
    int bytes = 0, flag = 0;
    ZMPI_Checkpoint_size(&bytes, &flag);
    if (flag && bytes == (int)sizeof step) ZMPI_Checkpoint_load(&step, sizeof step, &bytes, &flag);
    printf("steps rank=%d start=%ld\n", rank, step);
    fflush(stdout);
    long sum = 0;
    for (; step < n; step++) {
        long mine = step;
        MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (sum != step * size) {
            printf("steps rank=%d out of step at %ld: sum %ld\n", rank, step, sum);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        usleep(20000);
        if ((step + 1) % 10 == 0) {
            long next = step + 1;
            int copies = 0;
            ZMPI_Checkpoint_save(&next, sizeof next, &copies);
            printf("steps rank=%d checkpoint=%ld copies=%d\n", rank, next, copies);
            fflush(stdout);
        }
    }
    printf("steps rank=%d done=%ld\n", rank, n);
    MPI_Finalize();
    return 0;
}
