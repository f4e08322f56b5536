/* Communicators and groups: Comm_dup/split/free/compare, Comm_group,
 * Group_incl/excl/size/rank/translate_ranks/free, Comm_create,
 * Comm_create_group; messages in one communicator never match another's. */
#include "check.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, res;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &res);
    CHECK(res == MPI_CONGRUENT, "dup compare %d", res);
    MPI_Comm_compare(dup, dup, &res);
    CHECK(res == MPI_IDENT, "ident");

    /* A message sent on dup is not received on WORLD with the same tag. */
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    int a = rank, b = -1, c = -1;
    MPI_Request rq[2];
    MPI_Irecv(&b, 1, MPI_INT, left, 0, MPI_COMM_WORLD, &rq[0]);
    MPI_Irecv(&c, 1, MPI_INT, left, 0, dup, &rq[1]);
    int x = 1000 + rank;
    MPI_Send(&x, 1, MPI_INT, right, 0, dup);
    MPI_Send(&a, 1, MPI_INT, right, 0, MPI_COMM_WORLD);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    CHECK(b == left && c == 1000 + left, "contexts kept apart: %d %d", b, c);

    /* split into even and odd ranks, reversed order by key */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &half);
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    int expect_hs = rank % 2 ? size / 2 : (size + 1) / 2;
    CHECK(hs == expect_hs, "half size %d", hs);
    CHECK(hr == hs - 1 - rank / 2, "half rank %d", hr);
    int hsum = 0;
    MPI_Allreduce(&rank, &hsum, 1, MPI_INT, MPI_SUM, half);
    int e = 0;
    for (int r = rank % 2; r < size; r += 2)
        e += r;
    CHECK(hsum == e, "half sum %d", hsum);
    MPI_Comm_compare(half, MPI_COMM_WORLD, &res);
    CHECK(res == (size == 1 ? MPI_SIMILAR : MPI_UNEQUAL) || (size == 1 && res == MPI_CONGRUENT), "half compare %d", res);
    int sums[2] = {0, 0}, mine2[2] = {rank % 2 ? 0 : hsum, rank % 2 ? hsum : 0};
    MPI_Allreduce(mine2, sums, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    SAY("split_sums %d %d", sums[0], sums[1]);

    /* split with MPI_UNDEFINED */
    MPI_Comm none;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &none);
    CHECK((rank == 0) == (none == MPI_COMM_NULL), "undefined color");
    if (none != MPI_COMM_NULL)
        MPI_Comm_free(&none);

    /* groups */
    MPI_Group world, evens, odds;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int gs, gr;
    MPI_Group_size(world, &gs);
    MPI_Group_rank(world, &gr);
    CHECK(gs == size && gr == rank, "world group");
    int ne = (size + 1) / 2, *ev = malloc(ne * sizeof(int));
    for (int i = 0; i < ne; i++)
        ev[i] = 2 * i;
    MPI_Group_incl(world, ne, ev, &evens);
    MPI_Group_excl(world, ne, ev, &odds);
    MPI_Group_size(evens, &gs);
    CHECK(gs == ne, "incl size");
    MPI_Group_size(odds, &gs);
    CHECK(gs == size - ne, "excl size");
    MPI_Group_rank(evens, &gr);
    CHECK(gr == (rank % 2 ? MPI_UNDEFINED : rank / 2), "incl rank %d", gr);
    int *wr = malloc(size * sizeof(int)), *tr = malloc(size * sizeof(int));
    for (int i = 0; i < size; i++)
        wr[i] = i;
    MPI_Group_translate_ranks(world, size, wr, odds, tr);
    for (int i = 0; i < size; i++)
        CHECK(tr[i] == (i % 2 ? i / 2 : MPI_UNDEFINED), "translate %d -> %d", i, tr[i]);

    /* Comm_create over the evens (collective over WORLD) */
    MPI_Comm ecomm;
    MPI_Comm_create(MPI_COMM_WORLD, evens, &ecomm);
    CHECK((rank % 2 == 0) == (ecomm != MPI_COMM_NULL), "comm_create membership");
    int esum = -1;
    if (ecomm != MPI_COMM_NULL) {
        int er;
        MPI_Comm_rank(ecomm, &er);
        CHECK(er == rank / 2, "comm_create rank");
        MPI_Allreduce(&rank, &esum, 1, MPI_INT, MPI_SUM, ecomm);
        MPI_Comm_free(&ecomm);
        CHECK(ecomm == MPI_COMM_NULL, "comm_free");
    }
    /* Comm_create_group over the odds (only they call it) */
    int osum = -1;
    if (rank % 2) {
        MPI_Comm ocomm;
        MPI_Comm_create_group(MPI_COMM_WORLD, odds, 7, &ocomm);
        int orank;
        MPI_Comm_rank(ocomm, &orank);
        CHECK(orank == rank / 2, "create_group rank");
        MPI_Allreduce(&rank, &osum, 1, MPI_INT, MPI_SUM, ocomm);
        MPI_Comm_free(&ocomm);
    }
    int both[2] = {esum, osum}, bmax[2];
    MPI_Allreduce(both, bmax, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    SAY("group_sums %d %d", bmax[0], bmax[1]);
    CHECK(bmax[0] == sums[0] && bmax[1] == (size > 1 ? sums[1] : -1), "group sums");

    MPI_Group_free(&evens);
    MPI_Group_free(&odds);
    MPI_Group_free(&world);
    CHECK(world == MPI_GROUP_NULL, "group_free");
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
    free(ev);
    free(wr);
    free(tr);
    return check_finish();
}
