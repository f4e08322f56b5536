/* Environment and errors: Init_thread, Initialized/Finalized, rank/size,
 * processor name, Wtime/Wtick, error handlers that return codes. */
#include <string.h>
#include "check.h"

int main(int argc, char **argv)
{
    int flag = 1, provided = -1;
    MPI_Initialized(&flag);
    CHECK(!flag, "initialized before MPI_Init");
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    CHECK(provided >= MPI_THREAD_FUNNELED, "provided %d", provided);
    MPI_Initialized(&flag);
    CHECK(flag, "not initialized after MPI_Init");
    MPI_Finalized(&flag);
    CHECK(!flag, "finalized too early");
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(rank >= 0 && rank < size, "rank %d of %d", rank, size);
    SAY("size %d", size);
    int srank = -1, ssize = -1;
    MPI_Comm_rank(MPI_COMM_SELF, &srank);
    MPI_Comm_size(MPI_COMM_SELF, &ssize);
    CHECK(srank == 0 && ssize == 1, "COMM_SELF %d/%d", srank, ssize);

    char name[MPI_MAX_PROCESSOR_NAME];
    int len = -1;
    MPI_Get_processor_name(name, &len);
    CHECK(len > 0 && len < MPI_MAX_PROCESSOR_NAME && (int)strlen(name) == len, "name length %d", len);

    double t0 = MPI_Wtime(), tick = MPI_Wtick();
    volatile double x = 0;
    for (int i = 0; i < 100000; i++)
        x += i;
    double t1 = MPI_Wtime();
    CHECK(t1 >= t0 && x > 0, "time went back");
    CHECK(tick > 0 && tick < 1, "tick %g", tick);

    /* Every rank contributes its rank: the sum is n(n-1)/2. */
    int sum = -1;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    SAY("sum_of_ranks %d", sum);
    CHECK(sum == size * (size - 1) / 2, "sum %d", sum);

    /* Errors come back as codes with MPI_ERRORS_RETURN. */
    MPI_Errhandler h;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &h);
    CHECK(h == MPI_ERRORS_ARE_FATAL, "default handler");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int v = 1, cls = -1;
    int rc = MPI_Send(&v, 1, MPI_INT, size + 5, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK, "send to a bad rank gave class %d", cls);
    rc = MPI_Send(&v, -1, MPI_INT, 0, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COUNT, "negative count gave class %d", cls);
    rc = MPI_Send(&v, 1, MPI_INT, 0, -7, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TAG, "bad tag gave class %d", cls);
    rc = MPI_Bcast(&v, 1, MPI_INT, size, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ROOT, "bad root gave class %d", cls);
    /* A receive too small for its message: MPI_ERR_TRUNCATE. */
    int two[2] = {1, 2}, one = 0;
    MPI_Status st;
    MPI_Sendrecv(two, 2, MPI_INT, rank, 5, &one, 0, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
    rc = MPI_Recv(&one, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &st);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "truncation gave class %d", cls);
    char msg[MPI_MAX_ERROR_STRING];
    MPI_Error_string(MPI_ERR_RANK, msg, &len);
    CHECK(len > 0, "empty error string");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    SAY("errors_return ok");

    int r = check_finish();
    MPI_Finalized(&flag);
    if (!flag) {
        fprintf(stderr, "not finalized after MPI_Finalize\n");
        return 1;
    }
    return r;
}
