/*
 * comm_create.c — making communicators: Comm_dup, Comm_split,
 * Comm_create(_group), and the Cartesian and distributed graph
 * constructors. Collective over the old communicator: its members agree on
 * the new one's context ids, and on who is in it, with collectives
 * (coll.c), so this file sits above them in the library's layers
 * (scripts/c-cycles.py); the objects themselves and every query on them
 * are comm.c's, below the collectives.
 *
 * Every communicator has two context ids, ctx for point-to-point messages
 * and ctx + 1 for the library's collectives; new ones are agreed by the
 * members with an Allreduce(MAX) of each member's next free id, so an id is
 * never used by two communicators a process belongs to.
 */
#include <stdlib.h>
#include <string.h>
#include "zmpi.h"

int zmpi_next_ctx = 4;

/* A copy of n ints (uninitialized if v is NULL). */
static int *ints_dup(int n, const int *v)
{
    int *p = malloc((n > 0 ? n : 1) * sizeof(int));
    if (p && v && n > 0)
        memcpy(p, v, n * sizeof(int));
    return p;
}

static struct zmpi_cart *cart_new(int ndims, const int *dims, const int *periods)
{
    struct zmpi_cart *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ndims = ndims;
    c->dims = malloc((ndims ? ndims : 1) * sizeof(int));
    c->periods = malloc((ndims ? ndims : 1) * sizeof(int));
    if (!c->dims || !c->periods) {
        free(c->dims);
        free(c->periods);
        free(c);
        return NULL;
    }
    for (int i = 0; i < ndims; i++) {
        c->dims[i] = dims[i];
        c->periods[i] = periods[i] != 0;
    }
    return c;
}

/* A distributed graph (the arrays copied; NULL weights are all 1). */
static struct zmpi_dgraph *dgraph_new(int indegree, const int *sources, const int *sw,
                                      int outdegree, const int *dests, const int *dw,
                                      int weighted)
{
    struct zmpi_dgraph *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->indegree = indegree;
    d->outdegree = outdegree;
    d->weighted = weighted;
    d->sources = ints_dup(indegree, sources);
    d->destinations = ints_dup(outdegree, dests);
    d->sourceweights = ints_dup(indegree, sw);
    d->destweights = ints_dup(outdegree, dw);
    if (!d->sources || !d->destinations || !d->sourceweights || !d->destweights) {
        zmpi_dgraph_drop(d);
        return NULL;
    }
    for (int i = 0; i < indegree && !sw; i++)
        d->sourceweights[i] = 1;
    for (int i = 0; i < outdegree && !dw; i++)
        d->destweights[i] = 1;
    return d;
}

/* A communicator over group g (taken over) with context ctx. */
static MPI_Comm comm_new(struct zmpi_group *g, int ctx, MPI_Errhandler errh)
{
    struct zmpi_comm *c = calloc(1, sizeof *c);
    if (!c) {
        zmpi_group_drop(g);
        return NULL;
    }
    c->ctx = ctx;
    c->group = g;
    c->rank = g->me;
    c->size = g->size;
    c->errh = errh;
    return c;
}

int zmpi_new_ctx(MPI_Comm comm, int *ctx)
{
    int v = zmpi_next_ctx;
    int err = zmpi_allreduce_int_max(&v, comm);
    if (err)
        return err;
    zmpi_next_ctx = v + 2;
    *ctx = v;
    return MPI_SUCCESS;
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *out)
{
    CHECK_COMM("MPI_Comm_dup", comm);
    int ctx, err = zmpi_new_ctx(comm, &ctx);
    if (err)
        return zmpi_error(comm, err, "MPI_Comm_dup", "could not agree on a context");
    struct zmpi_group *g = zmpi_group_new(comm->size, comm->group->world);
    MPI_Comm c = g ? comm_new(g, ctx, comm->errh) : NULL;
    if (!c)
        return zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_dup", "out of memory");
    if (comm->cart) {
        c->cart = cart_new(comm->cart->ndims, comm->cart->dims, comm->cart->periods);
        if (!c->cart)
            return zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_dup", "out of memory");
    }
    if (comm->dgraph) {
        struct zmpi_dgraph *d = comm->dgraph;
        c->dgraph = dgraph_new(d->indegree, d->sources, d->sourceweights, d->outdegree,
                               d->destinations, d->destweights, d->weighted);
        if (!c->dgraph)
            return zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_dup", "out of memory");
    }
    *out = c;
    return MPI_SUCCESS;
}

