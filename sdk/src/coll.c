/*
 * coll.c — collective operations, built on the point-to-point engine in the
 * communicator's collective context (ctx + 1) with the library's own tags.
 *
 * Algorithms (n ranks, any n):
 *   Barrier             dissemination, ceil(log2 n) rounds
 *   Bcast               binomial tree; a pipelined chain for large messages
 *   Reduce              binomial tree; rank order kept, so non-commutative
 *                       operators are exact (rooted at 0, then forwarded)
 *   Allreduce           recursive doubling with the extra ranks folded in
 *                       (order kept); ring reduce-scatter + allgather for
 *                       large vectors with commutative operators
 *   Scan/Exscan         recursive doubling (order kept)
 *   Gather/Scatter      binomial tree; Gatherv/Scatterv linear at the root
 *   Allgather(v)        ring
 *   Alltoall(v,w)       pairwise exchange
 *   Neighbor_*          every receive posted, then every send, then wait
 *   Reduce_scatter(_block)  Allreduce, then each keeps its block
 */
#include <stdlib.h>
#include <string.h>
#include "zmpi.h"

/* Large Allreduce vectors (bytes) go round the ring instead of doubling. */
#define RING_MIN_BYTES (64 * 1024)
/* Broadcasts of at least this many bytes go down a pipelined chain
 * (bcast_chain), in segments of BCAST_SEGMENT bytes. */
#define BCAST_CHAIN_MIN_BYTES (256 * 1024)
#define BCAST_SEGMENT (128 * 1024)

/* A scratch buffer able to hold count elements of t laid out as t. */
static void *typed_alloc(int count, MPI_Datatype t, void **base)
{
    MPI_Aint ext = t->extent < 0 ? -t->extent : t->extent;
    MPI_Aint span = (t->true_ub - t->true_lb) + (count > 0 ? (MPI_Aint)(count - 1) * ext : 0);
    *base = malloc(span > 0 ? span : 1);
    if (!*base)
        return NULL;
    return (char *)*base - t->true_lb;
}

static char *at(const void *buf, MPI_Aint elems, MPI_Datatype t)
{
    return (char *)buf + elems * t->extent;
}

#define BEGIN(fn, comm)                                                       \
    const char *fn_ = fn;                                                     \
    do {                                                                      \
        int e_ = zmpi_check_init(fn);                                         \
        if (e_)                                                               \
            return e_;                                                        \
        if (!zmpi_comm_ok(comm))                                              \
            return zmpi_error(NULL, MPI_ERR_COMM, fn, "invalid communicator"); \
    } while (0)
#define FAIL(comm, code, what) return zmpi_error(comm, code, fn_, what)
#define CHECK_TYPE(comm, t, count)                                            \
    do {                                                                      \
        if (!zmpi_type_ok(t))                                                 \
            FAIL(comm, MPI_ERR_TYPE, "invalid or uncommitted datatype");      \
        if ((count) < 0)                                                      \
            FAIL(comm, MPI_ERR_COUNT, "negative count");                      \
    } while (0)
#define CHECK_ROOT(comm, root)                                                \
    do {                                                                      \
        if ((root) < 0 || (root) >= (comm)->size)                             \
            FAIL(comm, MPI_ERR_ROOT, "root outside the communicator");        \
    } while (0)
#define DONE(comm, err) return (err) ? zmpi_error(comm, err, fn_, "transport failed") : MPI_SUCCESS

/* ---- Barrier ---- */

static int barrier(MPI_Comm comm)
{
    int n = comm->size, r = comm->rank;
    char x = 0, y;
    for (int k = 1; k < n; k <<= 1) {
        int err = zmpi_csendrecv(&x, 0, MPI_BYTE, (r + k) % n, &y, 0, MPI_BYTE,
                                 (r - k + n) % n, ZT_BARRIER, comm);
        if (err)
            return err;
    }
    return MPI_SUCCESS;
}

int MPI_Barrier(MPI_Comm comm)
{
    BEGIN("MPI_Barrier", comm);
    int err = barrier(comm);
    DONE(comm, err);
}

/* ---- Bcast ---- */

