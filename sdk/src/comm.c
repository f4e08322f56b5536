/*
 * comm.c — communicators, groups, Cartesian and distributed graph
 * topologies as objects: the predefined ones (zmpi_comm_init), groups and
 * what can be made of them locally, every query (rank, size, name, error
 * handler, coordinates, neighbours), and freeing. Nothing here sends a
 * message, so the engine and the collectives may ask it about a
 * communicator (zmpi_comm_ok, zmpi_neighbors); making a communicator is
 * collective, and is comm_create.c's, above the collectives in the
 * library's layers (scripts/c-cycles.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zmpi.h"

struct zmpi_group zmpi_group_empty = {1, 0, NULL, MPI_UNDEFINED, 1};

static struct zmpi_group world_group, self_group;

void zmpi_comm_init(int rank, int size)
{
    world_group.refs = 1;
    world_group.predefined = 1;
    world_group.size = size;
    world_group.world = malloc(size * sizeof(int));
    if (!world_group.world)
        abort();
    for (int i = 0; i < size; i++)
        world_group.world[i] = i;
    world_group.me = rank;
    self_group.refs = 1;
    self_group.predefined = 1;
    self_group.size = 1;
    self_group.world = malloc(sizeof(int));
    if (!self_group.world)
        abort();
    self_group.world[0] = rank;
    self_group.me = 0;
    zmpi_comm_world = (struct zmpi_comm){1, 0, rank, size, &world_group, MPI_ERRORS_ARE_FATAL,
                                         NULL, NULL, NULL};
    zmpi_comm_self = (struct zmpi_comm){1, 2, 0, 1, &self_group, MPI_ERRORS_ARE_FATAL,
                                        NULL, NULL, NULL};
}

int zmpi_comm_ok(MPI_Comm c) { return c && c->group && c->size > 0; }

/* A new group of n world ranks (copied). */
struct zmpi_group *zmpi_group_new(int n, const int *world)
{
    struct zmpi_group *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->refs = 1;
    g->size = n;
    g->world = malloc((n ? n : 1) * sizeof(int));
    if (!g->world) {
        free(g);
        return NULL;
    }
    if (n)
        memcpy(g->world, world, n * sizeof(int));
    g->me = MPI_UNDEFINED;
    for (int i = 0; i < n; i++)
        if (world[i] == zmpi_world_rank)
            g->me = i;
    return g;
}

void zmpi_group_drop(struct zmpi_group *g)
{
    if (g && !g->predefined) {
        free(g->world);
        free(g);
    }
}

void zmpi_cart_drop(struct zmpi_cart *c)
{
    if (c) {
        free(c->dims);
        free(c->periods);
        free(c);
    }
}

void zmpi_dgraph_drop(struct zmpi_dgraph *d)
{
    if (d) {
        free(d->sources);
        free(d->sourceweights);
        free(d->destinations);
        free(d->destweights);
        free(d);
    }
}

int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
    CHECK_COMM("MPI_Comm_rank", comm);
    *rank = comm->rank;
    return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm comm, int *size)
{
    CHECK_COMM("MPI_Comm_size", comm);
    *size = comm->size;
    return MPI_SUCCESS;
}

int MPI_Comm_test_inter(MPI_Comm comm, int *flag)
{
    CHECK_COMM("MPI_Comm_test_inter", comm);
    *flag = 0;
    return MPI_SUCCESS;
}

int MPI_Comm_set_name(MPI_Comm comm, const char *name)
{
    CHECK_COMM("MPI_Comm_set_name", comm);
    if (!name)
        return zmpi_error(comm, MPI_ERR_ARG, "MPI_Comm_set_name", "null name");
    size_t n = strnlen(name, MPI_MAX_OBJECT_NAME - 1);
    char *copy = malloc(n + 1);
    if (!copy)
        return zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_set_name", "out of memory");
    memcpy(copy, name, n);
    copy[n] = 0;
    free(comm->name);
    comm->name = copy;
    return MPI_SUCCESS;
}