struct member {
    int color, key, rank;
};

static int by_key(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out)
{
    CHECK_COMM("MPI_Comm_split", comm);
    if (color < 0 && color != MPI_UNDEFINED)
        return zmpi_error(comm, MPI_ERR_ARG, "MPI_Comm_split", "negative color");
    int n = comm->size;
    int mine[2] = {color, key};
    int *all = malloc(2 * n * sizeof(int));
    struct member *m = malloc(n * sizeof *m);
    if (!all || !m) {
        free(all);
        free(m);
        return zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_split", "out of memory");
    }
    MPI_Errhandler h = comm->errh;
    comm->errh = MPI_ERRORS_RETURN;
    int err = MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, comm);
    comm->errh = h;
    int ctx = 0;
    if (!err)
        err = zmpi_new_ctx(comm, &ctx);
    if (err) {
        free(all);
        free(m);
        return zmpi_error(comm, err, "MPI_Comm_split", "could not agree on the new groups");
    }
    *out = MPI_COMM_NULL;
    if (color != MPI_UNDEFINED) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (all[2 * i] == color)
                m[k++] = (struct member){color, all[2 * i + 1], i};
        qsort(m, k, sizeof *m, by_key);
        int *world = malloc(k * sizeof(int));
        if (!world)
            abort();
        for (int i = 0; i < k; i++)
            world[i] = comm->group->world[m[i].rank];
        struct zmpi_group *g = zmpi_group_new(k, world);
        free(world);
        *out = g ? comm_new(g, ctx, comm->errh) : NULL;
        if (!*out)
            abort();
    }
    free(all);
    free(m);
    return MPI_SUCCESS;
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *out)
{
    CHECK_COMM("MPI_Comm_create", comm);
    if (!group)
        return zmpi_error(comm, MPI_ERR_GROUP, "MPI_Comm_create", "null group");
    int ctx, err = zmpi_new_ctx(comm, &ctx);
    if (err)
        return zmpi_error(comm, err, "MPI_Comm_create", "could not agree on a context");
    *out = MPI_COMM_NULL;
    if (group->me == MPI_UNDEFINED)
        return MPI_SUCCESS;
    struct zmpi_group *g = zmpi_group_new(group->size, group->world);
    *out = g ? comm_new(g, ctx, comm->errh) : NULL;
    return *out ? MPI_SUCCESS : zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_create", "out of memory");
}

int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *out)
{
    CHECK_COMM("MPI_Comm_create_group", comm);
    (void)tag;
    if (!group)
        return zmpi_error(comm, MPI_ERR_GROUP, "MPI_Comm_create_group", "null group");
    *out = MPI_COMM_NULL;
    if (group->me == MPI_UNDEFINED)
        return MPI_SUCCESS;
    /* Only the group's members take part: they agree on a context over a
     * provisional communicator whose collective messages travel in comm's
     * point-to-point context under a tag user messages cannot carry. */
    struct zmpi_comm tmp = {0, comm->ctx - 1, group->me, group->size, group, MPI_ERRORS_RETURN,
                            NULL, NULL, NULL};
    int ctx, err = zmpi_new_ctx(&tmp, &ctx);
    if (err)
        return zmpi_error(comm, err, "MPI_Comm_create_group", "could not agree on a context");
    struct zmpi_group *g = zmpi_group_new(group->size, group->world);
    *out = g ? comm_new(g, ctx, comm->errh) : NULL;
    return *out ? MPI_SUCCESS
                : zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_create_group", "out of memory");
}

/* ---- Cartesian topologies ---- */

