/*
 * zmpi.h — the library's internal interface between its parts. They form
 * layers, listed here from the bottom: each file calls only files listed
 * before it, never back (scripts/c-cycles.py checks the built objects), so
 * a part can be understood from what is below it.
 *   env.c          the library's state (initialized, this rank, the
 *                  world's size, the predefined communicators' storage)
 *                  and errors (zmpi_error, zmpi_check_init), time
 *   wasi.c         what wasi-libc lacks (nothing of MPI)
 *   datatype.c     type maps, pack; op.c: reduction operators
 *   info.c         Info objects
 *   comm.c         communicators, groups and topologies as objects, and
 *                  every query on them (no messages)
 *   p2p.c          the wire format, matching and the progress engine
 *   request.c      Wait/Test
 *   sendrecv.c     the point-to-point MPI calls, and the blocking helpers
 *                  of the collectives
 *   coll.c         collectives
 *   comm_create.c  making communicators (collective: Comm_dup, split,
 *                  Cartesian and graph constructors)
 *   checkpoint.c   Zorilla's checkpoint extension
 *   win.c          one-sided communication
 *   init.c         MPI_Init and MPI_Finalize
 */
#ifndef ZMPI_INTERNAL_H
#define ZMPI_INTERNAL_H

#include <stdint.h>
#include <stddef.h>
#include "mpi.h"

/* The largest message this library hands to zorilla_send(), header included.
 * Longer MPI messages are split into fragments of at most this size and
 * reassembled by the receiver. */
#ifndef ZMPI_FRAGMENT
#define ZMPI_FRAGMENT (256 * 1024)
#endif

/* How far a sender may run ahead of what its receiver's MPI engine has
 * taken in, per pair of ranks: each sender keeps at most
 * ZMPI_PAIR_WINDOW / ZMPI_FRAGMENT fragments unacknowledged per destination
 * (counting every fragment as a full one). */
#ifndef ZMPI_PAIR_WINDOW
#define ZMPI_PAIR_WINDOW (4 * 1024 * 1024)
#endif

/* How long one try to send a fragment waits for the transport's credit
 * before the engine takes in what has arrived and tries again (the
 * transport does not guarantee a sender room at a rank that is not
 * reading: two ranks sending to each other must keep reading). */
#ifndef ZMPI_SEND_POLL_MS
#define ZMPI_SEND_POLL_MS 1
#endif

/* ---- datatypes ---- */

/* Element kinds a reduction operator understands. */
enum zmpi_basic {
    ZB_NONE = 0, /* mixed or opaque (derived from several kinds) */
    ZB_CHAR, ZB_SCHAR, ZB_UCHAR, ZB_SHORT, ZB_USHORT, ZB_INT, ZB_UINT, ZB_LONG, ZB_ULONG,
    ZB_LLONG, ZB_ULLONG, ZB_I8, ZB_I16, ZB_I32, ZB_I64, ZB_U8, ZB_U16, ZB_U32, ZB_U64,
    ZB_FLOAT, ZB_DOUBLE, ZB_LDOUBLE, ZB_BOOL, ZB_WCHAR, ZB_BYTE, ZB_PACKED,
    ZB_FLOAT_INT, ZB_DOUBLE_INT, ZB_LONG_INT, ZB_2INT, ZB_SHORT_INT, ZB_LDOUBLE_INT,
    ZB_COUNT
};

/* One contiguous run of bytes of a type map, relative to the buffer. */
struct zmpi_block {
    MPI_Aint off;
    MPI_Aint len;
};

struct zmpi_type {
    int predefined;
    int committed;
    enum zmpi_basic basic; /* the kind of every element, or ZB_NONE */
    MPI_Aint size;          /* bytes of data in one element */
    MPI_Aint lb, extent;    /* extent = ub - lb */
    MPI_Aint true_lb, true_ub;
    MPI_Aint align;
    int nblocks;            /* runs of one element, sorted by type-map order */
    struct zmpi_block *blocks;
    struct zmpi_block one;  /* storage for the single block of predefined types */
    char *name;             /* set by MPI_Type_set_name, or NULL */
};

