/*
 * env.c — the library's state and its error handling, which every other
 * part uses: whether MPI is initialized or finalized, this rank and the
 * world's size, the predefined communicators' storage (MPI_Init fills it
 * with comm.c's zmpi_comm_init) and error handlers, zmpi_error and
 * zmpi_check_init, error strings; and the calls that need nothing else
 * (Abort, Wtime, version, processor name). The bottom of the library's
 * layers (scripts/c-cycles.py): it uses no other file of the library.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "zmpi.h"

int zmpi_initialized, zmpi_finalized;
int zmpi_world_rank, zmpi_world_size = 1;
/* Here, not in comm.c, because zmpi_error takes COMM_WORLD's handler. */
struct zmpi_comm zmpi_comm_world, zmpi_comm_self;
struct zmpi_errhandler zmpi_errors_are_fatal = {1}, zmpi_errors_return = {0};

static const char *const messages[] = {
    [MPI_SUCCESS] = "no error",
    [MPI_ERR_BUFFER] = "invalid buffer",
    [MPI_ERR_COUNT] = "invalid count",
    [MPI_ERR_TYPE] = "invalid datatype",
    [MPI_ERR_TAG] = "invalid tag",
    [MPI_ERR_COMM] = "invalid communicator",
    [MPI_ERR_RANK] = "invalid rank",
    [MPI_ERR_REQUEST] = "invalid request",
    [MPI_ERR_ROOT] = "invalid root",
    [MPI_ERR_GROUP] = "invalid group",
    [MPI_ERR_OP] = "invalid reduction operator for this datatype",
    [MPI_ERR_TOPOLOGY] = "invalid topology",
    [MPI_ERR_DIMS] = "invalid dimensions",
    [MPI_ERR_ARG] = "invalid argument",
    [MPI_ERR_UNKNOWN] = "unknown error",
    [MPI_ERR_TRUNCATE] = "message truncated",
    [MPI_ERR_OTHER] = "transport error",
    [MPI_ERR_INTERN] = "internal error",
    [MPI_ERR_IN_STATUS] = "error in a status",
    [MPI_ERR_PENDING] = "pending request",
    [MPI_ERR_NO_MEM] = "out of memory",
    [MPI_ERR_WIN] = "invalid window",
    [MPI_ERR_BASE] = "invalid base address",
    [MPI_ERR_SIZE] = "invalid size",
    [MPI_ERR_DISP] = "invalid displacement",
    [MPI_ERR_INFO] = "invalid info object",
    [MPI_ERR_LOCKTYPE] = "invalid lock type",
    [MPI_ERR_ASSERT] = "invalid assertion",
    [MPI_ERR_RMA_CONFLICT] = "conflicting one-sided accesses",
    [MPI_ERR_RMA_SYNC] = "one-sided call outside its synchronization",
    [MPI_ERR_RMA_RANGE] = "target memory outside the window",
    [MPI_ERR_INFO_KEY] = "info key too long or empty",
    [MPI_ERR_INFO_VALUE] = "info value too long",
    [MPI_ERR_INFO_NOKEY] = "no such info key",
};

static const char *message(int code)
{
    if (code >= 0 && code < (int)(sizeof messages / sizeof *messages) && messages[code])
        return messages[code];
    return "unknown error code";
}

int zmpi_error(MPI_Comm comm, int code, const char *fn, const char *detail)
{
    MPI_Errhandler h = comm && comm->errh ? comm->errh : zmpi_comm_world.errh;
    if (!h || h->fatal) {
        fprintf(stderr, "MPI error on rank %d in %s: %s (%s)\n", zmpi_world_rank, fn,
                message(code), detail);
        fflush(stdout);
        fflush(stderr);
        exit(code > 0 && code < 256 ? code : 1);
    }
    return code;
}

int zmpi_check_init(const char *fn)
{
    if (zmpi_initialized && !zmpi_finalized)
        return MPI_SUCCESS;
    fprintf(stderr, "MPI error in %s: called %s MPI_Init\n", fn,
            zmpi_finalized ? "after MPI_Finalize, not after" : "before");
    fflush(stderr);
    exit(MPI_ERR_OTHER);
}

int MPI_Initialized(int *flag)
{
    *flag = zmpi_initialized;
    return MPI_SUCCESS;
}

int MPI_Finalized(int *flag)
{
    *flag = zmpi_finalized;
    return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm comm, int code)
{
    (void)comm;
    fprintf(stderr, "MPI_Abort on rank %d with error code %d\n", zmpi_world_rank, code);
    fflush(stdout);
    fflush(stderr);
    exit(code ? code : 1);
}

int MPI_Get_processor_name(char *name, int *len)
{
    *len = snprintf(name, MPI_MAX_PROCESSOR_NAME, "zorilla-worker-%d", zmpi_world_rank);
    return MPI_SUCCESS;
}

int MPI_Get_version(int *version, int *subversion)
{
    *version = MPI_VERSION;
    *subversion = MPI_SUBVERSION;
    return MPI_SUCCESS;
}

double MPI_Wtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double MPI_Wtick(void)
{
    struct timespec ts;
    if (clock_getres(CLOCK_MONOTONIC, &ts) != 0 || (ts.tv_sec == 0 && ts.tv_nsec == 0))
        return 1e-9;
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int MPI_Errhandler_free(MPI_Errhandler *h)
{
    *h = MPI_ERRHANDLER_NULL;
    return MPI_SUCCESS;
}

int MPI_Error_string(int code, char *s, int *len)
{
    *len = snprintf(s, MPI_MAX_ERROR_STRING, "%s", message(code));
    return MPI_SUCCESS;
}

int MPI_Error_class(int code, int *cls)
{
    *cls = code >= 0 && code <= MPI_ERR_LASTCODE ? code : MPI_ERR_UNKNOWN;
    return MPI_SUCCESS;
}