int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[],
                    int reorder, MPI_Comm *out)
{
    CHECK_COMM("MPI_Cart_create", comm);
    (void)reorder;
    long long prod = 1;
    if (ndims < 0)
        return zmpi_error(comm, MPI_ERR_DIMS, "MPI_Cart_create", "negative ndims");
    for (int i = 0; i < ndims; i++) {
        if (dims[i] <= 0)
            return zmpi_error(comm, MPI_ERR_DIMS, "MPI_Cart_create", "non-positive dimension");
        prod *= dims[i];
        if (prod > comm->size)
            return zmpi_error(comm, MPI_ERR_DIMS, "MPI_Cart_create",
                              "the grid has more points than the communicator has ranks");
    }
    int err = MPI_Comm_split(comm, comm->rank < prod ? 0 : MPI_UNDEFINED, comm->rank, out);
    if (err || !*out)
        return err;
    (*out)->cart = cart_new(ndims, dims, periods);
    return (*out)->cart ? MPI_SUCCESS
                        : zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Cart_create", "out of memory");
}

int MPI_Cart_sub(MPI_Comm comm, const int remain[], MPI_Comm *out)
{
    CHECK_CART("MPI_Cart_sub", comm);
    struct zmpi_cart *c = comm->cart;
    int coords[64], dims[64], periods[64], nd = 0;
    if (c->ndims > 64)
        return zmpi_error(comm, MPI_ERR_DIMS, "MPI_Cart_sub", "more than 64 dimensions");
    MPI_Cart_coords(comm, comm->rank, c->ndims, coords);
    int color = 0, key = 0;
    for (int i = 0; i < c->ndims; i++) {
        if (remain[i]) {
            key = key * c->dims[i] + coords[i];
            dims[nd] = c->dims[i];
            periods[nd] = c->periods[i];
            nd++;
        } else
            color = color * c->dims[i] + coords[i];
    }
    int err = MPI_Comm_split(comm, color, key, out);
    if (err)
        return err;
    (*out)->cart = cart_new(nd, dims, periods);
    return (*out)->cart ? MPI_SUCCESS
                        : zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Cart_sub", "out of memory");
}

/* ---- distributed graph topologies ---- */

static int check_ranks(MPI_Comm comm, int n, const int *ranks)
{
    for (int i = 0; i < n; i++)
        if (ranks[i] < 0 || ranks[i] >= comm->size)
            return 0;
    return 1;
}

int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[],
                                   const int sourceweights[], int outdegree,
                                   const int destinations[], const int destweights[],
                                   MPI_Info info, int reorder, MPI_Comm *out)
{
    CHECK_COMM("MPI_Dist_graph_create_adjacent", comm);
    (void)info;
    (void)reorder;
    if (indegree < 0 || outdegree < 0)
        return zmpi_error(comm, MPI_ERR_ARG, "MPI_Dist_graph_create_adjacent", "negative degree");
    if (!check_ranks(comm, indegree, sources) || !check_ranks(comm, outdegree, destinations))
        return zmpi_error(comm, MPI_ERR_RANK, "MPI_Dist_graph_create_adjacent",
                          "neighbour outside the communicator");
    int weighted = sourceweights != MPI_UNWEIGHTED && destweights != MPI_UNWEIGHTED;
    const int *sw = weighted && sourceweights != MPI_WEIGHTS_EMPTY ? sourceweights : NULL;
    const int *dw = weighted && destweights != MPI_WEIGHTS_EMPTY ? destweights : NULL;
    int err = MPI_Comm_dup(comm, out);
    if (err)
        return err;
    zmpi_cart_drop((*out)->cart);
    (*out)->cart = NULL;
    zmpi_dgraph_drop((*out)->dgraph);
    (*out)->dgraph = dgraph_new(indegree, sources, sw, outdegree, destinations, dw, weighted);
    return (*out)->dgraph ? MPI_SUCCESS
                          : zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Dist_graph_create_adjacent",
                                       "out of memory");
}

/* Every rank names edges (sources[i] -> destinations[...], degrees[i] of
 * them) anywhere in the graph: each edge goes to both of its ends, by an
 * Alltoall of counts and an Alltoallv of (source, destination, weight). */
int MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[], const int degrees[],
                          const int destinations[], const int weights[], MPI_Info info,
                          int reorder, MPI_Comm *out)
{
    CHECK_COMM("MPI_Dist_graph_create", comm);
    (void)info;
    (void)reorder;
    const char *fn = "MPI_Dist_graph_create";
    int size = comm->size, edges = 0;
    if (n < 0)
        return zmpi_error(comm, MPI_ERR_ARG, fn, "negative count");
    for (int i = 0; i < n; i++) {
        if (degrees[i] < 0)
            return zmpi_error(comm, MPI_ERR_ARG, fn, "negative degree");
        edges += degrees[i];
    }
    if (!check_ranks(comm, n, sources) || !check_ranks(comm, edges, destinations))
        return zmpi_error(comm, MPI_ERR_RANK, fn, "node outside the communicator");
    int weighted = weights != MPI_UNWEIGHTED;
    const int *w = weighted && weights != MPI_WEIGHTS_EMPTY ? weights : NULL;
    /* Each edge is sent as 3 ints to its source and to its destination. */
    int *scount = calloc(size, sizeof(int)), *rcount = calloc(size, sizeof(int));
    int *sdisp = calloc(size, sizeof(int)), *rdisp = calloc(size, sizeof(int));
    int *sbuf = malloc((6 * edges + 1) * sizeof(int));
    if (!scount || !rcount || !sdisp || !rdisp || !sbuf)
        abort();
    for (int i = 0, e = 0; i < n; i++)
        for (int k = 0; k < degrees[i]; k++, e++) {
            scount[sources[i]] += 3;
            scount[destinations[e]] += 3;
        }
    for (int r = 1; r < size; r++)
        sdisp[r] = sdisp[r - 1] + scount[r - 1];
    int *fill = ints_dup(size, sdisp);
    if (!fill)
        abort();
    for (int i = 0, e = 0; i < n; i++)
        for (int k = 0; k < degrees[i]; k++, e++) {
            int edge[3] = {sources[i], destinations[e], w ? w[e] : 1};
            memcpy(sbuf + fill[sources[i]], edge, sizeof edge);
            fill[sources[i]] += 3;
            memcpy(sbuf + fill[destinations[e]], edge, sizeof edge);
            fill[destinations[e]] += 3;
        }
    MPI_Errhandler h = comm->errh;
    comm->errh = MPI_ERRORS_RETURN;
    int err = MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, comm);
    int total = 0;
    for (int r = 0; r < size; r++) {
        rdisp[r] = total;
        total += rcount[r];
    }
    int *rbuf = malloc((total + 1) * sizeof(int));
    if (!rbuf)
        abort();
    if (!err)
        err = MPI_Alltoallv(sbuf, scount, sdisp, MPI_INT, rbuf, rcount, rdisp, MPI_INT, comm);
    comm->errh = h;
    int indeg = 0, outdeg = 0, me = comm->rank;
    size_t most = (total / 3 + 1) * sizeof(int);
    int *in = malloc(most), *inw = malloc(most), *outr = malloc(most), *outw = malloc(most);
    if (!in || !inw || !outr || !outw)
        abort();
    /* An edge from this rank to itself arrives twice in a row: the first
     * copy counts as the out-edge, the second as the in-edge. */
    int second = 0;
    for (int i = 0; i + 2 < total && !err; i += 3) {
        int src = rbuf[i], dst = rbuf[i + 1], wt = rbuf[i + 2];
        int as_source = src == me, as_dest = dst == me;
        if (src == me && dst == me) {
            as_source = !second;
            as_dest = second;
            second = !second;
        }
        if (as_source) {
            outr[outdeg] = dst;
            outw[outdeg++] = wt;
        }
        if (as_dest) {
            in[indeg] = src;
            inw[indeg++] = wt;
        }
    }
    free(scount);
    free(rcount);
    free(sdisp);
    free(rdisp);
    free(sbuf);
    free(fill);
    free(rbuf);
    if (!err)
        err = MPI_Dist_graph_create_adjacent(comm, indeg, in, weighted ? inw : MPI_UNWEIGHTED,
                                             outdeg, outr, weighted ? outw : MPI_UNWEIGHTED,
                                             info, reorder, out);
    else
        err = zmpi_error(comm, err, fn, "could not exchange the edges");
    free(in);
    free(inw);
    free(outr);
    free(outw);
    return err;
}