int MPI_Comm_get_name(MPI_Comm comm, char *name, int *len)
{
    CHECK_COMM("MPI_Comm_get_name", comm);
    const char *s = comm->name                ? comm->name
                    : comm == MPI_COMM_WORLD ? "MPI_COMM_WORLD"
                    : comm == MPI_COMM_SELF  ? "MPI_COMM_SELF"
                                             : "";
    *len = snprintf(name, MPI_MAX_OBJECT_NAME, "%s", s);
    return MPI_SUCCESS;
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

int MPI_Comm_free(MPI_Comm *comm)
{
    CHECK_COMM("MPI_Comm_free", *comm);
    if ((*comm)->predefined)
        return zmpi_error(*comm, MPI_ERR_COMM, "MPI_Comm_free", "cannot free a predefined communicator");
    zmpi_group_drop((*comm)->group);
    zmpi_cart_drop((*comm)->cart);
    zmpi_dgraph_drop((*comm)->dgraph);
    free((*comm)->name);
    free(*comm);
    *comm = MPI_COMM_NULL;
    return MPI_SUCCESS;
}

/* MPI_IDENT for the same members in the same order, MPI_SIMILAR for the same
 * members in another order, else MPI_UNEQUAL. */
static int compare_groups(const struct zmpi_group *a, const struct zmpi_group *b)
{
    if (a->size != b->size)
        return MPI_UNEQUAL;
    int same_order = 1;
    for (int i = 0; i < a->size; i++)
        if (a->world[i] != b->world[i])
            same_order = 0;
    if (same_order)
        return MPI_IDENT;
    for (int i = 0; i < a->size; i++) {
        int found = 0;
        for (int j = 0; j < b->size && !found; j++)
            found = a->world[i] == b->world[j];
        if (!found)
            return MPI_UNEQUAL;
    }
    return MPI_SIMILAR;
}

int MPI_Comm_compare(MPI_Comm a, MPI_Comm b, int *result)
{
    CHECK_COMM("MPI_Comm_compare", a);
    CHECK_COMM("MPI_Comm_compare", b);
    if (a == b) {
        *result = MPI_IDENT;
        return MPI_SUCCESS;
    }
    int g = compare_groups(a->group, b->group);
    *result = g == MPI_IDENT ? MPI_CONGRUENT : g;
    return MPI_SUCCESS;
}

int MPI_Comm_group(MPI_Comm comm, MPI_Group *group)
{
    CHECK_COMM("MPI_Comm_group", comm);
    *group = zmpi_group_new(comm->size, comm->group->world);
    return *group ? MPI_SUCCESS
                  : zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_group", "out of memory");
}

/* ---- groups ---- */

#define CHECK_GROUP(fn, g)                                                    \
    do {                                                                      \
        if (!(g))                                                             \
            return zmpi_error(NULL, MPI_ERR_GROUP, fn, "null group");         \
    } while (0)

int MPI_Group_size(MPI_Group g, int *size)
{
    CHECK_GROUP("MPI_Group_size", g);
    *size = g->size;
    return MPI_SUCCESS;
}

int MPI_Group_rank(MPI_Group g, int *rank)
{
    CHECK_GROUP("MPI_Group_rank", g);
    *rank = g->me;
    return MPI_SUCCESS;
}

int MPI_Group_free(MPI_Group *g)
{
    CHECK_GROUP("MPI_Group_free", *g);
    zmpi_group_drop(*g);
    *g = MPI_GROUP_NULL;
    return MPI_SUCCESS;
}

int MPI_Group_incl(MPI_Group g, int n, const int ranks[], MPI_Group *out)
{
    CHECK_GROUP("MPI_Group_incl", g);
    if (n < 0 || n > g->size)
        return zmpi_error(NULL, MPI_ERR_ARG, "MPI_Group_incl", "invalid count");
    int *w = malloc((n ? n : 1) * sizeof(int));
    if (!w)
        return zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Group_incl", "out of memory");
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= g->size) {
            free(w);
            return zmpi_error(NULL, MPI_ERR_RANK, "MPI_Group_incl", "rank outside the group");
        }
        w[i] = g->world[ranks[i]];
    }
    *out = n ? zmpi_group_new(n, w) : MPI_GROUP_EMPTY;
    free(w);
    return *out ? MPI_SUCCESS : zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Group_incl", "out of memory");
}

int MPI_Group_excl(MPI_Group g, int n, const int ranks[], MPI_Group *out)
{
    CHECK_GROUP("MPI_Group_excl", g);
    if (n < 0 || n > g->size)
        return zmpi_error(NULL, MPI_ERR_ARG, "MPI_Group_excl", "invalid count");
    char *drop = calloc(g->size ? g->size : 1, 1);
    int *w = malloc((g->size ? g->size : 1) * sizeof(int));
    if (!drop || !w) {
        free(drop);
        free(w);
        return zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Group_excl", "out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= g->size) {
            free(drop);
            free(w);
            return zmpi_error(NULL, MPI_ERR_RANK, "MPI_Group_excl", "rank outside the group");
        }
        drop[ranks[i]] = 1;
    }
    int k = 0;
    for (int i = 0; i < g->size; i++)
        if (!drop[i])
            w[k++] = g->world[i];
    *out = k ? zmpi_group_new(k, w) : MPI_GROUP_EMPTY;
    free(drop);
    free(w);
    return *out ? MPI_SUCCESS : zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Group_excl", "out of memory");
}