static int bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm)
{
    int n = comm->size, vr = (comm->rank - root + n) % n, mask = 1, err;
    while (mask < n) {
        if (vr & mask) {
            err = zmpi_crecv(buf, count, t, (vr - mask + root) % n, ZT_BCAST, comm);
            if (err)
                return err;
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n) {
            err = zmpi_csend(buf, count, t, (vr + mask + root) % n, ZT_BCAST, comm);
            if (err)
                return err;
        }
    return MPI_SUCCESS;
}

/* Large messages go down a chain from the root in segments of
 * BCAST_SEGMENT bytes, each rank passing a segment on as soon as it has it
 * (its send only hands the segment to the host): the message crosses about
 * once plus a segment per hop, where the binomial tree's root sends it
 * ceil(log2 n) times, one after the other. Segments are cut from the
 * message's bytes, which every rank has the same number of whatever its
 * datatype; a non-contiguous datatype is packed first and unpacked after. */
static int bcast_chain(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm)
{
    int n = comm->size, vr = (comm->rank - root + n) % n, err = MPI_SUCCESS;
    int prev = (comm->rank - 1 + n) % n, next = (comm->rank + 1) % n;
    long long bytes = zmpi_type_bytes(t, count);
    unsigned char *data, *packed = NULL;
    if (zmpi_type_contig(t))
        data = (unsigned char *)buf + t->true_lb;
    else {
        packed = malloc(bytes);
        if (!packed)
            return MPI_ERR_NO_MEM;
        if (vr == 0)
            zmpi_copy(buf, count, t, packed, (int)bytes, MPI_BYTE);
        data = packed;
    }
    for (long long off = 0; off < bytes && !err; off += BCAST_SEGMENT) {
        int len = bytes - off < BCAST_SEGMENT ? (int)(bytes - off) : BCAST_SEGMENT;
        if (vr > 0)
            err = zmpi_crecv(data + off, len, MPI_BYTE, prev, ZT_BCAST, comm);
        if (!err && vr < n - 1)
            err = zmpi_csend(data + off, len, MPI_BYTE, next, ZT_BCAST, comm);
    }
    if (packed && !err && vr > 0)
        zmpi_copy(packed, (int)bytes, MPI_BYTE, buf, count, t);
    free(packed);
    return err;
}

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm)
{
    BEGIN("MPI_Bcast", comm);
    CHECK_TYPE(comm, t, count);
    CHECK_ROOT(comm, root);
    long long bytes = zmpi_type_bytes(t, count);
    if (bytes < 0)
        FAIL(comm, MPI_ERR_COUNT, "larger than 2 GiB");
    int err = MPI_SUCCESS;
    if (comm->size > 2 && bytes >= BCAST_CHAIN_MIN_BYTES)
        err = bcast_chain(buf, count, t, root, comm);
    else if (comm->size > 1)
        err = bcast(buf, count, t, root, comm);
    DONE(comm, err);
}

/* ---- Reduce ---- */

/* Reduces into `acc` (count elements of t, holding this rank's input) on
 * rank `root`; other ranks' acc is scratch. */
static int reduce_to(void *acc, int count, MPI_Datatype t, MPI_Op op, int root, MPI_Comm comm)
{
    int n = comm->size, r = comm->rank;
    /* Commutative operators are rooted where asked; others at rank 0 (in rank
     * order), then forwarded. */
    int tree_root = op->commute ? root : 0;
    int vr = (r - tree_root + n) % n, err = MPI_SUCCESS;
    void *base, *tmp = typed_alloc(count, t, &base);
    if (!tmp)
        return MPI_ERR_NO_MEM;
    void *a = acc;
    for (int mask = 1; mask < n; mask <<= 1) {
        if (vr & mask) {
            err = zmpi_csend(a, count, t, (vr - mask + tree_root) % n, ZT_REDUCE, comm);
            break;
        }
        if (vr + mask < n) {
            err = zmpi_crecv(tmp, count, t, (vr + mask + tree_root) % n, ZT_REDUCE, comm);
            if (err)
                break;
            /* a holds lower ranks than tmp: a op tmp */
            err = zmpi_apply(op, a, tmp, count, t);
            if (err)
                break;
            void *x = a;
            a = tmp;
            tmp = x;
        }
    }
    if (!err && vr == 0 && a != acc)
        zmpi_copy(a, count, t, acc, count, t);
    if (!err && tree_root != root) {
        if (r == tree_root)
            err = zmpi_csend(acc, count, t, root, ZT_REDUCE, comm);
        else if (r == root)
            err = zmpi_crecv(acc, count, t, tree_root, ZT_REDUCE, comm);
    }
    free(base);
    return err;
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype t, MPI_Op op,
               int root, MPI_Comm comm)
{
    BEGIN("MPI_Reduce", comm);
    CHECK_TYPE(comm, t, count);
    CHECK_ROOT(comm, root);
    if (!zmpi_op_ok(op, t))
        FAIL(comm, MPI_ERR_OP, "the operator does not apply to this datatype");
    int err;
    if (comm->rank == root) {
        if (sendbuf != MPI_IN_PLACE)
            zmpi_copy(sendbuf, count, t, recvbuf, count, t);
        err = reduce_to(recvbuf, count, t, op, root, comm);
    } else {
        void *base, *acc = typed_alloc(count, t, &base);
        if (!acc)
            FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
        zmpi_copy(sendbuf, count, t, acc, count, t);
        err = reduce_to(acc, count, t, op, root, comm);
        free(base);
    }
    DONE(comm, err);
}

/* ---- Allreduce ---- */

