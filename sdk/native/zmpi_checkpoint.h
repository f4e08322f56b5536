/* Zorilla's checkpoint extension for native MPI programs (issue 32, item
 * 4): the same ZMPI_Checkpoint_* calls as Zorilla's own MPI library
 * (sdk/include/mpi.h, which documents them), for programs built with the
 * distribution's MPI (mpicc.mpich):
 *
 *   mpicc.mpich -O2 -I examples/include -I sdk/native prog.c \
 *       sdk/native/zmpi_checkpoint.c sdk/native/zorilla_native.c -o prog
 *
 * A save is collective over MPI_COMM_WORLD (a barrier, then every rank
 * saves under the same generation), so that a job with on_worker_lost =
 * "rollback" restarts all its ranks from the latest generation all of them
 * hold. Errors go to MPI_COMM_WORLD's error handler. */
#ifndef ZMPI_CHECKPOINT_H
#define ZMPI_CHECKPOINT_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

int ZMPI_Checkpoint_save(const void *buf, int size, int *copies);
int ZMPI_Checkpoint_size(int *size, int *flag);
int ZMPI_Checkpoint_load(void *buf, int cap, int *size, int *flag);

#ifdef __cplusplus
}
#endif

#endif /* ZMPI_CHECKPOINT_H */
