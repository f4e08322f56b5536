/*
 * init.c — starting and ending MPI: MPI_Init takes this worker's rank from
 * the host and sets up the predefined communicators; MPI_Finalize sends
 * what is pending and waits, in a barrier, until no rank can still need
 * this one. The top of the library's layers (scripts/c-cycles.py): it uses
 * the communicators (comm.c), the engine (p2p.c) and a collective
 * (coll.c), and nothing uses it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <zorilla.h>
#include "zmpi.h"

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