static int allreduce_doubling(void *acc, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    int n = comm->size, r = comm->rank, err = MPI_SUCCESS;
    int pof2 = 1;
    while (pof2 * 2 <= n)
        pof2 *= 2;
    int rem = n - pof2, newrank;
    void *base, *tmp = typed_alloc(count, t, &base);
    if (!tmp)
        return MPI_ERR_NO_MEM;
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            err = zmpi_csend(acc, count, t, r + 1, ZT_ALLREDUCE, comm);
            newrank = -1;
        } else {
            err = zmpi_crecv(tmp, count, t, r - 1, ZT_ALLREDUCE, comm);
            if (!err)
                err = zmpi_apply(op, tmp, acc, count, t); /* lower op mine */
            newrank = r / 2;
        }
    } else
        newrank = r - rem;
    if (!err && newrank != -1) {
        for (int mask = 1; mask < pof2 && !err; mask <<= 1) {
            int nd = newrank ^ mask;
            int dst = nd < rem ? nd * 2 + 1 : nd + rem;
            err = zmpi_csendrecv(acc, count, t, dst, tmp, count, t, dst, ZT_ALLREDUCE, comm);
            if (err)
                break;
            if (dst < r || op->commute) {
                err = zmpi_apply(op, tmp, acc, count, t); /* theirs (lower) op mine */
            } else {
                err = zmpi_apply(op, acc, tmp, count, t); /* mine op theirs (higher) */
                if (!err)
                    zmpi_copy(tmp, count, t, acc, count, t);
            }
        }
    }
    if (!err && r < 2 * rem) {
        if (r % 2)
            err = zmpi_csend(acc, count, t, r - 1, ZT_ALLREDUCE, comm);
        else
            err = zmpi_crecv(acc, count, t, r + 1, ZT_ALLREDUCE, comm);
    }
    free(base);
    return err;
}

/* Ring: n-1 steps of reduce-scatter, then n-1 of allgather, each moving
 * about count/n elements; commutative operators only. */
static int allreduce_ring(void *acc, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    int n = comm->size, r = comm->rank, err = MPI_SUCCESS;
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    int chunk = (count + n - 1) / n;
    void *base, *tmp = typed_alloc(chunk, t, &base);
    if (!tmp)
        return MPI_ERR_NO_MEM;
#define START(i) ((long long)(i) * chunk < count ? (i) * chunk : count)
#define LEN(i) (START((i) + 1) - START(i))
    for (int s = 0; s < n - 1 && !err; s++) {
        int sb = (r - s + n) % n, rb = (r - s - 1 + n) % n;
        err = zmpi_csendrecv(at(acc, START(sb), t), LEN(sb), t, right, tmp, LEN(rb), t, left,
                             ZT_ALLREDUCE, comm);
        if (!err)
            err = zmpi_apply(op, tmp, at(acc, START(rb), t), LEN(rb), t);
    }
    for (int s = 0; s < n - 1 && !err; s++) {
        int sb = (r + 1 - s + n) % n, rb = (r - s + n) % n;
        err = zmpi_csendrecv(at(acc, START(sb), t), LEN(sb), t, right, at(acc, START(rb), t),
                             LEN(rb), t, left, ZT_ALLREDUCE, comm);
    }
#undef START
#undef LEN
    free(base);
    return err;
}

static int allreduce(void *acc, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    if (comm->size == 1)
        return MPI_SUCCESS;
    if (op->commute && comm->size > 2 && count >= comm->size &&
        zmpi_type_bytes(t, count) >= RING_MIN_BYTES)
        return allreduce_ring(acc, count, t, op, comm);
    return allreduce_doubling(acc, count, t, op, comm);
}

int zmpi_allreduce_int_max(int *v, MPI_Comm comm)
{
    return allreduce(v, 1, MPI_INT, MPI_MAX, comm);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype t, MPI_Op op,
                  MPI_Comm comm)
{
    BEGIN("MPI_Allreduce", comm);
    CHECK_TYPE(comm, t, count);
    if (!zmpi_op_ok(op, t))
        FAIL(comm, MPI_ERR_OP, "the operator does not apply to this datatype");
    if (sendbuf != MPI_IN_PLACE)
        zmpi_copy(sendbuf, count, t, recvbuf, count, t);
    int err = allreduce(recvbuf, count, t, op, comm);
    DONE(comm, err);
}

/* ---- Scan, Exscan ---- */

static int scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype t, MPI_Op op,
                MPI_Comm comm, int exclusive)
{
    int n = comm->size, r = comm->rank, err = MPI_SUCCESS, have = !exclusive;
    void *b1, *b2;
    void *partial = typed_alloc(count, t, &b1), *tmp = typed_alloc(count, t, &b2);
    if (!partial || !tmp) {
        free(b1);
        free(b2);
        return MPI_ERR_NO_MEM;
    }
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    zmpi_copy(in, count, t, partial, count, t);
    if (!exclusive && sendbuf != MPI_IN_PLACE)
        zmpi_copy(sendbuf, count, t, recvbuf, count, t);
    for (int mask = 1; mask < n && !err; mask <<= 1) {
        int p = r ^ mask;
        if (p >= n)
            continue;
        err = zmpi_csendrecv(partial, count, t, p, tmp, count, t, p, ZT_SCAN, comm);
        if (err)
            break;
        if (p < r) {
            /* tmp covers lower ranks than both partial and the result */
            if (have)
                err = zmpi_apply(op, tmp, recvbuf, count, t);
            else {
                zmpi_copy(tmp, count, t, recvbuf, count, t);
                have = 1;
            }
            if (!err)
                err = zmpi_apply(op, tmp, partial, count, t);
        } else {
            err = zmpi_apply(op, partial, tmp, count, t);
            if (!err)
                zmpi_copy(tmp, count, t, partial, count, t);
        }
    }
    free(b1);
    free(b2);
    return err;
}

