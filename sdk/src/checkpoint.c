/*
 * checkpoint.c — Zorilla's checkpoint extension (ZMPI_Checkpoint_*): the
 * host API's zorilla_checkpoint_* calls with MPI's error handling.
 */
#include <stddef.h>
#include <zorilla.h>
#include "zmpi.h"

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
    int32_t kept = zorilla_checkpoint_save(buf, (uint32_t)size);
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
