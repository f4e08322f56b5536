/*
 * win.c — one-sided communication (MPI-3 windows) over the point-to-point
 * engine's one-sided messages (zmpi_am_send and zmpi_am_hook, p2p.c).
 *
 * A window keeps a duplicate of its communicator, whose context carries the
 * window's messages. Every operation is a request message to the target
 * rank, which applies it to its memory in its hook; a get, a fetching
 * accumulate, a lock, a flush and an unlock are answered with a reply that
 * the origin waits for. Operations are copied into their message when they
 * are called, so they are complete at the origin at once (a get when its
 * reply has been unpacked).
 *
 * Progress: the target does its part only while it is inside an MPI call
 * that drives the engine (any wait, test, probe, blocking send or receive,
 * collective, or window synchronization: see mpi.h). That is enough for
 * fence and post/start/complete/wait, where the target is itself in a
 * synchronization call, and for passive target locks as long as the target
 * calls MPI now and then (a rank that only computes holds up the lock and
 * flush requests of the others until its next MPI call).
 *
 * Order: messages from one rank to another arrive in the order they were
 * sent and the target handles them in that order, so an origin's
 * operations on a target are applied in program order (accumulates are
 * ordered and atomic, as MPI requires by default), an unlock or flush
 * reply means that everything before it was applied, and a COMPLETE
 * message arrives after the operations of its access epoch.
 *
 * Synchronization:
 *   fence            FLUSH to every rank written to since the last one, wait
 *                    for the replies, then a barrier of the window's ranks
 *   post / start     POST to each origin of the group / wait for the POSTs
 *   complete / wait  COMPLETE to each target, after the operations / wait
 *                    for the COMPLETEs (test: without waiting)
 *   lock / unlock    LOCK, replied when granted (exclusive, or shared with
 *                    other shared holders; waiting requests queue in order)
 *                    / UNLOCK, replied when applied and released
 *   flush            FLUSH, replied when everything before it is applied
 *   flush_local      waits for the replies of this rank's gets
 */
#include <stdlib.h>
#include <string.h>
#include "zmpi.h"

enum { M_PUT = 1, M_GET, M_ACC, M_GET_ACC, M_CAS, M_REPLY, M_LOCK, M_UNLOCK, M_FLUSH, M_POST,
       M_COMPLETE };

/* Every window message starts with this header; a target datatype (for
 * data-carrying kinds) and the data follow. */
struct rma {
    int32_t kind;
    int32_t count;  /* target elements */
    int64_t disp;   /* target displacement, in the target's disp_unit */
    uint32_t id;    /* the origin's reply id (0: no reply) */
    int32_t op;     /* index in ops[] (accumulates), or the lock type */
};

/* The target datatype as the target rebuilds it (its type map follows). */
struct wire_type {
    int32_t basic, nblocks;
    int64_t size, lb, extent, true_lb, true_ub;
};

static const MPI_Op ops[] = {
#define OPREF(name, id) &zmpi_op_##id,
    ZMPI_OPS(OPREF)
#undef OPREF
};
#define NOPS ((int)(sizeof ops / sizeof *ops))

/* A reply this rank waits for: data to unpack into an origin buffer, or
 * only the fact that it came (a lock grant, an unlock or flush). */
struct pending {
    uint32_t id;
    int target;
    void *buf;
    int count;
    MPI_Datatype type; /* held: see hold_type */
    struct pending *next;
};

struct lockreq {
    int src, type;
    uint32_t id;
    struct lockreq *next;
};

enum { FLAVOR_CREATE, FLAVOR_ALLOCATE, FLAVOR_DYNAMIC };

struct zmpi_win {
    MPI_Comm comm;        /* a duplicate of the creator's: its context carries the messages */
    char *base;
    MPI_Aint size;
    int disp_unit;
    int flavor;
    MPI_Aint *sizes;      /* every rank's window size, for range checks (not dynamic) */
    int *units;           /* every rank's disp_unit */
    char *name;
    /* origin side */
    uint32_t next_id;
    struct pending *pending;
    int *waiting;         /* per target: replies not yet here */
    int *written;         /* per target: operations sent since its last flush */
    int *access;          /* the group of a start epoch (ranks of comm), or NULL */
    int naccess;
    int *posted;          /* per target: POSTs received, not yet taken by a start */
    /* target side */
    int *exposure;        /* the group of a post epoch, or NULL */
    int nexposure;
    int *completed;       /* per origin: COMPLETEs received, not yet taken by a wait */
    int excl;             /* the exclusive lock's holder, or -1 */
    int shared;           /* shared lock holders */
    struct lockreq *lockq;
    struct zmpi_win *next;
};

static struct zmpi_win *windows;

static void hook(int ctx, int src, const unsigned char *data, long long len);

/* ---- datatypes on the wire ---- */

static long long wire_type_len(MPI_Datatype t)
{
    return (long long)sizeof(struct wire_type) + (long long)t->nblocks * 2 * sizeof(int64_t);
}

