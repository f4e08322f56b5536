/*
 * env.c — starting and ending MPI, error handlers and error strings, time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <zorilla.h>
#include "zmpi.h"

int zmpi_initialized, zmpi_finalized;
int zmpi_world_rank, zmpi_world_size = 1;
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

int MPI_Init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (zmpi_initialized)
        return zmpi_error(NULL, MPI_ERR_OTHER, "MPI_Init", "MPI is already initialized");
    int32_t rank = zorilla_rank(), size = zorilla_size();
    if (rank < 0 || size < 1 || rank >= size) {
        fprintf(stderr, "MPI_Init: this worker has no valid rank\n");
        exit(MPI_ERR_OTHER);
    }
    zmpi_world_rank = rank;
    zmpi_world_size = size;
    zmpi_comm_init(rank, size);
    zmpi_initialized = 1;
    return MPI_SUCCESS;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int err = MPI_Init(argc, argv);
    /* A WebAssembly worker has a single thread, so every level holds. */
    if (provided)
        *provided = required;
    return err;
}

int MPI_Query_thread(int *provided)
{
    *provided = MPI_THREAD_MULTIPLE;
    return MPI_SUCCESS;
}

int MPI_Finalize(void)
{
    int err = zmpi_check_init("MPI_Finalize");
    if (err)
        return err;
    /* Every send must leave before this worker ends, and no rank ends while
     * another may still need to send to it. */
    err = zmpi_flush_sends();
    if (!err)
        err = MPI_Barrier(MPI_COMM_WORLD);
    zmpi_finalized = 1;
    return err ? zmpi_error(NULL, err, "MPI_Finalize", "could not finish pending messages")
               : MPI_SUCCESS;
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

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler h)
{
    if (!zmpi_comm_ok(comm))
        return zmpi_error(NULL, MPI_ERR_COMM, "MPI_Comm_set_errhandler", "invalid communicator");
    if (h != MPI_ERRORS_ARE_FATAL && h != MPI_ERRORS_RETURN)
        return zmpi_error(comm, MPI_ERR_ARG, "MPI_Comm_set_errhandler", "unknown error handler");
    comm->errh = h;
    return MPI_SUCCESS;
}

int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *h)
{
    if (!zmpi_comm_ok(comm))
        return zmpi_error(NULL, MPI_ERR_COMM, "MPI_Comm_get_errhandler", "invalid communicator");
    *h = comm->errh;
    return MPI_SUCCESS;
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