/* Bytes of data of count elements; -1 on overflow past INT_MAX. */
long long zmpi_type_bytes(MPI_Datatype t, int count);
int zmpi_type_contig(MPI_Datatype t); /* one block at offset 0 of size == extent */
void zmpi_pack(const void *in, int count, MPI_Datatype t, void *out);
/* Unpacks `bytes` bytes (possibly a partial last element) into count elements. */
void zmpi_unpack(const void *in, long long bytes, void *out, int count, MPI_Datatype t);
/* Copies count elements of type st to rcount elements of type rt (same signature). */
int zmpi_copy(const void *src, int scount, MPI_Datatype st, void *dst, int rcount, MPI_Datatype rt);
int zmpi_type_ok(MPI_Datatype t);

/* ---- operators ---- */
struct zmpi_op {
    int predefined;
    int commute;
    int which;              /* index of a predefined op */
    MPI_User_function *fn;
};
/* inout[i] = in[i] op inout[i] for count elements of type t (buffers laid out as t). */
int zmpi_apply(MPI_Op op, const void *in, void *inout, int count, MPI_Datatype t);
int zmpi_op_ok(MPI_Op op, MPI_Datatype t);

/* ---- groups and communicators ---- */
struct zmpi_group {
    int refs;
    int size;
    int *world;     /* world rank of each member */
    int me;         /* this process's rank in it, or MPI_UNDEFINED */
    int predefined;
};

struct zmpi_cart {
    int ndims;
    int *dims, *periods;
};

/* A distributed graph topology: this rank's in- and out-neighbours. */
struct zmpi_dgraph {
    int indegree, outdegree, weighted;
    int *sources, *sourceweights, *destinations, *destweights;
};

struct zmpi_comm {
    int predefined;
    int ctx;                 /* context of point-to-point messages; ctx+1 for collectives */
    int rank, size;
    struct zmpi_group *group;
    MPI_Errhandler errh;
    struct zmpi_cart *cart;
    struct zmpi_dgraph *dgraph;
    char *name;              /* set by MPI_Comm_set_name, or NULL */
};

struct zmpi_errhandler {
    int fatal;
};

/* World rank of rank r of comm. */
static inline int zmpi_world(MPI_Comm c, int r) { return c->group->world[r]; }
int zmpi_comm_ok(MPI_Comm c);
/* The checks an MPI call on a communicator starts with (MPI is running,
 * c is a communicator; CHECK_CART: a Cartesian one): on failure the call
 * returns the error. */
#define CHECK_COMM(fn, c)                                                          \
    do {                                                                           \
        int e_ = zmpi_check_init(fn);                                              \
        if (e_)                                                                    \
            return e_;                                                             \
        if (!zmpi_comm_ok(c))                                                      \
            return zmpi_error(NULL, MPI_ERR_COMM, fn, "invalid communicator");     \
    } while (0)
#define CHECK_CART(fn, c)                                                            \
    do {                                                                             \
        CHECK_COMM(fn, c);                                                           \
        if (!(c)->cart)                                                              \
            return zmpi_error(c, MPI_ERR_TOPOLOGY, fn, "not a Cartesian communicator"); \
    } while (0)
/* A new group of n world ranks (copied), or NULL when out of memory. */
struct zmpi_group *zmpi_group_new(int n, const int *world);
/* Free what a communicator holds (a predefined group is kept; NULL is none). */
void zmpi_group_drop(struct zmpi_group *g);
void zmpi_cart_drop(struct zmpi_cart *c);
void zmpi_dgraph_drop(struct zmpi_dgraph *d);
void zmpi_comm_init(int world_rank, int world_size);
/* Tags the library reserves for collectives (user tags are >= 0). */
enum {
    ZT_BARRIER = -100, ZT_BCAST, ZT_REDUCE, ZT_ALLREDUCE, ZT_SCAN, ZT_GATHER, ZT_SCATTER,
    ZT_ALLGATHER, ZT_ALLTOALL, ZT_REDSCAT, ZT_CTX, ZT_SPLIT, ZT_NEIGHBOR,
    ZT_NEIGHBOR_CART = -1000, /* and below: per dimension and direction */
};
/* The neighbours of a rank of a Cartesian or distributed graph communicator,
 * in the order neighbourhood collectives use (MPI_PROC_NULL for a missing
 * Cartesian neighbour). Returns 0, or -1 if comm has no such topology. */
int zmpi_neighbors(MPI_Comm comm, int *indegree, const int **sources, int *outdegree,
                   const int **destinations, int **scratch);

