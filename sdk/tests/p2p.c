/* Point to point: Send/Recv with tags, ANY_SOURCE, ANY_TAG, Status and
 * Get_count, Probe/Iprobe, Ssend, Rsend, Sendrecv(_replace), PROC_NULL,
 * non-overtaking order, and messages much larger than one fragment. */
#include <string.h>
#include "check.h"

#define BIG (3 * 1024 * 1024 + 17) /* bytes: several transport fragments */

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    MPI_Status st;

    /* Ring with Sendrecv: everyone gets its left neighbour's rank. */
    int got = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, right, 1, &got, 1, MPI_INT, left, 1, MPI_COMM_WORLD, &st);
    CHECK(got == left && st.MPI_SOURCE == left && st.MPI_TAG == 1, "ring got %d", got);

    /* Sendrecv_replace around the ring twice. */
    int val = rank * 10;
    MPI_Sendrecv_replace(&val, 1, MPI_INT, right, 2, left, 2, MPI_COMM_WORLD, &st);
    MPI_Sendrecv_replace(&val, 1, MPI_INT, right, 2, left, 2, MPI_COMM_WORLD, &st);
    CHECK(val == ((rank - 2 + 2 * size) % size) * 10, "replace got %d", val);

    /* ANY_SOURCE and ANY_TAG: rank 0 collects one message of length r+1
     * with tag 100+r from every other rank, probing for its size first. */
    if (rank == 0) {
        long long total = 0;
        int seen = 0;
        for (int i = 1; i < size; i++) {
            MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int n = -1;
            MPI_Get_count(&st, MPI_INT, &n);
            CHECK(n == st.MPI_SOURCE + 1, "probe count %d from %d", n, st.MPI_SOURCE);
            CHECK(st.MPI_TAG == 100 + st.MPI_SOURCE, "probe tag %d", st.MPI_TAG);
            int *buf = malloc(n * sizeof(int));
            MPI_Recv(buf, n, MPI_INT, MPI_ANY_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
            for (int k = 0; k < n; k++)
                total += buf[k];
            seen |= 1 << st.MPI_SOURCE;
            free(buf);
        }
        SAY("gathered_sum %lld", total);
        CHECK(seen == ((1 << size) - 2), "senders %x", seen);
    } else {
        int *buf = malloc((rank + 1) * sizeof(int));
        for (int k = 0; k <= rank; k++)
            buf[k] = rank * 1000 + k;
        MPI_Send(buf, rank + 1, MPI_INT, 0, 100 + rank, MPI_COMM_WORLD);
        free(buf);
    }

    MPI_Barrier(MPI_COMM_WORLD);

    /* Non-overtaking: five messages of one tag arrive in order; a message of
     * another tag can be received first. */
    if (size > 1) {
        if (rank == 1) {
            for (int i = 0; i < 5; i++)
                MPI_Send(&i, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
            int x = 99;
            MPI_Send(&x, 1, MPI_INT, 0, 8, MPI_COMM_WORLD);
        } else if (rank == 0) {
            int x = -1, flag = 0;
            MPI_Recv(&x, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, &st);
            CHECK(x == 99, "tag 8 got %d", x);
            MPI_Iprobe(1, 7, MPI_COMM_WORLD, &flag, &st);
            CHECK(flag, "tag-7 messages are there before tag 8's");
            for (int i = 0; i < 5; i++) {
                MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                CHECK(x == i && st.MPI_TAG == 7, "order: got %d tag %d, expected %d", x, st.MPI_TAG, i);
            }
        }
    }

    /* Ssend and Rsend to the right (the receive is posted first for Rsend). */
    {
        int a = rank + 1000, b = -1;
        MPI_Request r;
        MPI_Irecv(&b, 1, MPI_INT, left, 9, MPI_COMM_WORLD, &r);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Rsend(&a, 1, MPI_INT, right, 9, MPI_COMM_WORLD);
        MPI_Wait(&r, &st);
        CHECK(b == left + 1000, "rsend got %d", b);
        MPI_Irecv(&b, 1, MPI_INT, left, 10, MPI_COMM_WORLD, &r);
        MPI_Ssend(&a, 1, MPI_INT, right, 10, MPI_COMM_WORLD);
        MPI_Wait(&r, &st);
        CHECK(b == left + 1000, "ssend got %d", b);
    }

    /* An Issend does not complete before its receive is posted: rank 1
     * receives it only after a second message that rank 0 sends later. */
    if (size > 1 && rank < 2) {
        int peer = 1 - rank, x = 5, y = -1, flag = 1;
        if (rank == 0) {
            MPI_Request r;
            MPI_Issend(&x, 1, MPI_INT, peer, 11, MPI_COMM_WORLD, &r);
            /* rank 1 does not receive tag 11 until it got tag 12 */
            for (int i = 0; i < 20; i++)
                MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
            CHECK(!flag, "Issend completed before its receive was posted");
            MPI_Send(&x, 1, MPI_INT, peer, 12, MPI_COMM_WORLD);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&y, 1, MPI_INT, peer, 12, MPI_COMM_WORLD, &st);
            MPI_Recv(&y, 1, MPI_INT, peer, 11, MPI_COMM_WORLD, &st);
            CHECK(y == 5, "ssend payload %d", y);
        }
    }

    /* PROC_NULL: completes at once, status says so. */
    int z = 42;
    MPI_Send(&z, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
    MPI_Recv(&z, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
    int cnt = -1;
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && cnt == 0 && z == 42, "proc_null");

    /* Large messages around the ring, both directions at once (blocking
     * sends of several fragments while the neighbours send too). */
    {
        unsigned char *out = malloc(BIG), *in = malloc(BIG);
        for (int i = 0; i < BIG; i++)
            out[i] = (unsigned char)(i * 7 + rank);
        MPI_Sendrecv(out, BIG, MPI_BYTE, right, 20, in, BIG, MPI_BYTE, left, 20, MPI_COMM_WORLD, &st);
        int bad = 0;
        for (int i = 0; i < BIG; i++)
            bad += in[i] != (unsigned char)(i * 7 + left);
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        CHECK(bad == 0 && cnt == BIG, "big sendrecv: %d wrong bytes, count %d", bad, cnt);
        /* unexpected large message: sent before the receive is posted */
        if (size > 1) {
            MPI_Request r = MPI_REQUEST_NULL;
            if (rank == 0)
                MPI_Isend(out, BIG, MPI_BYTE, 1, 21, MPI_COMM_WORLD, &r);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 1) {
                memset(in, 0, BIG);
                MPI_Recv(in, BIG, MPI_BYTE, 0, 21, MPI_COMM_WORLD, &st);
                bad = 0;
                for (int i = 0; i < BIG; i++)
                    bad += in[i] != (unsigned char)(i * 7);
                CHECK(bad == 0, "unexpected big message: %d wrong bytes", bad);
            }
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        long long sum = 0;
        for (int i = 0; i < BIG; i += 4096)
            sum += in[i];
        long long all = 0;
        MPI_Reduce(&sum, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        free(out);
        free(in);
    }
    SAY("p2p done");
    return check_finish();
}