static unsigned char *put_type(unsigned char *p, MPI_Datatype t)
{
    struct wire_type w = {t->basic, t->nblocks, t->size, t->lb, t->extent, t->true_lb,
                          t->true_ub};
    memcpy(p, &w, sizeof w);
    p += sizeof w;
    for (int i = 0; i < t->nblocks; i++) {
        int64_t b[2] = {t->blocks[i].off, t->blocks[i].len};
        memcpy(p, b, sizeof b);
        p += sizeof b;
    }
    return p;
}

/* Rebuilds a datatype from the wire into *t (its blocks malloc'd). */
static const unsigned char *get_type(const unsigned char *p, struct zmpi_type *t)
{
    struct wire_type w;
    memcpy(&w, p, sizeof w);
    p += sizeof w;
    memset(t, 0, sizeof *t);
    t->committed = 1;
    t->basic = (enum zmpi_basic)w.basic;
    t->size = w.size;
    t->lb = w.lb;
    t->extent = w.extent;
    t->true_lb = w.true_lb;
    t->true_ub = w.true_ub;
    t->nblocks = w.nblocks;
    t->blocks = malloc((w.nblocks > 0 ? w.nblocks : 1) * sizeof *t->blocks);
    if (!t->blocks)
        abort();
    for (int i = 0; i < w.nblocks; i++) {
        int64_t b[2];
        memcpy(b, p, sizeof b);
        p += sizeof b;
        t->blocks[i].off = b[0];
        t->blocks[i].len = b[1];
    }
    return p;
}

/* A datatype a pending reply may use after the program freed it. */
static MPI_Datatype hold_type(MPI_Datatype t)
{
    if (t->predefined)
        return t;
    struct zmpi_type *c = malloc(sizeof *c);
    if (!c)
        abort();
    *c = *t;
    c->name = NULL;
    c->blocks = malloc((t->nblocks > 0 ? t->nblocks : 1) * sizeof *c->blocks);
    if (!c->blocks)
        abort();
    memcpy(c->blocks, t->blocks, t->nblocks * sizeof *c->blocks);
    return c;
}

static void drop_type(MPI_Datatype t)
{
    if (!t->predefined) {
        free(t->blocks);
        free(t);
    }
}

/* The bytes a count of t spans from its first to its last byte of data. */
static MPI_Aint span(int count, MPI_Datatype t)
{
    if (count <= 0 || t->size == 0)
        return 0;
    MPI_Aint ext = t->extent < 0 ? -t->extent : t->extent;
    return (t->true_ub - t->true_lb) + (MPI_Aint)(count - 1) * ext;
}

/* ---- the window list and errors ---- */

static struct zmpi_win *find_win(int ctx)
{
    for (struct zmpi_win *w = windows; w; w = w->next)
        if (w->comm->ctx == ctx)
            return w;
    return NULL;
}

#define CHECK_WIN(fn, win)                                                    \
    do {                                                                      \
        int e_ = zmpi_check_init(fn);                                         \
        if (e_)                                                               \
            return e_;                                                        \
        if (!(win))                                                           \
            return zmpi_error(NULL, MPI_ERR_WIN, fn, "invalid window");       \
    } while (0)
#define WIN_FAIL(win, code, fn, what) return zmpi_error((win)->comm, code, fn, what)

/* ---- sending requests and waiting for replies ---- */

/* Room for a message: the header and `extra` bytes after it. */
static unsigned char *message(long long extra, long long *len)
{
    *len = (long long)sizeof(struct rma) + extra;
    unsigned char *m = malloc(*len);
    if (!m)
        abort();
    return m;
}

/* Sends message m (its header h, the rest filled in) to target. */
static void send_msg(struct zmpi_win *w, int target, unsigned char *m, long long len,
                     const struct rma *h)
{
    memcpy(m, h, sizeof *h);
    zmpi_am_send(m, len, target, w->comm, w->comm->ctx);
}

/* Sends a message that is only a header. */
static void send_header(struct zmpi_win *w, int target, const struct rma *h)
{
    long long len;
    unsigned char *m = message(0, &len);
    send_msg(w, target, m, len, h);
}

/* Registers a reply to wait for from target; returns its id. */
static uint32_t expect(struct zmpi_win *w, int target, void *buf, int count, MPI_Datatype t)
{
    struct pending *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    if (++w->next_id == 0)
        w->next_id = 1;
    p->id = w->next_id;
    p->target = target;
    p->buf = buf;
    p->count = count;
    p->type = t ? hold_type(t) : NULL;
    p->next = w->pending;
    w->pending = p;
    w->waiting[target]++;
    return p->id;
}