int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype t, MPI_Op op,
             MPI_Comm comm)
{
    BEGIN("MPI_Scan", comm);
    CHECK_TYPE(comm, t, count);
    if (!zmpi_op_ok(op, t))
        FAIL(comm, MPI_ERR_OP, "the operator does not apply to this datatype");
    int err = scan(sendbuf, recvbuf, count, t, op, comm, 0);
    DONE(comm, err);
}

int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype t, MPI_Op op,
               MPI_Comm comm)
{
    BEGIN("MPI_Exscan", comm);
    CHECK_TYPE(comm, t, count);
    if (!zmpi_op_ok(op, t))
        FAIL(comm, MPI_ERR_OP, "the operator does not apply to this datatype");
    int err = scan(sendbuf, recvbuf, count, t, op, comm, 1);
    DONE(comm, err);
}

/* ---- Gather, Scatter (binomial trees over packed bytes) ---- */

/* Ranks in the subtree of relative rank vr (vr > 0), or n for vr = 0. */
static int subtree(int vr, int n)
{
    if (vr == 0)
        return n;
    int low = vr & -vr;
    return low < n - vr ? low : n - vr;
}

int MPI_Gather(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf, int rcount,
               MPI_Datatype rt, int root, MPI_Comm comm)
{
    BEGIN("MPI_Gather", comm);
    CHECK_ROOT(comm, root);
    int n = comm->size, r = comm->rank, vr = (r - root + n) % n, err = MPI_SUCCESS;
    int in_place = r == root && sendbuf == MPI_IN_PLACE;
    if (r == root)
        CHECK_TYPE(comm, rt, rcount);
    if (!in_place)
        CHECK_TYPE(comm, st, scount);
    long long nb = in_place ? zmpi_type_bytes(rt, rcount) : zmpi_type_bytes(st, scount);
    int have = subtree(vr, n);
    unsigned char *tmp = malloc(nb * have > 0 ? nb * have : 1);
    if (!tmp)
        FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
    if (in_place)
        zmpi_pack(at(recvbuf, (MPI_Aint)r * rcount, rt), rcount, rt, tmp);
    else
        zmpi_pack(sendbuf, scount, st, tmp);
    for (int mask = 1; mask < n && !err; mask <<= 1) {
        if (vr & mask) {
            err = zmpi_csend(tmp, (int)(nb * have), MPI_BYTE, (vr - mask + root) % n,
                             ZT_GATHER, comm);
            break;
        }
        if (vr + mask < n) {
            int k = subtree(vr + mask, n);
            err = zmpi_crecv(tmp + nb * mask, (int)(nb * k), MPI_BYTE, (vr + mask + root) % n,
                             ZT_GATHER, comm);
        }
    }
    if (!err && r == root)
        for (int j = 0; j < n; j++) {
            int real = (j + root) % n;
            if (!(in_place && real == r))
                zmpi_unpack(tmp + nb * j, nb, at(recvbuf, (MPI_Aint)real * rcount, rt), rcount,
                            rt);
        }
    free(tmp);
    DONE(comm, err);
}

int MPI_Scatter(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf, int rcount,
                MPI_Datatype rt, int root, MPI_Comm comm)
{
    BEGIN("MPI_Scatter", comm);
    CHECK_ROOT(comm, root);
    int n = comm->size, r = comm->rank, vr = (r - root + n) % n, err = MPI_SUCCESS;
    int in_place = r == root && recvbuf == MPI_IN_PLACE;
    if (r == root)
        CHECK_TYPE(comm, st, scount);
    if (!in_place)
        CHECK_TYPE(comm, rt, rcount);
    long long nb = r == root ? zmpi_type_bytes(st, scount) : zmpi_type_bytes(rt, rcount);
    int have = subtree(vr, n);
    unsigned char *tmp = malloc(nb * have > 0 ? nb * have : 1);
    if (!tmp)
        FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
    int mask = 1;
    if (vr == 0) {
        for (int j = 0; j < n; j++)
            zmpi_pack(at(sendbuf, (MPI_Aint)((j + root) % n) * scount, st), scount, st,
                      tmp + nb * j);
        while (mask < n)
            mask <<= 1;
    } else {
        mask = vr & -vr;
        err = zmpi_crecv(tmp, (int)(nb * have), MPI_BYTE, (vr - mask + root) % n, ZT_SCATTER,
                         comm);
    }
    for (mask >>= 1; mask > 0 && !err; mask >>= 1)
        if (vr + mask < n)
            err = zmpi_csend(tmp + nb * mask, (int)(nb * subtree(vr + mask, n)), MPI_BYTE,
                             (vr + mask + root) % n, ZT_SCATTER, comm);
    if (!err && !in_place)
        zmpi_unpack(tmp, nb, recvbuf, rcount, rt);
    free(tmp);
    DONE(comm, err);
}

