/* ZMPI_Checkpoint_* for native MPI programs: zorilla.h's checkpoint calls
 * (sdk/native/zorilla_native.c) with MPI's error handling, as
 * sdk/src/checkpoint.c does for Zorilla's own MPI library. */
#include "zmpi_checkpoint.h"

#include <stdint.h>
#include <zorilla.h>

/* The generation of the last checkpoint this rank saved or found at its
 * start: the next save is the one after. */
static int64_t generation;

/* `code` to MPI_COMM_WORLD's error handler, and back. */
static int fail(int code) {
    MPI_Comm_call_errhandler(MPI_COMM_WORLD, code);
    return code;
}

/* An error of zorilla.h's checkpoint calls as an MPI error. */
static int host_error(int code) {
    switch (code) {
    case ZORILLA_ETOOBIG:
        return fail(MPI_ERR_COUNT);
    case ZORILLA_EFAULT:
        return fail(MPI_ERR_BUFFER);
    default:
        return fail(MPI_ERR_OTHER);
    }
}

int ZMPI_Checkpoint_save(const void *buf, int size, int *copies) {
    if (size < 0) return fail(MPI_ERR_COUNT);
    if (!buf && size > 0) return fail(MPI_ERR_BUFFER);
    /* Every rank saved the generation before before any saves this one:
     * one generation is always held by all (the node keeps two). */
    int err = MPI_Barrier(MPI_COMM_WORLD);
    if (err != MPI_SUCCESS) return err;
    int32_t kept = zorilla_checkpoint_save_generation(generation + 1, buf, (uint32_t)size);
    if (kept < 0) return host_error(kept);
    generation++;
    if (copies) *copies = kept;
    return MPI_SUCCESS;
}

int ZMPI_Checkpoint_size(int *size, int *flag) {
    if (!size || !flag) return fail(MPI_ERR_ARG);
    int32_t n = zorilla_checkpoint_size();
    *size = 0;
    *flag = 0;
    if (n == ZORILLA_ENOCHECKPOINT) return MPI_SUCCESS;
    if (n < 0) return host_error(n);
    /* Saves go on from the generation this run starts from. */
    int64_t g = zorilla_checkpoint_generation();
    if (g > 0) generation = g;
    *size = n;
    *flag = 1;
    return MPI_SUCCESS;
}

int ZMPI_Checkpoint_load(void *buf, int cap, int *size, int *flag) {
    if (!size || !flag) return fail(MPI_ERR_ARG);
    if (cap < 0) return fail(MPI_ERR_COUNT);
    int64_t g = zorilla_checkpoint_generation();
    if (g > 0) generation = g;
    int32_t n = zorilla_checkpoint_load(buf, (uint32_t)cap);
    *size = 0;
    *flag = 0;
    if (n == ZORILLA_ENOCHECKPOINT) return MPI_SUCCESS;
    if (n < 0) return host_error(n);
    *size = n;
    *flag = 1;
    if (n > cap) return fail(MPI_ERR_TRUNCATE);
    return MPI_SUCCESS;
}
