/*
 * checkpoint.c — Zorilla's checkpoint extension (ZMPI_Checkpoint_*): the
 * host API's zorilla_checkpoint_* calls with MPI's error handling. A save
 * is collective: every rank enters a barrier, then saves under the same
 * generation (1, 2, ... counted from the generation this run started
 * from), so that a job with on_worker_lost = "rollback" restarts all its
 * ranks from the latest generation all of them hold.
 */
#include <stddef.h>
#include <zorilla.h>
#include "zmpi.h"

/* The generation of the last checkpoint this rank saved or found at its
 * start: the next save is the one after. */
static int64_t generation;

/* An error of the host's checkpoint calls as an MPI error. */
static int host_error(int code, const char *fn)
{
    switch (code) {
    case ZORILLA_ETOOBIG:
        return zmpi_error(NULL, MPI_ERR_COUNT, fn, "checkpoint larger than the node takes");
    case ZORILLA_EFAULT:
        return zmpi_error(NULL, MPI_ERR_BUFFER, fn, "buffer outside memory");
    case ZORILLA_ENOTSUP:
        return zmpi_error(NULL, MPI_ERR_OTHER, fn, "this worker has no checkpoint store");
    case ZORILLA_EINVAL:
        return zmpi_error(NULL, MPI_ERR_OTHER, fn, "too many checkpoints (generation beyond the maximum)");
    default:
        return zmpi_error(NULL, MPI_ERR_OTHER, fn, "the node could not store or fetch the checkpoint");
    }
}

int ZMPI_Checkpoint_save(const void *buf, int size, int *copies)
{
    static const char fn[] = "ZMPI_Checkpoint_save";
    zmpi_check_init(fn);
    if (size < 0)
        return zmpi_error(NULL, MPI_ERR_COUNT, fn, "negative size");
    if (!buf && size > 0)
        return zmpi_error(NULL, MPI_ERR_BUFFER, fn, "NULL buffer");
    /* Every rank saved the generation before before any saves this one:
     * one generation is always held by all (the node keeps two). */
    int err = MPI_Barrier(MPI_COMM_WORLD);
    if (err != MPI_SUCCESS)
        return err;
    int32_t kept = zorilla_checkpoint_save_generation(generation + 1, buf, (uint32_t)size);
    if (kept >= 0)
        generation++;
    if (kept < 0)
        return host_error(kept, fn);
    if (copies)
        *copies = kept;
    return MPI_SUCCESS;
}

int ZMPI_Checkpoint_size(int *size, int *flag)
{
    static const char fn[] = "ZMPI_Checkpoint_size";
    zmpi_check_init(fn);
    if (!size || !flag)
        return zmpi_error(NULL, MPI_ERR_ARG, fn, "NULL argument");
    int32_t n = zorilla_checkpoint_size();
    *size = 0;
    *flag = 0;
    if (n == ZORILLA_ENOCHECKPOINT)
        return MPI_SUCCESS;
    if (n < 0)
        return host_error(n, fn);
    /* Saves go on from the generation this run starts from. */
    int64_t g = zorilla_checkpoint_generation();
    if (g > 0)
        generation = g;
    *size = n;
    *flag = 1;
    return MPI_SUCCESS;
}

int ZMPI_Checkpoint_load(void *buf, int cap, int *size, int *flag)
{
    static const char fn[] = "ZMPI_Checkpoint_load";
    zmpi_check_init(fn);
    if (!size || !flag)
        return zmpi_error(NULL, MPI_ERR_ARG, fn, "NULL argument");
    if (cap < 0)
        return zmpi_error(NULL, MPI_ERR_COUNT, fn, "negative capacity");
    int64_t g = zorilla_checkpoint_generation();
    if (g > 0)
        generation = g;
    int32_t n = zorilla_checkpoint_load(buf, (uint32_t)cap);
    *size = 0;
    *flag = 0;
    if (n == ZORILLA_ENOCHECKPOINT)
        return MPI_SUCCESS;
    if (n < 0)
        return host_error(n, fn);
    *size = n;
    *flag = 1;
    if (n > cap)
        return zmpi_error(NULL, MPI_ERR_TRUNCATE, fn, "checkpoint larger than the buffer");
    return MPI_SUCCESS;
}