int MPI_Gatherv(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf,
                const int rcounts[], const int displs[], MPI_Datatype rt, int root,
                MPI_Comm comm)
{
    BEGIN("MPI_Gatherv", comm);
    CHECK_ROOT(comm, root);
    int n = comm->size, r = comm->rank, err = MPI_SUCCESS;
    if (r != root) {
        CHECK_TYPE(comm, st, scount);
        err = zmpi_csend(sendbuf, scount, st, root, ZT_GATHER, comm);
        DONE(comm, err);
    }
    CHECK_TYPE(comm, rt, 0);
    MPI_Request *reqs = calloc(n, sizeof *reqs);
    if (!reqs)
        FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
    for (int j = 0; j < n; j++)
        if (j != r)
            reqs[j] = zmpi_irecv(at(recvbuf, displs[j], rt), rcounts[j], rt, j, ZT_GATHER, comm,
                                 comm->ctx + 1);
    if (sendbuf != MPI_IN_PLACE)
        zmpi_copy(sendbuf, scount, st, at(recvbuf, displs[r], rt), rcounts[r], rt);
    for (int j = 0; j < n; j++) {
        int e = zmpi_wait(&reqs[j], MPI_STATUS_IGNORE);
        if (e && !err)
            err = e;
    }
    free(reqs);
    DONE(comm, err);
}

int MPI_Scatterv(const void *sendbuf, const int scounts[], const int displs[], MPI_Datatype st,
                 void *recvbuf, int rcount, MPI_Datatype rt, int root, MPI_Comm comm)
{
    BEGIN("MPI_Scatterv", comm);
    CHECK_ROOT(comm, root);
    int n = comm->size, r = comm->rank, err = MPI_SUCCESS;
    if (r != root) {
        CHECK_TYPE(comm, rt, rcount);
        err = zmpi_crecv(recvbuf, rcount, rt, root, ZT_SCATTER, comm);
        DONE(comm, err);
    }
    CHECK_TYPE(comm, st, 0);
    MPI_Request *reqs = calloc(n, sizeof *reqs);
    if (!reqs)
        FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
    for (int j = 0; j < n; j++)
        if (j != r)
            reqs[j] = zmpi_isend(at(sendbuf, displs[j], st), scounts[j], st, j, ZT_SCATTER, comm,
                                 comm->ctx + 1, 0);
    if (recvbuf != MPI_IN_PLACE)
        zmpi_copy(at(sendbuf, displs[r], st), scounts[r], st, recvbuf, rcount, rt);
    for (int j = 0; j < n; j++) {
        int e = zmpi_wait(&reqs[j], MPI_STATUS_IGNORE);
        if (e && !err)
            err = e;
    }
    free(reqs);
    DONE(comm, err);
}

/* ---- Allgather(v): ring ---- */

static int allgatherv(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf,
                      const int *rcounts, const int *displs, MPI_Datatype rt, MPI_Comm comm)
{
    int n = comm->size, r = comm->rank, err = MPI_SUCCESS;
    if (sendbuf != MPI_IN_PLACE) {
        err = zmpi_copy(sendbuf, scount, st, at(recvbuf, displs[r], rt), rcounts[r], rt);
        if (err)
            return err;
    }
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    for (int s = 0; s < n - 1 && !err; s++) {
        int sb = (r - s + n) % n, rb = (r - s - 1 + n) % n;
        err = zmpi_csendrecv(at(recvbuf, displs[sb], rt), rcounts[sb], rt, right,
                             at(recvbuf, displs[rb], rt), rcounts[rb], rt, left, ZT_ALLGATHER,
                             comm);
    }
    return err;
}

int MPI_Allgather(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf, int rcount,
                  MPI_Datatype rt, MPI_Comm comm)
{
    BEGIN("MPI_Allgather", comm);
    CHECK_TYPE(comm, rt, rcount);
    if (sendbuf != MPI_IN_PLACE)
        CHECK_TYPE(comm, st, scount);
    int n = comm->size;
    int *counts = malloc(2 * n * sizeof(int));
    if (!counts)
        FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
    for (int i = 0; i < n; i++) {
        counts[i] = rcount;
        counts[n + i] = i * rcount;
    }
    int err = allgatherv(sendbuf, scount, st, recvbuf, counts, counts + n, rt, comm);
    free(counts);
    DONE(comm, err);
}