/* Waits until no reply from target (-1: from any rank) is missing. */
static int wait_replies(struct zmpi_win *w, int target)
{
    for (;;) {
        int missing = 0;
        if (target >= 0)
            missing = w->waiting[target] > 0;
        else
            for (int r = 0; r < w->comm->size && !missing; r++)
                missing = w->waiting[r] > 0;
        if (!missing)
            return MPI_SUCCESS;
        int err = zmpi_progress(1);
        if (err)
            return err;
    }
}

/* Sends a request that only waits for its reply (FLUSH, LOCK, UNLOCK). */
static void control(struct zmpi_win *w, int kind, int target, int lock_type)
{
    struct rma h = {.kind = kind, .op = lock_type};
    h.id = expect(w, target, NULL, 0, NULL);
    send_header(w, target, &h);
}

/* Flushes target (-1: every rank written to) and waits for every reply. */
static int flush(struct zmpi_win *w, int target)
{
    for (int r = 0; r < w->comm->size; r++)
        if ((target < 0 || r == target) && w->written[r]) {
            control(w, M_FLUSH, r, 0);
            w->written[r] = 0;
        }
    return wait_replies(w, target);
}

/* ---- the target's side: the hook ---- */

static void reply(struct zmpi_win *w, int origin, uint32_t id, const void *data, long long n,
                  int count, MPI_Datatype t)
{
    struct rma h = {.kind = M_REPLY, .id = id};
    long long len;
    unsigned char *m = message(n, &len);
    if (n > 0)
        zmpi_pack(data, count, t, m + sizeof h);
    send_msg(w, origin, m, len, &h);
}

static int grantable(struct zmpi_win *w, int type)
{
    return w->excl < 0 && (type == MPI_LOCK_SHARED || w->shared == 0);
}

static void grant(struct zmpi_win *w, int src, int type, uint32_t id)
{
    if (type == MPI_LOCK_EXCLUSIVE)
        w->excl = src;
    else
        w->shared++;
    reply(w, src, id, NULL, 0, 0, NULL);
}

static void lock_request(struct zmpi_win *w, int src, int type, uint32_t id)
{
    if (!w->lockq && grantable(w, type)) {
        grant(w, src, type, id);
        return;
    }
    struct lockreq *q = calloc(1, sizeof *q), **pp = &w->lockq;
    if (!q)
        abort();
    q->src = src;
    q->type = type;
    q->id = id;
    while (*pp)
        pp = &(*pp)->next;
    *pp = q;
}

static void unlock_request(struct zmpi_win *w, int src, uint32_t id)
{
    if (w->excl == src)
        w->excl = -1;
    else if (w->shared > 0)
        w->shared--;
    reply(w, src, id, NULL, 0, 0, NULL);
    while (w->lockq && grantable(w, w->lockq->type)) {
        struct lockreq *q = w->lockq;
        w->lockq = q->next;
        grant(w, q->src, q->type, q->id);
        free(q);
    }
}

/* A reply to this rank: unpack its data, and count it in. */
static void take_reply(struct zmpi_win *w, uint32_t id, const unsigned char *data, long long n)
{
    for (struct pending **pp = &w->pending; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            struct pending *p = *pp;
            *pp = p->next;
            if (p->type && n > 0)
                zmpi_unpack(data, n, p->buf, p->count, p->type);
            if (p->type)
                drop_type(p->type);
            w->waiting[p->target]--;
            free(p);
            return;
        }
}

/* Applies one operation to this rank's window memory. */
static void apply(struct zmpi_win *w, int src, const struct rma *h, const unsigned char *p,
                  const unsigned char *end)
{
    struct zmpi_type tt;
    p = get_type(p, &tt);
    /* a dynamic window's displacements are addresses */
    char *addr = w->flavor == FLAVOR_DYNAMIC ? (char *)(intptr_t)h->disp
                                             : w->base + h->disp * w->disp_unit;
    long long bytes = (long long)tt.size * h->count;
    switch (h->kind) {
    case M_PUT:
        zmpi_unpack(p, bytes, addr, h->count, &tt);
        break;
    case M_GET:
        reply(w, src, h->id, addr, bytes, h->count, &tt);
        break;
    case M_ACC:
    case M_GET_ACC: {
        if (h->kind == M_GET_ACC)
            reply(w, src, h->id, addr, bytes, h->count, &tt);
        MPI_Op op = h->op >= 0 && h->op < NOPS ? ops[h->op] : MPI_NO_OP;
        if (op == MPI_NO_OP || p + bytes > end)
            break;
        if (op == MPI_REPLACE) {
            zmpi_unpack(p, bytes, addr, h->count, &tt);
            break;
        }
        /* The operand laid out as the target type, then combined. */
        MPI_Aint sp = span(h->count, &tt);
        char *tmp = malloc(sp > 0 ? sp : 1);
        if (!tmp)
            abort();
        zmpi_unpack(p, bytes, tmp - tt.true_lb, h->count, &tt);
        zmpi_apply(op, tmp - tt.true_lb, addr, h->count, &tt);
        free(tmp);
        break;
    }
    case M_CAS: {
        /* the new value, then the value to compare with */
        reply(w, src, h->id, addr, tt.size, 1, &tt);
        if (p + 2 * tt.size <= end && memcmp(addr + tt.true_lb, p + tt.size, tt.size) == 0)
            memcpy(addr + tt.true_lb, p, tt.size);
        break;
    }
    }
    free(tt.blocks);
}