int MPI_Group_translate_ranks(MPI_Group a, int n, const int r1[], MPI_Group b, int r2[])
{
    CHECK_GROUP("MPI_Group_translate_ranks", a);
    CHECK_GROUP("MPI_Group_translate_ranks", b);
    for (int i = 0; i < n; i++) {
        if (r1[i] == MPI_PROC_NULL) {
            r2[i] = MPI_PROC_NULL;
            continue;
        }
        if (r1[i] < 0 || r1[i] >= a->size)
            return zmpi_error(NULL, MPI_ERR_RANK, "MPI_Group_translate_ranks",
                              "rank outside the group");
        r2[i] = MPI_UNDEFINED;
        for (int j = 0; j < b->size; j++)
            if (b->world[j] == a->world[r1[i]]) {
                r2[i] = j;
                break;
            }
    }
    return MPI_SUCCESS;
}

int MPI_Group_compare(MPI_Group a, MPI_Group b, int *result)
{
    CHECK_GROUP("MPI_Group_compare", a);
    CHECK_GROUP("MPI_Group_compare", b);
    *result = compare_groups(a, b);
    return MPI_SUCCESS;
}

/* ---- Cartesian topologies ---- */

int MPI_Dims_create(int nnodes, int ndims, int dims[])
{
    if (nnodes < 1 || ndims < 0)
        return zmpi_error(NULL, MPI_ERR_DIMS, "MPI_Dims_create", "invalid arguments");
    int fixed = 1, free_dims = 0;
    for (int i = 0; i < ndims; i++) {
        if (dims[i] < 0)
            return zmpi_error(NULL, MPI_ERR_DIMS, "MPI_Dims_create", "negative dimension");
        if (dims[i] > 0)
            fixed *= dims[i];
        else
            free_dims++;
    }
    if (fixed == 0 || nnodes % fixed)
        return zmpi_error(NULL, MPI_ERR_DIMS, "MPI_Dims_create",
                          "nnodes is not a multiple of the fixed dimensions");
    int rest = nnodes / fixed;
    if (free_dims == 0)
        return rest == 1 ? MPI_SUCCESS
                         : zmpi_error(NULL, MPI_ERR_DIMS, "MPI_Dims_create",
                                      "the fixed dimensions do not multiply to nnodes");
    /* Prime factors, largest first, each given to the smallest free dimension. */
    int f[32], nf = 0;
    for (int p = 2; rest > 1 && nf < 32; ) {
        if ((long long)p * p > rest) {
            f[nf++] = rest;
            break;
        }
        if (rest % p == 0) {
            f[nf++] = p;
            rest /= p;
        } else
            p++;
    }
    int *d = malloc(free_dims * sizeof(int));
    if (!d)
        return zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Dims_create", "out of memory");
    for (int i = 0; i < free_dims; i++)
        d[i] = 1;
    for (int i = nf - 1; i >= 0; i--) {
        int s = 0;
        for (int j = 1; j < free_dims; j++)
            if (d[j] < d[s])
                s = j;
        d[s] *= f[i];
    }
    /* non-increasing order */
    for (int i = 0; i < free_dims; i++)
        for (int j = i + 1; j < free_dims; j++)
            if (d[j] > d[i]) {
                int x = d[i];
                d[i] = d[j];
                d[j] = x;
            }
    for (int i = 0, k = 0; i < ndims; i++)
        if (dims[i] == 0)
            dims[i] = d[k++];
    free(d);
    return MPI_SUCCESS;
}

int MPI_Cart_rank(MPI_Comm comm, const int coords[], int *rank)
{
    CHECK_CART("MPI_Cart_rank", comm);
    struct zmpi_cart *c = comm->cart;
    int r = 0;
    for (int i = 0; i < c->ndims; i++) {
        int x = coords[i];
        if (x < 0 || x >= c->dims[i]) {
            if (!c->periods[i])
                return zmpi_error(comm, MPI_ERR_ARG, "MPI_Cart_rank",
                                  "coordinate outside a non-periodic dimension");
            x %= c->dims[i];
            if (x < 0)
                x += c->dims[i];
        }
        r = r * c->dims[i] + x;
    }
    *rank = r;
    return MPI_SUCCESS;
}

int MPI_Cart_coords(MPI_Comm comm, int rank, int maxdims, int coords[])
{
    CHECK_CART("MPI_Cart_coords", comm);
    struct zmpi_cart *c = comm->cart;
    if (rank < 0 || rank >= comm->size)
        return zmpi_error(comm, MPI_ERR_RANK, "MPI_Cart_coords", "rank outside the communicator");
    for (int i = c->ndims - 1; i >= 0; i--) {
        if (i < maxdims)
            coords[i] = rank % c->dims[i];
        rank /= c->dims[i];
    }
    return MPI_SUCCESS;
}