int MPI_Allgatherv(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf,
                   const int rcounts[], const int displs[], MPI_Datatype rt, MPI_Comm comm)
{
    BEGIN("MPI_Allgatherv", comm);
    CHECK_TYPE(comm, rt, 0);
    if (sendbuf != MPI_IN_PLACE)
        CHECK_TYPE(comm, st, scount);
    int err = allgatherv(sendbuf, scount, st, recvbuf, rcounts, displs, rt, comm);
    DONE(comm, err);
}

/* ---- Alltoall(v): pairwise exchange ---- */

static int alltoallv(const void *sendbuf, const int *scounts, const int *sdispls,
                     MPI_Datatype st, void *recvbuf, const int *rcounts, const int *rdispls,
                     MPI_Datatype rt, MPI_Comm comm)
{
    int n = comm->size, r = comm->rank;
    int err = zmpi_copy(at(sendbuf, sdispls[r], st), scounts[r], st, at(recvbuf, rdispls[r], rt),
                        rcounts[r], rt);
    for (int s = 1; s < n && !err; s++) {
        int dst = (r + s) % n, src = (r - s + n) % n;
        err = zmpi_csendrecv(at(sendbuf, sdispls[dst], st), scounts[dst], st, dst,
                             at(recvbuf, rdispls[src], rt), rcounts[src], rt, src, ZT_ALLTOALL,
                             comm);
    }
    return err;
}

/* For MPI_IN_PLACE: a copy of the first `elems` elements of recvbuf. */
static void *copy_of(const void *recvbuf, int elems, MPI_Datatype rt, void **base)
{
    void *c = typed_alloc(elems, rt, base);
    if (c)
        zmpi_copy(recvbuf, elems, rt, c, elems, rt);
    return c;
}

int MPI_Alltoall(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf, int rcount,
                 MPI_Datatype rt, MPI_Comm comm)
{
    BEGIN("MPI_Alltoall", comm);
    CHECK_TYPE(comm, rt, rcount);
    int n = comm->size;
    void *base = NULL;
    if (sendbuf == MPI_IN_PLACE) {
        sendbuf = copy_of(recvbuf, n * rcount, rt, &base);
        if (!sendbuf)
            FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
        scount = rcount;
        st = rt;
    } else
        CHECK_TYPE(comm, st, scount);
    int *v = malloc(4 * n * sizeof(int));
    if (!v) {
        free(base);
        FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        v[i] = scount;
        v[n + i] = i * scount;
        v[2 * n + i] = rcount;
        v[3 * n + i] = i * rcount;
    }
    int err = alltoallv(sendbuf, v, v + n, st, recvbuf, v + 2 * n, v + 3 * n, rt, comm);
    free(v);
    free(base);
    DONE(comm, err);
}

int MPI_Alltoallv(const void *sendbuf, const int scounts[], const int sdispls[], MPI_Datatype st,
                  void *recvbuf, const int rcounts[], const int rdispls[], MPI_Datatype rt,
                  MPI_Comm comm)
{
    BEGIN("MPI_Alltoallv", comm);
    CHECK_TYPE(comm, rt, 0);
    void *base = NULL;
    if (sendbuf == MPI_IN_PLACE) {
        int span = 0;
        for (int i = 0; i < comm->size; i++)
            if (rdispls[i] + rcounts[i] > span)
                span = rdispls[i] + rcounts[i];
        sendbuf = copy_of(recvbuf, span, rt, &base);
        if (!sendbuf)
            FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
        scounts = rcounts;
        sdispls = rdispls;
        st = rt;
    } else
        CHECK_TYPE(comm, st, 0);
    int err = alltoallv(sendbuf, scounts, sdispls, st, recvbuf, rcounts, rdispls, rt, comm);
    free(base);
    DONE(comm, err);
}

/* ---- Reduce_scatter ---- */

static int reduce_scatter(const void *sendbuf, void *recvbuf, const int *counts,
                          MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    int n = comm->size, r = comm->rank, total = 0, mine = 0;
    for (int i = 0; i < n; i++) {
        if (i == r)
            mine = total;
        total += counts[i];
    }
    void *base, *acc = typed_alloc(total, t, &base);
    if (!acc)
        return MPI_ERR_NO_MEM;
    zmpi_copy(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, total, t, acc, total, t);
    int err = allreduce(acc, total, t, op, comm);
    if (!err)
        zmpi_copy(at(acc, mine, t), counts[r], t, recvbuf, counts[r], t);
    free(base);
    return err;
}

/* ---- Alltoallw: pairwise exchange, a datatype per peer, byte displacements ---- */