static void hook(int ctx, int src, const unsigned char *data, long long len)
{
    struct zmpi_win *w = find_win(ctx);
    struct rma h;
    if (!w || len < (long long)sizeof h)
        return; /* not a window of ours (any more) */
    memcpy(&h, data, sizeof h);
    const unsigned char *p = data + sizeof h, *end = data + len;
    switch (h.kind) {
    case M_PUT:
    case M_GET:
    case M_ACC:
    case M_GET_ACC:
    case M_CAS:
        apply(w, src, &h, p, end);
        break;
    case M_REPLY:
        take_reply(w, h.id, p, end - p);
        break;
    case M_LOCK:
        lock_request(w, src, h.op, h.id);
        break;
    case M_UNLOCK:
        unlock_request(w, src, h.id);
        break;
    case M_FLUSH:
        reply(w, src, h.id, NULL, 0, 0, NULL);
        break;
    case M_POST:
        w->posted[src]++;
        break;
    case M_COMPLETE:
        w->completed[src]++;
        break;
    }
}

/* ---- creating and freeing windows ---- */

static int create(const char *fn, void *base, MPI_Aint size, int disp_unit, int flavor,
                  MPI_Comm comm, MPI_Win *out)
{
    int err = zmpi_check_init(fn);
    if (err)
        return err;
    if (!zmpi_comm_ok(comm))
        return zmpi_error(NULL, MPI_ERR_COMM, fn, "invalid communicator");
    if (size < 0)
        return zmpi_error(comm, MPI_ERR_SIZE, fn, "negative size");
    if (disp_unit <= 0)
        return zmpi_error(comm, MPI_ERR_DISP, fn, "displacement unit not positive");
    struct zmpi_win *w = calloc(1, sizeof *w);
    if (!w)
        return zmpi_error(comm, MPI_ERR_NO_MEM, fn, "out of memory");
    err = MPI_Comm_dup(comm, &w->comm);
    if (err) {
        free(w);
        return err;
    }
    int n = w->comm->size;
    w->base = base;
    w->size = size;
    w->disp_unit = disp_unit;
    w->flavor = flavor;
    w->excl = -1;
    w->sizes = calloc(n, sizeof *w->sizes);
    w->units = calloc(n, sizeof *w->units);
    w->waiting = calloc(n, sizeof(int));
    w->written = calloc(n, sizeof(int));
    w->posted = calloc(n, sizeof(int));
    w->completed = calloc(n, sizeof(int));
    if (!w->sizes || !w->units || !w->waiting || !w->written || !w->posted || !w->completed)
        abort();
    /* Known before any message for it can arrive: the others send theirs
     * only after the Allgather below, which needs this rank's part. */
    zmpi_am_hook = hook;
    w->next = windows;
    windows = w;
    long long mine[2] = {size, disp_unit}, *all = malloc(2 * n * sizeof *all);
    if (!all)
        abort();
    MPI_Errhandler h = w->comm->errh;
    w->comm->errh = MPI_ERRORS_RETURN;
    err = MPI_Allgather(mine, 2, MPI_LONG_LONG, all, 2, MPI_LONG_LONG, w->comm);
    w->comm->errh = h;
    for (int r = 0; r < n; r++) {
        w->sizes[r] = (MPI_Aint)all[2 * r];
        w->units[r] = (int)all[2 * r + 1];
    }
    free(all);
    if (err)
        return zmpi_error(comm, err, fn, "could not exchange the window sizes");
    *out = w;
    return MPI_SUCCESS;
}

int MPI_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                   MPI_Win *win)
{
    (void)info;
    return create("MPI_Win_create", base, size, disp_unit, FLAVOR_CREATE, comm, win);
}

int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr,
                     MPI_Win *win)
{
    (void)info;
    void *base = malloc(size > 0 ? size : 1);
    if (!base)
        return zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Win_allocate", "out of memory");
    int err = create("MPI_Win_allocate", base, size, disp_unit, FLAVOR_ALLOCATE, comm, win);
    if (err) {
        free(base);
        return err;
    }
    memcpy(baseptr, &base, sizeof base);
    return MPI_SUCCESS;
}

int MPI_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win *win)
{
    (void)info;
    /* Displacements are addresses (MPI_Get_address) in the target's memory. */
    return create("MPI_Win_create_dynamic", NULL, 0, 1, FLAVOR_DYNAMIC, comm, win);
}

