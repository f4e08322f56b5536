/* Nonblocking: Isend/Irecv, Wait, Waitall, Waitany, Test, Testall,
 * Request_free, Issend; both sides Isend large messages before receiving;
 * persistent requests (Send_init, Ssend_init, Recv_init, Start, Startall). */
#include <string.h>
#include "check.h"

#define BIG (2 * 1024 * 1024 + 3) /* ints */

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    MPI_Status st;

    /* Everyone Isends a large message to both neighbours, then Irecvs,
     * then Waitall: must not deadlock whatever the message size. */
    int *outr = malloc(BIG * sizeof(int)), *outl = malloc(BIG * sizeof(int));
    int *inl = malloc(BIG * sizeof(int)), *inr = malloc(BIG * sizeof(int));
    for (int i = 0; i < BIG; i++) {
        outr[i] = rank * 3 + i;
        outl[i] = rank * 5 - i;
    }
    MPI_Request reqs[4];
    MPI_Status sts[4];
    MPI_Isend(outr, BIG, MPI_INT, right, 1, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(outl, BIG, MPI_INT, left, 2, MPI_COMM_WORLD, &reqs[1]);
    MPI_Irecv(inl, BIG, MPI_INT, left, 1, MPI_COMM_WORLD, &reqs[2]);
    MPI_Irecv(inr, BIG, MPI_INT, right, 2, MPI_COMM_WORLD, &reqs[3]);
    MPI_Waitall(4, reqs, sts);
    int bad = 0;
    for (int i = 0; i < BIG; i++)
        bad += inl[i] != left * 3 + i || inr[i] != right * 5 - i;
    CHECK(bad == 0, "halo: %d wrong values", bad);
    CHECK(sts[2].MPI_SOURCE == left && sts[2].MPI_TAG == 1, "status of receive");
    for (int i = 0; i < 4; i++)
        CHECK(reqs[i] == MPI_REQUEST_NULL, "request %d not freed", i);

    /* Waitany: rank 0 receives one int from every other rank, in any order. */
    if (rank == 0) {
        int n = size - 1, *vals = calloc(size, sizeof(int));
        MPI_Request *rs = malloc((n + 1) * sizeof(MPI_Request));
        for (int i = 0; i < n; i++)
            MPI_Irecv(&vals[i + 1], 1, MPI_INT, i + 1, 3, MPI_COMM_WORLD, &rs[i]);
        int seen = 0;
        for (int k = 0; k < n; k++) {
            int idx = -1;
            MPI_Waitany(n, rs, &idx, &st);
            CHECK(idx >= 0 && idx < n && st.MPI_SOURCE == idx + 1, "waitany index %d", idx);
            seen++;
        }
        int idx = 0;
        MPI_Waitany(n, rs, &idx, &st);
        CHECK(idx == MPI_UNDEFINED, "waitany on no active request gave %d", idx);
        long long sum = 0;
        for (int i = 1; i < size; i++)
            sum += vals[i];
        SAY("waitany_sum %lld seen %d", sum, seen);
        CHECK(sum == (long long)(size - 1) * size / 2 * 7, "sum %lld", sum);
        free(vals);
        free(rs);
    } else {
        int v = rank * 7;
        MPI_Send(&v, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
    }

    /* Test until done. */
    {
        int a = rank, b = -1, flag = 0;
        MPI_Request rr, sr;
        MPI_Irecv(&b, 1, MPI_INT, left, 4, MPI_COMM_WORLD, &rr);
        MPI_Isend(&a, 1, MPI_INT, right, 4, MPI_COMM_WORLD, &sr);
        long spins = 0;
        while (!flag) {
            MPI_Test(&rr, &flag, &st);
            spins++;
        }
        CHECK(b == left && rr == MPI_REQUEST_NULL, "test got %d", b);
        MPI_Wait(&sr, MPI_STATUS_IGNORE);
    }

    /* Testall over a set, and Request_free on a send. */
    {
        int a[3] = {rank, rank + 1, rank + 2}, b[3] = {-1, -1, -1}, flag = 0;
        MPI_Request rs[3];
        for (int i = 0; i < 3; i++)
            MPI_Irecv(&b[i], 1, MPI_INT, left, 10 + i, MPI_COMM_WORLD, &rs[i]);
        for (int i = 2; i >= 0; i--) {
            MPI_Request s;
            MPI_Isend(&a[i], 1, MPI_INT, right, 10 + i, MPI_COMM_WORLD, &s);
            MPI_Request_free(&s);
            CHECK(s == MPI_REQUEST_NULL, "request_free");
        }
        while (!flag)
            MPI_Testall(3, rs, &flag, MPI_STATUSES_IGNORE);
        CHECK(b[0] == left && b[1] == left + 1 && b[2] == left + 2, "testall got %d %d %d", b[0], b[1], b[2]);
        MPI_Barrier(MPI_COMM_WORLD); /* the freed sends have been received */
    }

    /* Issend + Irecv pairs around the ring, completed with Waitall. */
    {
        int a = rank * 11, b = -1;
        MPI_Request rs[2];
        MPI_Issend(&a, 1, MPI_INT, right, 20, MPI_COMM_WORLD, &rs[0]);
        MPI_Irecv(&b, 1, MPI_INT, left, 20, MPI_COMM_WORLD, &rs[1]);
        MPI_Waitall(2, rs, MPI_STATUSES_IGNORE);
        CHECK(b == left * 11, "issend got %d", b);
    }

    /* A null request waits at once with an empty status. */
    MPI_Request nul = MPI_REQUEST_NULL;
    MPI_Wait(&nul, &st);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG, "empty status");

    /* Persistent requests around the ring, started 3 times; the buffer is
     * read at each Start. An inactive persistent request waits at once. */
    {
        int out = 0, in = -1, sum = 0;
        MPI_Request pr[2];
        MPI_Recv_init(&in, 1, MPI_INT, left, 30, MPI_COMM_WORLD, &pr[0]);
        MPI_Send_init(&out, 1, MPI_INT, right, 30, MPI_COMM_WORLD, &pr[1]);
        MPI_Wait(&pr[0], &st);
        CHECK(pr[0] != MPI_REQUEST_NULL && st.MPI_TAG == MPI_ANY_TAG, "inactive wait");
        for (int k = 1; k <= 3; k++) {
            out = 100 * k + rank;
            MPI_Startall(2, pr);
            MPI_Waitall(2, pr, MPI_STATUSES_IGNORE);
            CHECK(in == 100 * k + left, "persistent round %d got %d", k, in);
            CHECK(pr[0] != MPI_REQUEST_NULL && pr[1] != MPI_REQUEST_NULL, "requests kept");
            sum += in;
        }
        MPI_Request ps;
        MPI_Ssend_init(&out, 1, MPI_INT, right, 31, MPI_COMM_WORLD, &ps);
        MPI_Start(&pr[0]); /* pr[0] still receives on tag 30 */
        out = -7;
        MPI_Start(&ps);
        int b = -1;
        MPI_Recv(&b, 1, MPI_INT, left, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Wait(&ps, MPI_STATUS_IGNORE);
        CHECK(b == -7, "persistent ssend %d", b);
        MPI_Send(&rank, 1, MPI_INT, right, 30, MPI_COMM_WORLD);
        int flag = 0;
        while (!flag)
            MPI_Test(&pr[0], &flag, &st);
        CHECK(in == left && st.MPI_SOURCE == left, "persistent test %d", in);
        MPI_Request_free(&pr[0]);
        MPI_Request_free(&pr[1]);
        MPI_Request_free(&ps);
        CHECK(pr[0] == MPI_REQUEST_NULL && ps == MPI_REQUEST_NULL, "persistent freed");
        int total = 0;
        MPI_Allreduce(&sum, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        SAY("persistent_sum %d", total);
    }

    free(outr);
    free(outl);
    free(inl);
    free(inr);
    SAY("nonblocking done");
    return check_finish();
}
