/* Info objects (create/set/get/get_valuelen/get_nkeys/get_nthkey/delete/
 * dup/free), datatype and communicator names, MPI_AINT, distributed graph
 * topologies (adjacent with weights, and general), neighbourhood
 * collectives on a distributed graph and on a periodic Cartesian ring,
 * and Alltoallw. */
#include <string.h>
#include "check.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, flag, len;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;

    /* Info */
    MPI_Info info, copy;
    char value[MPI_MAX_INFO_VAL + 1], key[MPI_MAX_INFO_KEY + 1];
    MPI_Info_create(&info);
    MPI_Info_set(info, "no_locks", "true");
    MPI_Info_set(info, "accumulate_ordering", "none");
    MPI_Info_set(info, "no_locks", "false");
    int nkeys = -1;
    MPI_Info_get_nkeys(info, &nkeys);
    CHECK(nkeys == 2, "nkeys %d", nkeys);
    MPI_Info_get(info, "no_locks", MPI_MAX_INFO_VAL, value, &flag);
    CHECK(flag && strcmp(value, "false") == 0, "get no_locks %d %s", flag, value);
    MPI_Info_get(info, "accumulate_ordering", 3, value, &flag);
    CHECK(flag && strcmp(value, "non") == 0, "get truncated %s", value);
    MPI_Info_get_valuelen(info, "accumulate_ordering", &len, &flag);
    CHECK(flag && len == 4, "valuelen %d", len);
    MPI_Info_get_nthkey(info, 1, key);
    CHECK(strcmp(key, "accumulate_ordering") == 0, "nthkey %s", key);
    MPI_Info_get(info, "absent", MPI_MAX_INFO_VAL, value, &flag);
    CHECK(!flag, "absent key found");
    MPI_Info_dup(info, &copy);
    MPI_Info_delete(info, "no_locks");
    MPI_Info_get_nkeys(info, &nkeys);
    CHECK(nkeys == 1, "nkeys after delete %d", nkeys);
    MPI_Info_get(copy, "no_locks", MPI_MAX_INFO_VAL, value, &flag);
    CHECK(flag && strcmp(value, "false") == 0, "dup kept %s", value);
    MPI_Info_free(&info);
    MPI_Info_free(&copy);
    CHECK(info == MPI_INFO_NULL && copy == MPI_INFO_NULL, "info freed");
    SAY("info ok");

    /* Names */
    char name[MPI_MAX_OBJECT_NAME];
    MPI_Type_get_name(MPI_INT, name, &len);
    CHECK(strcmp(name, "MPI_INT") == 0 && len == 7, "MPI_INT named %s", name);
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(strcmp(name, "MPI_DOUBLE") == 0, "MPI_DOUBLE named %s", name);
    MPI_Type_get_name(MPI_AINT, name, &len);
    CHECK(strcmp(name, "MPI_AINT") == 0, "MPI_AINT named %s", name);
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_get_name(pair, name, &len);
    CHECK(len == 0 && name[0] == 0, "unnamed type is %s", name);
    MPI_Type_set_name(pair, "int pair");
    MPI_Type_get_name(pair, name, &len);
    CHECK(strcmp(name, "int pair") == 0 && len == 8, "named type %s", name);
    MPI_Type_free(&pair);
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0, "world named %s", name);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_name(dup, "workers");
    MPI_Comm_get_name(dup, name, &len);
    CHECK(strcmp(name, "workers") == 0, "dup named %s", name);
    MPI_Comm_free(&dup);
    MPI_Aint a = 1000 + rank, b = -1;
    MPI_Sendrecv(&a, 1, MPI_AINT, right, 1, &b, 1, MPI_AINT, left, 1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(b == 1000 + left, "MPI_AINT sent %ld", (long)b);
    SAY("names ok");

    /* A directed ring with weights: in-neighbour left, out-neighbour right. */
    MPI_Comm ring;
    int w_in = 10 + left, w_out = 10 + rank;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, &w_in, 1, &right, &w_out,
                                   MPI_INFO_NULL, 0, &ring);
    int topo, indeg, outdeg, weighted;
    MPI_Topo_test(ring, &topo);
    CHECK(topo == MPI_DIST_GRAPH, "topology %d", topo);
    MPI_Dist_graph_neighbors_count(ring, &indeg, &outdeg, &weighted);
    CHECK(indeg == 1 && outdeg == 1 && weighted, "counts %d %d %d", indeg, outdeg, weighted);
    int src = -1, srcw = -1, dst = -1, dstw = -1;
    MPI_Dist_graph_neighbors(ring, 1, &src, &srcw, 1, &dst, &dstw);
    CHECK(src == left && srcw == 10 + left && dst == right && dstw == 10 + rank,
          "neighbours %d/%d %d/%d", src, srcw, dst, dstw);
    int mine[2] = {rank, rank * rank}, from_left[2] = {-1, -1};
    MPI_Neighbor_allgather(mine, 2, MPI_INT, from_left, 2, MPI_INT, ring);
    CHECK(from_left[0] == left && from_left[1] == left * left, "neighbor_allgather %d %d",
          from_left[0], from_left[1]);
    int got = -1, counts = 1, displ = 0;
    MPI_Neighbor_alltoallv(&rank, &counts, &displ, MPI_INT, &got, &counts, &displ, MPI_INT, ring);
    CHECK(got == left, "neighbor_alltoallv %d", got);
    MPI_Comm_free(&ring);

    /* The same ring from edges that rank 0 alone names (general form). */
    MPI_Comm ring2;
    int *srcs = malloc(size * sizeof(int)), *degs = malloc(size * sizeof(int));
    int *dsts = malloc(size * sizeof(int)), *wts = malloc(size * sizeof(int));
    for (int r = 0; r < size; r++) {
        srcs[r] = r;
        degs[r] = 1;
        dsts[r] = (r + 1) % size;
        wts[r] = 5 * r;
    }
    MPI_Dist_graph_create(MPI_COMM_WORLD, rank == 0 ? size : 0, srcs, degs, dsts, wts,
                          MPI_INFO_NULL, 0, &ring2);
    MPI_Dist_graph_neighbors_count(ring2, &indeg, &outdeg, &weighted);
    CHECK(indeg == 1 && outdeg == 1 && weighted, "general counts %d %d %d", indeg, outdeg,
          weighted);
    MPI_Dist_graph_neighbors(ring2, 1, &src, &srcw, 1, &dst, &dstw);
    CHECK(src == left && dst == right && srcw == 5 * left && dstw == 5 * rank,
          "general neighbours %d/%d %d/%d", src, srcw, dst, dstw);
    got = -1;
    MPI_Neighbor_alltoall(&rank, 1, MPI_INT, &got, 1, MPI_INT, ring2);
    CHECK(got == left, "neighbor_alltoall %d", got);
    MPI_Comm_free(&ring2);
    free(srcs);
    free(degs);
    free(dsts);
    free(wts);

    /* A periodic Cartesian ring: neighbours below then above. */
    MPI_Comm cart;
    int dims = size, periods = 1;
    MPI_Cart_create(MPI_COMM_WORLD, 1, &dims, &periods, 0, &cart);
    int both[2] = {-1, -1}, out[2] = {100 + rank, 200 + rank};
    MPI_Neighbor_alltoall(out, 1, MPI_INT, both, 1, MPI_INT, cart);
    /* from below: what it sent up; from above: what it sent down */
    CHECK(both[0] == 200 + left && both[1] == 100 + right, "cart neighbor_alltoall %d %d",
          both[0], both[1]);
    int gat[2] = {-1, -1};
    MPI_Neighbor_allgather(&rank, 1, MPI_INT, gat, 1, MPI_INT, cart);
    CHECK(gat[0] == left && gat[1] == right, "cart neighbor_allgather %d %d", gat[0], gat[1]);
    MPI_Comm_free(&cart);
    SAY("graphs ok");

    /* Alltoallw: rank r sends r+1 ints to everyone, doubles come back as
     * their sum; byte displacements. */
    int *sc = malloc(size * sizeof(int)), *sd = malloc(size * sizeof(int));
    int *rc = malloc(size * sizeof(int)), *rd = malloc(size * sizeof(int));
    MPI_Datatype *st = malloc(size * sizeof(MPI_Datatype));
    MPI_Datatype *rt = malloc(size * sizeof(MPI_Datatype));
    int *sbuf = malloc(size * (rank + 1) * sizeof(int)), total = 0;
    for (int r = 0; r < size; r++) {
        total += r + 1;
        sc[r] = rank + 1;
        sd[r] = r * (rank + 1) * (int)sizeof(int);
        st[r] = MPI_INT;
        rt[r] = MPI_INT;
        for (int k = 0; k <= rank; k++)
            sbuf[r * (rank + 1) + k] = 1000 * rank + 10 * r + k;
    }
    int *rbuf = malloc(total * sizeof(int)), at = 0;
    for (int r = 0; r < size; r++) {
        rc[r] = r + 1;
        rd[r] = at * (int)sizeof(int);
        at += r + 1;
    }
    MPI_Alltoallw(sbuf, sc, sd, st, rbuf, rc, rd, rt, MPI_COMM_WORLD);
    int bad = 0;
    for (int r = 0, i = 0; r < size; r++)
        for (int k = 0; k <= r; k++, i++)
            bad += rbuf[i] != 1000 * r + 10 * rank + k;
    CHECK(bad == 0, "alltoallw: %d wrong", bad);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    free(st);
    free(rt);
    free(sbuf);
    free(rbuf);
    SAY("alltoallw %d ints", total);
    return check_finish();
}