int MPI_Win_attach(MPI_Win win, void *base, MPI_Aint size)
{
    CHECK_WIN("MPI_Win_attach", win);
    if (win->flavor != FLAVOR_DYNAMIC)
        WIN_FAIL(win, MPI_ERR_RMA_CONFLICT, "MPI_Win_attach", "not a dynamic window");
    if (size < 0 || (!base && size > 0))
        WIN_FAIL(win, MPI_ERR_ARG, "MPI_Win_attach", "invalid memory");
    return MPI_SUCCESS;
}

int MPI_Win_detach(MPI_Win win, const void *base)
{
    CHECK_WIN("MPI_Win_detach", win);
    (void)base;
    if (win->flavor != FLAVOR_DYNAMIC)
        WIN_FAIL(win, MPI_ERR_RMA_CONFLICT, "MPI_Win_detach", "not a dynamic window");
    return MPI_SUCCESS;
}

int MPI_Win_free(MPI_Win *winp)
{
    CHECK_WIN("MPI_Win_free", winp ? *winp : NULL);
    struct zmpi_win *w = *winp;
    /* Every epoch has ended; the barrier keeps this rank serving the
     * others' last requests until all of them are done with the window. */
    int err = wait_replies(w, -1);
    if (!err)
        err = MPI_Barrier(w->comm);
    if (err)
        WIN_FAIL(w, err, "MPI_Win_free", "could not finish the window's operations");
    for (struct zmpi_win **pp = &windows; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    while (w->lockq) {
        struct lockreq *q = w->lockq;
        w->lockq = q->next;
        free(q);
    }
    if (w->flavor == FLAVOR_ALLOCATE)
        free(w->base);
    MPI_Comm_free(&w->comm);
    free(w->sizes);
    free(w->units);
    free(w->waiting);
    free(w->written);
    free(w->posted);
    free(w->completed);
    free(w->access);
    free(w->exposure);
    free(w->name);
    free(w);
    *winp = MPI_WIN_NULL;
    return MPI_SUCCESS;
}

int MPI_Win_get_group(MPI_Win win, MPI_Group *group)
{
    CHECK_WIN("MPI_Win_get_group", win);
    return MPI_Comm_group(win->comm, group);
}

int MPI_Win_set_name(MPI_Win win, const char *name)
{
    CHECK_WIN("MPI_Win_set_name", win);
    if (!name)
        WIN_FAIL(win, MPI_ERR_ARG, "MPI_Win_set_name", "null name");
    size_t n = strnlen(name, MPI_MAX_OBJECT_NAME - 1);
    char *copy = malloc(n + 1);
    if (!copy)
        WIN_FAIL(win, MPI_ERR_NO_MEM, "MPI_Win_set_name", "out of memory");
    memcpy(copy, name, n);
    copy[n] = 0;
    free(win->name);
    win->name = copy;
    return MPI_SUCCESS;
}

int MPI_Win_get_name(MPI_Win win, char *name, int *len)
{
    CHECK_WIN("MPI_Win_get_name", win);
    const char *s = win->name ? win->name : "";
    size_t n = strlen(s);
    memcpy(name, s, n + 1);
    *len = (int)n;
    return MPI_SUCCESS;
}

int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr)
{
    (void)info;
    void *p = size >= 0 ? malloc(size > 0 ? size : 1) : NULL;
    if (!p)
        return zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Alloc_mem", "out of memory");
    memcpy(baseptr, &p, sizeof p);
    return MPI_SUCCESS;
}

int MPI_Free_mem(void *base)
{
    free(base);
    return MPI_SUCCESS;
}

/* ---- operations ---- */

/* Checks an operation's arguments; *skip for MPI_PROC_NULL. */
static int check_op(const char *fn, struct zmpi_win *w, int target, MPI_Aint disp, int ocount,
                    MPI_Datatype ot, int tcount, MPI_Datatype tt, int *skip)
{
    CHECK_WIN(fn, w);
    *skip = target == MPI_PROC_NULL;
    if (*skip)
        return MPI_SUCCESS;
    if (target < 0 || target >= w->comm->size)
        WIN_FAIL(w, MPI_ERR_RANK, fn, "target outside the window's group");
    if (ocount < 0 || tcount < 0)
        WIN_FAIL(w, MPI_ERR_COUNT, fn, "negative count");
    if ((ot && !zmpi_type_ok(ot)) || !zmpi_type_ok(tt))
        WIN_FAIL(w, MPI_ERR_TYPE, fn, "invalid or uncommitted datatype");
    if (ot && zmpi_type_bytes(ot, ocount) != zmpi_type_bytes(tt, tcount))
        WIN_FAIL(w, MPI_ERR_TYPE, fn, "origin and target data differ in size");
    if (zmpi_type_bytes(tt, tcount) < 0)
        WIN_FAIL(w, MPI_ERR_COUNT, fn, "larger than 2 GiB");
    if (w->flavor != FLAVOR_DYNAMIC) {
        MPI_Aint off = disp * w->units[target];
        MPI_Aint lo = off + (tcount > 0 ? tt->true_lb : 0), hi = lo + span(tcount, tt);
        if (disp < 0 || lo < 0 || hi > w->sizes[target])
            WIN_FAIL(w, MPI_ERR_RMA_RANGE, fn, "the data reach past the target's window");
    }
    return MPI_SUCCESS;
}

