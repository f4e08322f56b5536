/*
 * comm.c — communicators, groups, Cartesian and distributed graph
 * topologies.
 *
 * Every communicator has two context ids, ctx for point-to-point messages
 * and ctx + 1 for the library's collectives; new ones are agreed by the
 * members with an Allreduce(MAX) of each member's next free id, so an id is
 * never used by two communicators a process belongs to.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zmpi.h"

struct zmpi_group zmpi_group_empty = {1, 0, NULL, MPI_UNDEFINED, 1};
int zmpi_next_ctx = 4;

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
static struct zmpi_group *group_new(int n, const int *world)
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

static void group_drop(struct zmpi_group *g)
{
    if (g && !g->predefined) {
        free(g->world);
        free(g);
    }
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

static void cart_drop(struct zmpi_cart *c)
{
    if (c) {
        free(c->dims);
        free(c->periods);
        free(c);
    }
}

/* A copy of n ints (uninitialized if v is NULL). */
static int *ints_dup(int n, const int *v)
{
    int *p = malloc((n > 0 ? n : 1) * sizeof(int));
    if (p && v && n > 0)
        memcpy(p, v, n * sizeof(int));
    return p;
}

static void dgraph_drop(struct zmpi_dgraph *d)
{
    if (d) {
        free(d->sources);
        free(d->sourceweights);
        free(d->destinations);
        free(d->destweights);
        free(d);
    }
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
        dgraph_drop(d);
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
        group_drop(g);
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

#define CHECK_COMM(fn, c)                                                          \
    do {                                                                           \
        int e_ = zmpi_check_init(fn);                                              \
        if (e_)                                                                    \
            return e_;                                                             \
        if (!zmpi_comm_ok(c))                                                      \
            return zmpi_error(NULL, MPI_ERR_COMM, fn, "invalid communicator");     \
    } while (0)

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

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *out)
{
    CHECK_COMM("MPI_Comm_dup", comm);
    int ctx, err = zmpi_new_ctx(comm, &ctx);
    if (err)
        return zmpi_error(comm, err, "MPI_Comm_dup", "could not agree on a context");
    struct zmpi_group *g = group_new(comm->size, comm->group->world);
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
        struct zmpi_group *g = group_new(k, world);
        free(world);
        *out = g ? comm_new(g, ctx, comm->errh) : NULL;
        if (!*out)
            abort();
    }
    free(all);
    free(m);
    return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm *comm)
{
    CHECK_COMM("MPI_Comm_free", *comm);
    if ((*comm)->predefined)
        return zmpi_error(*comm, MPI_ERR_COMM, "MPI_Comm_free", "cannot free a predefined communicator");
    group_drop((*comm)->group);
    cart_drop((*comm)->cart);
    dgraph_drop((*comm)->dgraph);
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
    *group = group_new(comm->size, comm->group->world);
    return *group ? MPI_SUCCESS
                  : zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_group", "out of memory");
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
    struct zmpi_group *g = group_new(group->size, group->world);
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
    struct zmpi_group *g = group_new(group->size, group->world);
    *out = g ? comm_new(g, ctx, comm->errh) : NULL;
    return *out ? MPI_SUCCESS
                : zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Comm_create_group", "out of memory");
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
    group_drop(*g);
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
    *out = n ? group_new(n, w) : MPI_GROUP_EMPTY;
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
    *out = k ? group_new(k, w) : MPI_GROUP_EMPTY;
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

#define CHECK_CART(fn, c)                                                            \
    do {                                                                             \
        CHECK_COMM(fn, c);                                                           \
        if (!(c)->cart)                                                              \
            return zmpi_error(c, MPI_ERR_TOPOLOGY, fn, "not a Cartesian communicator"); \
    } while (0)

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
    cart_drop((*out)->cart);
    (*out)->cart = NULL;
    dgraph_drop((*out)->dgraph);
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
