/* One-sided communication: windows created, allocated and dynamic; Put,
 * Get, Accumulate (predefined and derived datatypes), Get_accumulate,
 * Fetch_and_op, Compare_and_swap; fence, post/start/complete/wait (and
 * test), lock/unlock (exclusive and shared), lock_all/unlock_all, flush,
 * flush_local; Win_get_group; and that a target serves requests while it
 * waits in other MPI calls (a barrier, a receive). */
#include <string.h>
#include "check.h"

#define SLOTS 8 /* at least the number of ranks */

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;

    /* Fence: every rank puts its rank into slot `rank` of every window. */
    int *mem = calloc(6 * SLOTS, sizeof(int));
    MPI_Win win;
    MPI_Win_create(mem, 6 * SLOTS * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
    for (int t = 0; t < size; t++)
        MPI_Put(&rank, 1, MPI_INT, t, rank, 1, MPI_INT, win);
    MPI_Win_fence(0, win);
    int sum = 0;
    for (int i = 0; i < size; i++) {
        CHECK(mem[i] == i, "fence put: slot %d holds %d", i, mem[i]);
        sum += mem[i];
    }
    SAY("fence_put_sum %d", sum);

    /* Get from the right neighbour, a vector of 3 ints from slot SLOTS. */
    for (int i = 0; i < 3; i++)
        mem[SLOTS + i] = 100 * rank + i;
    MPI_Win_fence(0, win);
    int got[3] = {-1, -1, -1};
    MPI_Get(got, 3, MPI_INT, right, SLOTS, 3, MPI_INT, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < 3; i++)
        CHECK(got[i] == 100 * right + i, "get %d: %d", i, got[i]);

    /* Accumulate: every rank adds rank+1 to slot 2*SLOTS of rank 0, and
     * through a strided target type to every other int of slot 3*SLOTS.. */
    mem[2 * SLOTS] = 0;
    for (int i = 0; i < 4; i++)
        mem[3 * SLOTS + i] = 0;
    MPI_Datatype every_other;
    MPI_Type_vector(2, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    MPI_Win_fence(0, win);
    int inc = rank + 1, pair[2] = {rank, 2 * rank};
    MPI_Accumulate(&inc, 1, MPI_INT, 0, 2 * SLOTS, 1, MPI_INT, MPI_SUM, win);
    MPI_Accumulate(pair, 2, MPI_INT, 0, 3 * SLOTS, 1, every_other, MPI_SUM, win);
    MPI_Accumulate(&rank, 1, MPI_INT, 0, 3 * SLOTS + 1, 1, MPI_INT, MPI_MAX, win);
    MPI_Win_fence(0, win);
    MPI_Type_free(&every_other);
    int tri = size * (size + 1) / 2, rsum = size * (size - 1) / 2;
    if (rank == 0) {
        CHECK(mem[2 * SLOTS] == tri, "accumulate sum %d", mem[2 * SLOTS]);
        CHECK(mem[3 * SLOTS] == rsum && mem[3 * SLOTS + 2] == 2 * rsum,
              "strided accumulate %d %d", mem[3 * SLOTS], mem[3 * SLOTS + 2]);
        CHECK(mem[3 * SLOTS + 1] == size - 1, "accumulate max %d", mem[3 * SLOTS + 1]);
        SAY("accumulate %d %d %d %d", mem[2 * SLOTS], mem[3 * SLOTS], mem[3 * SLOTS + 1],
            mem[3 * SLOTS + 2]);
    }

    /* Post/start/complete/wait around a ring: each rank writes into its
     * right neighbour's window and is written by its left one. */
    MPI_Group world, to_right, from_left;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &right, &to_right);
    MPI_Group_incl(world, 1, &left, &from_left);
    mem[4 * SLOTS] = -1;
    MPI_Win_post(from_left, 0, win);
    MPI_Win_start(to_right, 0, win);
    int token = 1000 + rank;
    MPI_Put(&token, 1, MPI_INT, right, 4 * SLOTS, 1, MPI_INT, win);
    MPI_Win_complete(win);
    if (rank % 2) {
        MPI_Win_wait(win);
    } else {
        int flag = 0;
        while (!flag)
            MPI_Win_test(win, &flag);
    }
    CHECK(mem[4 * SLOTS] == 1000 + left, "pscw put %d", mem[4 * SLOTS]);
    MPI_Group_free(&to_right);
    MPI_Group_free(&from_left);

    /* Exclusive locks: every rank increments rank 0's counter 5 times by
     * get, flush, put under the lock; no increment may be lost. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        mem[5 * SLOTS] = 0;
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < 5; k++) {
        int v = -1;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Get(&v, 1, MPI_INT, 0, 5 * SLOTS, 1, MPI_INT, win);
        MPI_Win_flush(0, win);
        v++;
        MPI_Put(&v, 1, MPI_INT, 0, 5 * SLOTS, 1, MPI_INT, win);
        MPI_Win_unlock(0, win);
    }
    /* rank 0 serves the others' locks from inside this barrier */
    MPI_Barrier(MPI_COMM_WORLD);
    int counter = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Get(&counter, 1, MPI_INT, 0, 5 * SLOTS, 1, MPI_INT, win);
    MPI_Win_unlock(0, win);
    CHECK(counter == 5 * size, "locked counter %d", counter);
    SAY("locked_counter %d", counter);
    MPI_Win_free(&win);
    CHECK(win == MPI_WIN_NULL, "freed window");
    free(mem);

    /* Allocated window: tickets by Fetch_and_op, one winner by
     * Compare_and_swap, and Get_accumulate, under lock_all. */
    long long *slots;
    MPI_Win aw;
    MPI_Win_allocate(4 * sizeof(long long), sizeof(long long), MPI_INFO_NULL, MPI_COMM_WORLD,
                     &slots, &aw);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, aw);
    memset(slots, 0, 4 * sizeof(long long));
    slots[3] = 7;
    MPI_Win_unlock(rank, aw);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, aw);
    long long one = 1, ticket = -1, mine = rank + 1, zero = 0, old = -1, seen = -1;
    MPI_Fetch_and_op(&one, &ticket, MPI_LONG_LONG, 0, 0, MPI_SUM, aw);
    MPI_Compare_and_swap(&mine, &zero, &old, MPI_LONG_LONG, 0, 1, aw);
    MPI_Win_flush_local(0, aw);
    long long add = 10;
    MPI_Get_accumulate(&add, 1, MPI_LONG_LONG, &seen, 1, MPI_LONG_LONG, right, 3, 1,
                       MPI_LONG_LONG, MPI_SUM, aw);
    MPI_Win_flush(right, aw);
    long long peek = -1;
    MPI_Fetch_and_op(NULL, &peek, MPI_LONG_LONG, right, 3, MPI_NO_OP, aw);
    MPI_Win_unlock_all(aw);
    CHECK(ticket >= 0 && ticket < size, "ticket %lld", ticket);
    CHECK(seen == 7 && peek == 17, "get_accumulate saw %lld then %lld", seen, peek);
    long long tickets = 0, winners = 0, won = old == 0;
    MPI_Allreduce(&ticket, &tickets, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&won, &winners, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(tickets == (long long)size * (size - 1) / 2, "tickets sum %lld", tickets);
    CHECK(winners == 1, "%lld compare-and-swap winners", winners);
    if (rank == 0) {
        CHECK(slots[0] == size, "fetch_and_op total %lld", slots[0]);
        CHECK(slots[1] >= 1 && slots[1] <= size, "swapped in %lld", slots[1]);
    }
    SAY("atomics tickets %lld winners %lld", tickets, winners);

    MPI_Group wg;
    int cmp;
    MPI_Win_get_group(aw, &wg);
    MPI_Group_compare(wg, world, &cmp);
    CHECK(cmp == MPI_IDENT, "window group %d", cmp);
    MPI_Group_free(&wg);
    MPI_Group_free(&world);
    MPI_Win_free(&aw);

    /* Dynamic window: memory attached later, addressed by MPI_Get_address;
     * the target waits in a receive meanwhile. */
    MPI_Win dw;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dw);
    double *buf = calloc(4, sizeof(double));
    MPI_Win_attach(dw, buf, 4 * sizeof(double));
    MPI_Aint here, *addrs = malloc(size * sizeof(MPI_Aint));
    MPI_Get_address(buf, &here);
    MPI_Allgather(&here, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD);
    double val = 0.5 + rank;
    MPI_Win_lock(MPI_LOCK_SHARED, right, 0, dw);
    MPI_Put(&val, 1, MPI_DOUBLE, right, addrs[right] + sizeof(double), 1, MPI_DOUBLE, dw);
    MPI_Win_unlock(right, dw);
    /* tell the right neighbour its window is written */
    int note = 1;
    MPI_Sendrecv_replace(&note, 1, MPI_INT, right, 5, left, 5, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
    CHECK(buf[1] == 0.5 + left, "dynamic put %g", buf[1]);
    MPI_Win_detach(dw, buf);
    MPI_Win_free(&dw);
    free(buf);
    free(addrs);
    SAY("dynamic ok");
    return check_finish();
}