/* Builds and sends an operation message: header, target type, then `n`
 * bytes packed from (buf, count, type) and `n2` from (buf2, count, type). */
static void send_op(struct zmpi_win *w, struct rma *h, int target, MPI_Datatype tt,
                    const void *buf, int count, MPI_Datatype t, const void *buf2)
{
    long long n = buf ? zmpi_type_bytes(t, count) : 0, n2 = buf2 ? n : 0, len;
    unsigned char *m = message(wire_type_len(tt) + n + n2, &len);
    unsigned char *p = put_type(m + sizeof *h, tt);
    if (n > 0)
        zmpi_pack(buf, count, t, p);
    if (n2 > 0)
        zmpi_pack(buf2, count, t, p + n);
    send_msg(w, target, m, len, h);
    w->written[target] = 1;
}

int MPI_Put(const void *obuf, int ocount, MPI_Datatype ot, int target, MPI_Aint disp,
            int tcount, MPI_Datatype tt, MPI_Win win)
{
    int skip, err = check_op("MPI_Put", win, target, disp, ocount, ot, tcount, tt, &skip);
    if (err || skip)
        return err;
    struct rma h = {.kind = M_PUT, .count = tcount, .disp = disp};
    send_op(win, &h, target, tt, obuf, ocount, ot, NULL);
    return MPI_SUCCESS;
}

int MPI_Get(void *obuf, int ocount, MPI_Datatype ot, int target, MPI_Aint disp, int tcount,
            MPI_Datatype tt, MPI_Win win)
{
    int skip, err = check_op("MPI_Get", win, target, disp, ocount, ot, tcount, tt, &skip);
    if (err || skip)
        return err;
    struct rma h = {.kind = M_GET, .count = tcount, .disp = disp};
    h.id = expect(win, target, obuf, ocount, ot);
    send_op(win, &h, target, tt, NULL, 0, ot, NULL);
    return MPI_SUCCESS;
}

static int op_index(MPI_Op op)
{
    for (int i = 0; i < NOPS; i++)
        if (ops[i] == op)
            return i;
    return -1;
}

static int check_acc(const char *fn, struct zmpi_win *w, MPI_Op op, MPI_Datatype tt)
{
    if (op_index(op) < 0)
        WIN_FAIL(w, MPI_ERR_OP, fn, "one-sided accumulates take predefined operators only");
    if (!zmpi_op_ok(op, tt))
        WIN_FAIL(w, MPI_ERR_OP, fn, "operator does not apply to the datatype");
    return MPI_SUCCESS;
}

int MPI_Accumulate(const void *obuf, int ocount, MPI_Datatype ot, int target, MPI_Aint disp,
                   int tcount, MPI_Datatype tt, MPI_Op op, MPI_Win win)
{
    const char *fn = "MPI_Accumulate";
    int skip, err = check_op(fn, win, target, disp, ocount, ot, tcount, tt, &skip);
    if (err || skip)
        return err;
    if ((err = check_acc(fn, win, op, tt)))
        return err;
    struct rma h = {.kind = M_ACC, .count = tcount, .disp = disp, .op = op_index(op)};
    send_op(win, &h, target, tt, obuf, ocount, ot, NULL);
    return MPI_SUCCESS;
}

int MPI_Get_accumulate(const void *obuf, int ocount, MPI_Datatype ot, void *rbuf, int rcount,
                       MPI_Datatype rt, int target, MPI_Aint disp, int tcount, MPI_Datatype tt,
                       MPI_Op op, MPI_Win win)
{
    const char *fn = "MPI_Get_accumulate";
    int skip, err = check_op(fn, win, target, disp, rcount, rt, tcount, tt, &skip);
    if (!err && !skip && op != MPI_NO_OP)
        err = check_op(fn, win, target, disp, ocount, ot, tcount, tt, &skip);
    if (err || skip)
        return err;
    if ((err = check_acc(fn, win, op, tt)))
        return err;
    struct rma h = {.kind = M_GET_ACC, .count = tcount, .disp = disp, .op = op_index(op)};
    h.id = expect(win, target, rbuf, rcount, rt);
    if (op == MPI_NO_OP)
        send_op(win, &h, target, tt, NULL, 0, ot, NULL);
    else
        send_op(win, &h, target, tt, obuf, ocount, ot, NULL);
    return MPI_SUCCESS;
}

int MPI_Fetch_and_op(const void *obuf, void *rbuf, MPI_Datatype t, int target, MPI_Aint disp,
                     MPI_Op op, MPI_Win win)
{
    return MPI_Get_accumulate(obuf, 1, t, rbuf, 1, t, target, disp, 1, t, op, win);
}