int MPI_Alltoallw(const void *sendbuf, const int scounts[], const int sdispls[],
                  const MPI_Datatype sts[], void *recvbuf, const int rcounts[],
                  const int rdispls[], const MPI_Datatype rts[], MPI_Comm comm)
{
    BEGIN("MPI_Alltoallw", comm);
    int n = comm->size, r = comm->rank;
    for (int i = 0; i < n; i++) {
        CHECK_TYPE(comm, rts[i], rcounts[i]);
        if (sendbuf != MPI_IN_PLACE)
            CHECK_TYPE(comm, sts[i], scounts[i]);
    }
    void *copy = NULL;
    if (sendbuf == MPI_IN_PLACE) {
        MPI_Aint span = 0;
        for (int i = 0; i < n; i++) {
            MPI_Aint ext = rts[i]->extent < 0 ? -rts[i]->extent : rts[i]->extent;
            MPI_Aint end = rcounts[i] > 0
                               ? rdispls[i] + rts[i]->true_ub + (MPI_Aint)(rcounts[i] - 1) * ext
                               : 0;
            if (end > span)
                span = end;
        }
        copy = malloc(span > 0 ? span : 1);
        if (!copy)
            FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
        if (span > 0)
            memcpy(copy, recvbuf, span);
        sendbuf = copy;
        scounts = rcounts;
        sdispls = rdispls;
        sts = rts;
    }
    const char *sb = sendbuf;
    char *rb = recvbuf;
    int err = zmpi_copy(sb + sdispls[r], scounts[r], sts[r], rb + rdispls[r], rcounts[r], rts[r]);
    for (int s = 1; s < n && !err; s++) {
        int dst = (r + s) % n, src = (r - s + n) % n;
        err = zmpi_csendrecv(sb + sdispls[dst], scounts[dst], sts[dst], dst, rb + rdispls[src],
                             rcounts[src], rts[src], src, ZT_ALLTOALL, comm);
    }
    free(copy);
    DONE(comm, err);
}

/* ---- Neighborhood collectives ----
 * A Cartesian rank's neighbours are, per dimension, the rank below and the
 * rank above (both may be one rank, or this one, on a short periodic
 * dimension), so its messages carry a tag per dimension and direction: what
 * a rank sends up arrives from below. A distributed graph's messages carry
 * one tag, and several edges between two ranks match in order. */

struct nb {
    char *buf;
    int count;
    MPI_Datatype t;
};

static int nb_tag(MPI_Comm comm, int i, int sending)
{
    if (!comm->cart)
        return ZT_NEIGHBOR;
    int up = (i & 1) == sending; /* sending to the one above, or receiving from below */
    return ZT_NEIGHBOR_CART - 2 * (i / 2) - up;
}

static int neighbor_exchange(MPI_Comm comm, int indeg, const int *src, const struct nb *in,
                             int outdeg, const int *dst, const struct nb *out)
{
    MPI_Request *reqs = malloc((indeg + outdeg + 1) * sizeof *reqs);
    if (!reqs)
        return MPI_ERR_NO_MEM;
    for (int i = 0; i < indeg; i++)
        reqs[i] = zmpi_irecv(in[i].buf, in[i].count, in[i].t, src[i], nb_tag(comm, i, 0), comm,
                             comm->ctx + 1);
    for (int j = 0; j < outdeg; j++)
        reqs[indeg + j] = zmpi_isend(out[j].buf, out[j].count, out[j].t, dst[j],
                                     nb_tag(comm, j, 1), comm, comm->ctx + 1, 0);
    int err = MPI_SUCCESS;
    for (int k = 0; k < indeg + outdeg; k++) {
        int e = zmpi_wait(&reqs[k], MPI_STATUS_IGNORE);
        if (e && !err)
            err = e;
    }
    free(reqs);
    return err;
}

/* The neighbour lists and room for the per-neighbour buffers, or an error. */
#define NEIGHBORS(comm)                                                                   \
    int indeg_, outdeg_;                                                                  \
    const int *src_, *dst_;                                                               \
    int *scratch_;                                                                        \
    if (zmpi_neighbors(comm, &indeg_, &src_, &outdeg_, &dst_, &scratch_))                  \
        FAIL(comm, MPI_ERR_TOPOLOGY, "the communicator has no topology");                 \
    struct nb *in_ = malloc((indeg_ + 1) * sizeof *in_);                                  \
    struct nb *out_ = malloc((outdeg_ + 1) * sizeof *out_);                               \
    if (!in_ || !out_)                                                                    \
        abort()
#define NEIGHBORS_DONE(comm)                                                              \
    int err = neighbor_exchange(comm, indeg_, src_, in_, outdeg_, dst_, out_);            \
    free(in_);                                                                            \
    free(out_);                                                                           \
    free(scratch_);                                                                       \
    DONE(comm, err)

int MPI_Neighbor_allgather(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf,
                           int rcount, MPI_Datatype rt, MPI_Comm comm)
{
    BEGIN("MPI_Neighbor_allgather", comm);
    CHECK_TYPE(comm, st, scount);
    CHECK_TYPE(comm, rt, rcount);
    NEIGHBORS(comm);
    for (int i = 0; i < indeg_; i++)
        in_[i] = (struct nb){at(recvbuf, (MPI_Aint)i * rcount, rt), rcount, rt};
    for (int j = 0; j < outdeg_; j++)
        out_[j] = (struct nb){(char *)sendbuf, scount, st};
    NEIGHBORS_DONE(comm);
}