/* ---- errors ---- */
/* Reports error `code` found by `fn` on comm (NULL: COMM_WORLD) and returns it,
 * or aborts the job if the communicator's handler is MPI_ERRORS_ARE_FATAL. */
int zmpi_error(MPI_Comm comm, int code, const char *fn, const char *detail);
int zmpi_check_init(const char *fn);
extern int zmpi_initialized, zmpi_finalized;
extern int zmpi_world_rank, zmpi_world_size;

/* ---- requests and point to point ---- */
/* ZR_PERSIST: a persistent request (Send_init, Recv_init): its arguments,
 * and the request of its current Start in `inner` (NULL while inactive). */
enum zmpi_req_kind { ZR_SEND, ZR_RECV, ZR_PERSIST };

struct zmpi_unexp;

struct zmpi_request {
    enum zmpi_req_kind kind;
    int done;
    int freed;            /* Request_free'd before completion: free on completion */
    MPI_Status status;
    /* send side */
    int sync;             /* Ssend: waits for the receiver's match acknowledgement */
    int am;               /* a one-sided message (zmpi_am_send) */
    int psend;            /* persistent: a send (else a receive) */
    struct zmpi_request *inner; /* persistent: the active operation */
    int acked;
    uint32_t msgid;
    int dest_world;
    unsigned char *data;  /* packed bytes (owned) or the user's contiguous buffer */
    int owns_data;
    long long total, sent;
    struct zmpi_request *next_send; /* FIFO per destination */
    struct zmpi_request *next_sync; /* list of Ssends waiting for their ack */
    /* receive side */
    MPI_Comm comm;
    int ctx, src, tag;
    void *buf;
    int count;
    MPI_Datatype type;
    struct zmpi_request *next_posted;
    struct zmpi_unexp *pending; /* matched an unexpected message still arriving */
    unsigned char *rbuf;        /* where fragments land (user buffer if contiguous) */
    long long rcap;
    long long got;
};

MPI_Request zmpi_isend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                       MPI_Comm comm, int ctx, int sync);
MPI_Request zmpi_irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                       int ctx);
/* Makes progress: drains arrived messages and sends at most one fragment per
 * destination. With block != 0 it waits for something to arrive when there
 * is nothing to send. Returns MPI_SUCCESS or an error code. */
int zmpi_progress(int block);
/* Sets up the engine on first use (zmpi_isend and zmpi_irecv do it; call
 * it before zmpi_progress when neither has run). */
int zmpi_p2p_ready(void);
int zmpi_wait(MPI_Request *r, MPI_Status *status);
void zmpi_request_release(MPI_Request r);
/* Looks for a matching message without receiving it. */
int zmpi_iprobe(int ctx, int src, int tag, MPI_Status *status);

/* Internal blocking helpers for collectives (ctx = comm->ctx + 1). */
int zmpi_csend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm);
int zmpi_crecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm);
int zmpi_csendrecv(const void *sbuf, int scount, MPI_Datatype st, int dest, void *rbuf,
                   int rcount, MPI_Datatype rt, int src, int tag, MPI_Comm comm);
/* Agrees on a context id unused by every member of comm (collective over comm). */
int zmpi_new_ctx(MPI_Comm comm, int *ctx);
int zmpi_allreduce_int_max(int *v, MPI_Comm comm);
int zmpi_flush_sends(void);
extern int zmpi_next_ctx;

/* ---- one-sided messages (win.c) ----
 * A message sent by zmpi_am_send is not matched by any receive: once it has
 * arrived whole, zmpi_progress hands it to zmpi_am_hook (which win.c sets
 * when it creates a window), in the order messages from one source were
 * sent. The hook runs inside zmpi_progress, never inside the engine's own
 * sending or receiving, so it may send (zmpi_am_send) but must not wait.
 * This is the rule for one-sided progress: a rank applies what others do
 * to its windows whenever it is in an MPI call that drives the engine. */
extern void (*zmpi_am_hook)(int ctx, int src, const unsigned char *data, long long len);
/* Queues `len` bytes at `data` (malloc'd; the engine frees them) for rank
 * dest of comm, in context ctx. */
void zmpi_am_send(unsigned char *data, long long len, int dest, MPI_Comm comm, int ctx);

#endif