int MPI_Compare_and_swap(const void *obuf, const void *cbuf, void *rbuf, MPI_Datatype t,
                         int target, MPI_Aint disp, MPI_Win win)
{
    const char *fn = "MPI_Compare_and_swap";
    int skip, err = check_op(fn, win, target, disp, 1, t, 1, t, &skip);
    if (err || skip)
        return err;
    if (!t->predefined)
        WIN_FAIL(win, MPI_ERR_TYPE, fn, "compare-and-swap takes a predefined datatype");
    struct rma h = {.kind = M_CAS, .count = 1, .disp = disp};
    h.id = expect(win, target, rbuf, 1, t);
    send_op(win, &h, target, t, obuf, 1, t, cbuf);
    return MPI_SUCCESS;
}

/* ---- synchronization ---- */

#define SYNC_DONE(win, err, fn) \
    return (err) ? zmpi_error((win)->comm, err, fn, "transport failed") : MPI_SUCCESS

int MPI_Win_fence(int assert, MPI_Win win)
{
    CHECK_WIN("MPI_Win_fence", win);
    (void)assert;
    int err = flush(win, -1);
    if (!err) {
        MPI_Errhandler h = win->comm->errh;
        win->comm->errh = MPI_ERRORS_RETURN;
        err = MPI_Barrier(win->comm);
        win->comm->errh = h;
    }
    SYNC_DONE(win, err, "MPI_Win_fence");
}

/* The ranks of win's communicator that make up group (malloc'd). */
static int *ranks_of(struct zmpi_win *w, MPI_Group group, int *n)
{
    MPI_Group wg;
    MPI_Comm_group(w->comm, &wg);
    int *from = malloc((group->size + 1) * sizeof(int));
    int *to = malloc((group->size + 1) * sizeof(int));
    if (!from || !to)
        abort();
    for (int i = 0; i < group->size; i++)
        from[i] = i;
    MPI_Group_translate_ranks(group, group->size, from, wg, to);
    MPI_Group_free(&wg);
    free(from);
    *n = group->size;
    return to;
}

int MPI_Win_post(MPI_Group group, int assert, MPI_Win win)
{
    CHECK_WIN("MPI_Win_post", win);
    (void)assert;
    if (!group)
        WIN_FAIL(win, MPI_ERR_GROUP, "MPI_Win_post", "null group");
    if (win->exposure)
        WIN_FAIL(win, MPI_ERR_RMA_SYNC, "MPI_Win_post", "an exposure epoch is already open");
    win->exposure = ranks_of(win, group, &win->nexposure);
    for (int i = 0; i < win->nexposure; i++) {
        if (win->exposure[i] == MPI_UNDEFINED)
            WIN_FAIL(win, MPI_ERR_GROUP, "MPI_Win_post", "a rank outside the window");
        struct rma h = {.kind = M_POST};
        send_header(win, win->exposure[i], &h);
    }
    return MPI_SUCCESS;
}

int MPI_Win_start(MPI_Group group, int assert, MPI_Win win)
{
    CHECK_WIN("MPI_Win_start", win);
    (void)assert;
    if (!group)
        WIN_FAIL(win, MPI_ERR_GROUP, "MPI_Win_start", "null group");
    if (win->access)
        WIN_FAIL(win, MPI_ERR_RMA_SYNC, "MPI_Win_start", "an access epoch is already open");
    win->access = ranks_of(win, group, &win->naccess);
    for (int i = 0; i < win->naccess; i++) {
        int t = win->access[i];
        if (t == MPI_UNDEFINED)
            WIN_FAIL(win, MPI_ERR_GROUP, "MPI_Win_start", "a rank outside the window");
        while (win->posted[t] == 0) {
            int err = zmpi_progress(1);
            if (err)
                SYNC_DONE(win, err, "MPI_Win_start");
        }
        win->posted[t]--;
    }
    return MPI_SUCCESS;
}

int MPI_Win_complete(MPI_Win win)
{
    CHECK_WIN("MPI_Win_complete", win);
    if (!win->access)
        WIN_FAIL(win, MPI_ERR_RMA_SYNC, "MPI_Win_complete", "no access epoch is open");
    for (int i = 0; i < win->naccess; i++) {
        struct rma h = {.kind = M_COMPLETE};
        send_header(win, win->access[i], &h);
        win->written[win->access[i]] = 0;
    }
    int err = MPI_SUCCESS;
    for (int i = 0; i < win->naccess && !err; i++)
        err = wait_replies(win, win->access[i]);
    free(win->access);
    win->access = NULL;
    SYNC_DONE(win, err, "MPI_Win_complete");
}

/* Whether every origin of the exposure epoch has completed. */
static int exposure_done(struct zmpi_win *w)
{
    for (int i = 0; i < w->nexposure; i++)
        if (w->completed[w->exposure[i]] == 0)
            return 0;
    return 1;
}