int MPI_Neighbor_allgatherv(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf,
                            const int rcounts[], const int displs[], MPI_Datatype rt,
                            MPI_Comm comm)
{
    BEGIN("MPI_Neighbor_allgatherv", comm);
    CHECK_TYPE(comm, st, scount);
    CHECK_TYPE(comm, rt, 0);
    NEIGHBORS(comm);
    for (int i = 0; i < indeg_; i++)
        in_[i] = (struct nb){at(recvbuf, displs[i], rt), rcounts[i], rt};
    for (int j = 0; j < outdeg_; j++)
        out_[j] = (struct nb){(char *)sendbuf, scount, st};
    NEIGHBORS_DONE(comm);
}

int MPI_Neighbor_alltoall(const void *sendbuf, int scount, MPI_Datatype st, void *recvbuf,
                          int rcount, MPI_Datatype rt, MPI_Comm comm)
{
    BEGIN("MPI_Neighbor_alltoall", comm);
    CHECK_TYPE(comm, st, scount);
    CHECK_TYPE(comm, rt, rcount);
    NEIGHBORS(comm);
    for (int i = 0; i < indeg_; i++)
        in_[i] = (struct nb){at(recvbuf, (MPI_Aint)i * rcount, rt), rcount, rt};
    for (int j = 0; j < outdeg_; j++)
        out_[j] = (struct nb){at(sendbuf, (MPI_Aint)j * scount, st), scount, st};
    NEIGHBORS_DONE(comm);
}

int MPI_Neighbor_alltoallv(const void *sendbuf, const int scounts[], const int sdispls[],
                           MPI_Datatype st, void *recvbuf, const int rcounts[],
                           const int rdispls[], MPI_Datatype rt, MPI_Comm comm)
{
    BEGIN("MPI_Neighbor_alltoallv", comm);
    CHECK_TYPE(comm, st, 0);
    CHECK_TYPE(comm, rt, 0);
    NEIGHBORS(comm);
    for (int i = 0; i < indeg_; i++)
        in_[i] = (struct nb){at(recvbuf, rdispls[i], rt), rcounts[i], rt};
    for (int j = 0; j < outdeg_; j++)
        out_[j] = (struct nb){at(sendbuf, sdispls[j], st), scounts[j], st};
    NEIGHBORS_DONE(comm);
}

int MPI_Neighbor_alltoallw(const void *sendbuf, const int scounts[], const MPI_Aint sdispls[],
                           const MPI_Datatype sts[], void *recvbuf, const int rcounts[],
                           const MPI_Aint rdispls[], const MPI_Datatype rts[], MPI_Comm comm)
{
    BEGIN("MPI_Neighbor_alltoallw", comm);
    NEIGHBORS(comm);
    for (int i = 0; i < indeg_; i++) {
        if (!zmpi_type_ok(rts[i]) || rcounts[i] < 0) {
            free(in_);
            free(out_);
            free(scratch_);
            FAIL(comm, MPI_ERR_TYPE, "invalid datatype or count");
        }
        in_[i] = (struct nb){(char *)recvbuf + rdispls[i], rcounts[i], rts[i]};
    }
    for (int j = 0; j < outdeg_; j++) {
        if (!zmpi_type_ok(sts[j]) || scounts[j] < 0) {
            free(in_);
            free(out_);
            free(scratch_);
            FAIL(comm, MPI_ERR_TYPE, "invalid datatype or count");
        }
        out_[j] = (struct nb){(char *)sendbuf + sdispls[j], scounts[j], sts[j]};
    }
    NEIGHBORS_DONE(comm);
}

int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int counts[], MPI_Datatype t,
                       MPI_Op op, MPI_Comm comm)
{
    BEGIN("MPI_Reduce_scatter", comm);
    CHECK_TYPE(comm, t, 0);
    if (!zmpi_op_ok(op, t))
        FAIL(comm, MPI_ERR_OP, "the operator does not apply to this datatype");
    int err = reduce_scatter(sendbuf, recvbuf, counts, t, op, comm);
    DONE(comm, err);
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int count, MPI_Datatype t,
                             MPI_Op op, MPI_Comm comm)
{
    BEGIN("MPI_Reduce_scatter_block", comm);
    CHECK_TYPE(comm, t, count);
    if (!zmpi_op_ok(op, t))
        FAIL(comm, MPI_ERR_OP, "the operator does not apply to this datatype");
    int *counts = malloc(comm->size * sizeof(int));
    if (!counts)
        FAIL(comm, MPI_ERR_NO_MEM, "out of memory");
    for (int i = 0; i < comm->size; i++)
        counts[i] = count;
    int err = reduce_scatter(sendbuf, recvbuf, counts, t, op, comm);
    free(counts);
    DONE(comm, err);
}