int MPI_Cart_shift(MPI_Comm comm, int dir, int disp, int *src, int *dest)
{
    CHECK_CART("MPI_Cart_shift", comm);
    struct zmpi_cart *c = comm->cart;
    if (dir < 0 || dir >= c->ndims)
        return zmpi_error(comm, MPI_ERR_DIMS, "MPI_Cart_shift", "invalid direction");
    int coords[64];
    if (c->ndims > 64)
        return zmpi_error(comm, MPI_ERR_DIMS, "MPI_Cart_shift", "more than 64 dimensions");
    MPI_Cart_coords(comm, comm->rank, c->ndims, coords);
    int me = coords[dir], n = c->dims[dir];
    int out[2], at[2] = {me - disp, me + disp};
    for (int k = 0; k < 2; k++) {
        int x = at[k];
        if (x < 0 || x >= n) {
            if (!c->periods[dir]) {
                out[k] = MPI_PROC_NULL;
                continue;
            }
            x %= n;
            if (x < 0)
                x += n;
        }
        coords[dir] = x;
        MPI_Cart_rank(comm, coords, &out[k]);
    }
    *src = out[0];
    *dest = out[1];
    return MPI_SUCCESS;
}

int MPI_Cart_get(MPI_Comm comm, int maxdims, int dims[], int periods[], int coords[])
{
    CHECK_CART("MPI_Cart_get", comm);
    struct zmpi_cart *c = comm->cart;
    for (int i = 0; i < c->ndims && i < maxdims; i++) {
        dims[i] = c->dims[i];
        periods[i] = c->periods[i];
    }
    return MPI_Cart_coords(comm, comm->rank, maxdims, coords);
}

int MPI_Cartdim_get(MPI_Comm comm, int *ndims)
{
    CHECK_CART("MPI_Cartdim_get", comm);
    *ndims = comm->cart->ndims;
    return MPI_SUCCESS;
}

int MPI_Topo_test(MPI_Comm comm, int *status)
{
    CHECK_COMM("MPI_Topo_test", comm);
    *status = comm->cart ? MPI_CART : comm->dgraph ? MPI_DIST_GRAPH : MPI_UNDEFINED;
    return MPI_SUCCESS;
}

/* ---- distributed graph topologies ---- */

#define CHECK_DGRAPH(fn, c)                                                               \
    do {                                                                                  \
        CHECK_COMM(fn, c);                                                                \
        if (!(c)->dgraph)                                                                 \
            return zmpi_error(c, MPI_ERR_TOPOLOGY, fn, "not a distributed graph communicator"); \
    } while (0)

int MPI_Dist_graph_neighbors_count(MPI_Comm comm, int *indegree, int *outdegree, int *weighted)
{
    CHECK_DGRAPH("MPI_Dist_graph_neighbors_count", comm);
    *indegree = comm->dgraph->indegree;
    *outdegree = comm->dgraph->outdegree;
    *weighted = comm->dgraph->weighted;
    return MPI_SUCCESS;
}

int MPI_Dist_graph_neighbors(MPI_Comm comm, int maxin, int sources[], int sourceweights[],
                             int maxout, int destinations[], int destweights[])
{
    CHECK_DGRAPH("MPI_Dist_graph_neighbors", comm);
    struct zmpi_dgraph *d = comm->dgraph;
    int w = d->weighted;
    for (int i = 0; i < d->indegree && i < maxin; i++) {
        sources[i] = d->sources[i];
        if (w && sourceweights && sourceweights != MPI_UNWEIGHTED)
            sourceweights[i] = d->sourceweights[i];
    }
    for (int i = 0; i < d->outdegree && i < maxout; i++) {
        destinations[i] = d->destinations[i];
        if (w && destweights && destweights != MPI_UNWEIGHTED)
            destweights[i] = d->destweights[i];
    }
    return MPI_SUCCESS;
}

int zmpi_neighbors(MPI_Comm comm, int *indegree, const int **sources, int *outdegree,
                   const int **destinations, int **scratch)
{
    *scratch = NULL;
    if (comm->dgraph) {
        *indegree = comm->dgraph->indegree;
        *sources = comm->dgraph->sources;
        *outdegree = comm->dgraph->outdegree;
        *destinations = comm->dgraph->destinations;
        return 0;
    }
    if (!comm->cart)
        return -1;
    /* A Cartesian rank's neighbours, dimension by dimension: the one below,
     * then the one above; sources and destinations are the same list. */
    int nd = comm->cart->ndims;
    int *n = malloc((2 * nd + 1) * sizeof(int));
    if (!n)
        abort();
    for (int i = 0; i < nd; i++)
        MPI_Cart_shift(comm, i, 1, &n[2 * i], &n[2 * i + 1]);
    *indegree = *outdegree = 2 * nd;
    *sources = *destinations = n;
    *scratch = n;
    return 0;
}