static void end_exposure(struct zmpi_win *w)
{
    for (int i = 0; i < w->nexposure; i++)
        w->completed[w->exposure[i]]--;
    free(w->exposure);
    w->exposure = NULL;
}

int MPI_Win_wait(MPI_Win win)
{
    CHECK_WIN("MPI_Win_wait", win);
    if (!win->exposure)
        WIN_FAIL(win, MPI_ERR_RMA_SYNC, "MPI_Win_wait", "no exposure epoch is open");
    while (!exposure_done(win)) {
        int err = zmpi_progress(1);
        if (err)
            SYNC_DONE(win, err, "MPI_Win_wait");
    }
    end_exposure(win);
    return MPI_SUCCESS;
}

int MPI_Win_test(MPI_Win win, int *flag)
{
    CHECK_WIN("MPI_Win_test", win);
    if (!win->exposure)
        WIN_FAIL(win, MPI_ERR_RMA_SYNC, "MPI_Win_test", "no exposure epoch is open");
    int err = zmpi_progress(0);
    if (err)
        SYNC_DONE(win, err, "MPI_Win_test");
    *flag = exposure_done(win);
    if (*flag)
        end_exposure(win);
    return MPI_SUCCESS;
}

static int check_rank(const char *fn, struct zmpi_win *w, int rank)
{
    if (rank < 0 || rank >= w->comm->size)
        WIN_FAIL(w, MPI_ERR_RANK, fn, "rank outside the window's group");
    return MPI_SUCCESS;
}

int MPI_Win_lock(int type, int rank, int assert, MPI_Win win)
{
    CHECK_WIN("MPI_Win_lock", win);
    (void)assert;
    if (type != MPI_LOCK_EXCLUSIVE && type != MPI_LOCK_SHARED)
        WIN_FAIL(win, MPI_ERR_LOCKTYPE, "MPI_Win_lock", "unknown lock type");
    if (rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    int err = check_rank("MPI_Win_lock", win, rank);
    if (err)
        return err;
    control(win, M_LOCK, rank, type);
    err = wait_replies(win, rank);
    SYNC_DONE(win, err, "MPI_Win_lock");
}

int MPI_Win_unlock(int rank, MPI_Win win)
{
    CHECK_WIN("MPI_Win_unlock", win);
    if (rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    int err = check_rank("MPI_Win_unlock", win, rank);
    if (err)
        return err;
    control(win, M_UNLOCK, rank, 0);
    win->written[rank] = 0;
    err = wait_replies(win, rank);
    SYNC_DONE(win, err, "MPI_Win_unlock");
}

int MPI_Win_lock_all(int assert, MPI_Win win)
{
    CHECK_WIN("MPI_Win_lock_all", win);
    (void)assert;
    for (int r = 0; r < win->comm->size; r++)
        control(win, M_LOCK, r, MPI_LOCK_SHARED);
    int err = wait_replies(win, -1);
    SYNC_DONE(win, err, "MPI_Win_lock_all");
}

int MPI_Win_unlock_all(MPI_Win win)
{
    CHECK_WIN("MPI_Win_unlock_all", win);
    for (int r = 0; r < win->comm->size; r++) {
        control(win, M_UNLOCK, r, 0);
        win->written[r] = 0;
    }
    int err = wait_replies(win, -1);
    SYNC_DONE(win, err, "MPI_Win_unlock_all");
}

int MPI_Win_flush(int rank, MPI_Win win)
{
    CHECK_WIN("MPI_Win_flush", win);
    if (rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    int err = check_rank("MPI_Win_flush", win, rank);
    if (err)
        return err;
    err = flush(win, rank);
    SYNC_DONE(win, err, "MPI_Win_flush");
}

int MPI_Win_flush_all(MPI_Win win)
{
    CHECK_WIN("MPI_Win_flush_all", win);
    int err = flush(win, -1);
    SYNC_DONE(win, err, "MPI_Win_flush_all");
}

int MPI_Win_flush_local(int rank, MPI_Win win)
{
    CHECK_WIN("MPI_Win_flush_local", win);
    if (rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    int err = check_rank("MPI_Win_flush_local", win, rank);
    if (err)
        return err;
    /* Puts and accumulates were copied when called; gets end with their reply. */
    err = wait_replies(win, rank);
    SYNC_DONE(win, err, "MPI_Win_flush_local");
}

int MPI_Win_flush_local_all(MPI_Win win)
{
    CHECK_WIN("MPI_Win_flush_local_all", win);
    int err = wait_replies(win, -1);
    SYNC_DONE(win, err, "MPI_Win_flush_local_all");
}

int MPI_Win_sync(MPI_Win win)
{
    /* Public and private copies of a window are the same memory here. */
    CHECK_WIN("MPI_Win_sync", win);
    return MPI_SUCCESS;
}
