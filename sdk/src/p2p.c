/*
 * p2p.c — point-to-point messages: the wire format, matching, and the
 * progress engine that moves fragments between this process and the host.
 *
 * Wire format: every zorilla message is one fragment, a 32-byte header and
 * at most ZMPI_FRAGMENT - 32 bytes of payload. An MPI message of n bytes is
 * ceil(n / payload) fragments (one for n = 0) sent back to back: messages to
 * one destination are sent strictly one after the other (a FIFO per
 * destination), and zorilla keeps each pair of ranks in order, so the
 * receiver reassembles by source alone and MPI's non-overtaking rule holds.
 * An Ssend's receiver answers with an ACK fragment when the message is
 * matched by a receive.
 *
 * Deadlock avoidance: zorilla_send() waits while the receiving rank gives
 * this sender no credit (a rank lends each sender a small window, more as
 * its budget allows: see zorilla.h), and two ranks waiting to send to each
 * other (or a longer cycle) without reading would wait for ever. So the
 * engine never waits in zorilla_send() without reading: it tries to send
 * for at most ZMPI_SEND_POLL_MS at a time and drains what has arrived in
 * between, and reading is what gives senders credit. Taking messages out
 * does not wait for matching receives: arrivals go to the unexpected
 * queue. The engine also keeps a window of credits per destination (see
 * ZMPI_PAIR_WINDOW); every data or ACK fragment spends one, and the
 * receiver gives them back in a CREDIT fragment (which spends none) once
 * it has taken half a window out of its queue. Before every fragment it
 * sends, the engine drains what has arrived, and it sends at most one
 * fragment per destination per pass. Large Isends progress whenever the program calls
 * into MPI (any Wait/Test/Probe/Send/Recv or collective); a program that
 * only computes does not progress them (nor return credits).
 *
 * One-sided messages (F_AM, see zmpi_am_send in zmpi.h) are assembled like
 * unexpected messages but never matched: zmpi_progress hands each whole one
 * to win.c's hook.
 *
 * The engine is internal: the MPI calls over it are in sendrecv.c and
 * request.c, above it in the library's layers (scripts/c-cycles.py); it
 * uses only the state and errors (env.c) and the datatypes' packing.
 */
#include <stdlib.h>
#include <string.h>
#include <zorilla.h>
#include "zmpi.h"

enum { K_DATA = 1, K_ACK = 2, K_CREDIT = 3 };
enum { F_SYNC = 1, F_AM = 2 };

struct hdr {
    uint8_t kind, flags;
    uint16_t reserved;
    int32_t ctx, src, tag;
    uint32_t msgid, total, offset, reserved2;
};
#define HDR ((int)sizeof(struct hdr))
#define PAYLOAD (ZMPI_FRAGMENT - HDR)
_Static_assert(sizeof(struct hdr) == 32, "header is 32 bytes");
_Static_assert(ZMPI_FRAGMENT > 64, "fragments carry a payload");

/* An arrived message no receive has matched yet (possibly still arriving). */
struct zmpi_unexp {
    int ctx, src, tag, src_world, sync;
    uint32_t msgid;
    long long total, got;
    unsigned char *data;
    MPI_Request req; /* a receive that matched it before its last fragment */
    struct zmpi_unexp *next;
};

static unsigned char *scratch;              /* one fragment in */
static unsigned char *outbuf;               /* one fragment out */
static MPI_Request *send_head, *send_tail;  /* per destination world rank */
static int sends_queued;
static MPI_Request sync_wait;               /* Ssends waiting for their ACK */
static MPI_Request posted_head, posted_tail;
static struct zmpi_unexp *unexp_head, *unexp_tail;
static struct zmpi_unexp *am_head, *am_tail; /* one-sided messages */
static int in_am;                           /* the hook is running */
void (*zmpi_am_hook)(int ctx, int src, const unsigned char *data, long long len);
static MPI_Request *in_req;                 /* per source: message being assembled */
static struct zmpi_unexp **in_unexp;
static uint32_t next_msgid = 1;
struct ack { int dest; uint32_t msgid; };
static struct ack *acks;
static int nacks, cap_acks;
static int window;        /* credits per destination */
static int *credits;      /* per destination: fragments we may still send */
static int *consumed;     /* per source: fragments taken, credit not yet returned */

/* The engine's buffers and per-rank tables, made on first use (they are
 * sized by the world, known once MPI_Init has run). Returns 1. */
int zmpi_p2p_ready(void)
{
    if (scratch)
        return 1;
    int n = zmpi_world_size;
    scratch = malloc(ZMPI_FRAGMENT);
    outbuf = malloc(ZMPI_FRAGMENT);
    send_head = calloc(n, sizeof *send_head);
    send_tail = calloc(n, sizeof *send_tail);
    in_req = calloc(n, sizeof *in_req);
    in_unexp = calloc(n, sizeof *in_unexp);
    credits = calloc(n, sizeof *credits);
    consumed = calloc(n, sizeof *consumed);
    window = ZMPI_PAIR_WINDOW / ZMPI_FRAGMENT;
    if (window < 1)
        window = 1;
    for (int d = 0; d < n && credits; d++)
        credits[d] = window;
    if (!(scratch && outbuf && send_head && send_tail && in_req && in_unexp && credits && consumed))
        abort();
    return 1;
}

static int map_err(int32_t rc)
{
    switch (rc) {
    case ZORILLA_EBADRANK: return MPI_ERR_RANK;
    case ZORILLA_ETOOBIG: return MPI_ERR_COUNT;
    default: return MPI_ERR_OTHER;
    }
}

static void handle(int w, const unsigned char *msg, int32_t n);

/* Takes one message from the host (waiting at most timeout_ms) and handles
 * it. Returns 1 if there was one, 0 if not, or a negative MPI error. */
static int take_one(int64_t timeout_ms)
{
    int32_t src = -1;
    int32_t n = zorilla_recv(&src, scratch, ZMPI_FRAGMENT, timeout_ms);
    if (n == ZORILLA_ETIMEDOUT)
        return 0;
    if (n < 0)
        return -MPI_ERR_OTHER;
    if (n > ZMPI_FRAGMENT) {
        /* Not a fragment of ours (a raw zorilla_send from the program):
         * take it out of the way and drop it. */
        void *big = malloc(n);
        if (!big)
            abort();
        zorilla_recv(&src, big, (uint32_t)n, 0);
        free(big);
        return 1;
    }
    handle(src, scratch, n);
    return 1;
}

/* Takes in what has arrived, without waiting. Returns how many messages. */
static int drain(int *err)
{
    int got = 0;
    for (int i = 0; i < 256; i++) {
        int rc = take_one(0);
        if (rc < 0)
            *err = -rc;
        if (rc <= 0)
            break;
        got++;
    }
    return got;
}

/* Sends one fragment (header + payload) after draining arrivals; while the
 * receiver has no credit for it, drains again every ZMPI_SEND_POLL_MS (see
 * "Deadlock avoidance" above). */
static int send_frag(int dest, const struct hdr *h, const void *payload, uint32_t len)
{
    memcpy(outbuf, h, HDR);
    if (len)
        memcpy(outbuf + HDR, payload, len);
    for (int64_t wait = 0;; wait = ZMPI_SEND_POLL_MS) {
        int err = MPI_SUCCESS;
        drain(&err);
        if (err)
            return err;
        int32_t rc = zorilla_send_timeout(dest, outbuf, (uint32_t)HDR + len, wait);
        if (rc != ZORILLA_ETIMEDOUT)
            return rc < 0 ? map_err(rc) : MPI_SUCCESS;
    }
}

static void queue_ack(int dest, uint32_t msgid)
{
    if (nacks == cap_acks) {
        int nc = cap_acks ? 2 * cap_acks : 16;
        struct ack *a = realloc(acks, nc * sizeof *a);
        if (!a)
            abort();
        acks = a;
        cap_acks = nc;
    }
    acks[nacks].dest = dest;
    acks[nacks].msgid = msgid;
    nacks++;
}

/* Every request (the engine's, and sendrecv.c's persistent ones) is freed
 * with this, by the engine or by request.c. */
void zmpi_request_release(MPI_Request r) { free(r); }

static void finish(MPI_Request r)
{
    r->done = 1;
    if (r->freed)
        zmpi_request_release(r);
}

static int send_complete(MPI_Request r)
{
    return r->sent >= r->total && (!r->sync || r->acked);
}

/* Sends the next fragment of the first queued message to dest. */
static int send_next(int dest)
{
    MPI_Request r = send_head[dest];
    struct hdr h = {0};
    h.kind = K_DATA;
    h.flags = (r->sync ? F_SYNC : 0) | (r->am ? F_AM : 0);
    h.ctx = r->ctx;
    h.src = r->src; /* the sender's rank in the communicator */
    h.tag = r->tag;
    h.msgid = r->msgid;
    h.total = (uint32_t)r->total;
    h.offset = (uint32_t)r->sent;
    long long len = r->total - r->sent;
    if (len > PAYLOAD)
        len = PAYLOAD;
    credits[dest]--;
    int err = send_frag(dest, &h, r->data + r->sent, (uint32_t)len);
    if (err) {
        r->status.MPI_ERROR = err;
        len = r->total - r->sent; /* give up on this message */
        r->acked = 1;
    }
    r->sent += len;
    if (r->sent >= r->total) {
        send_head[dest] = r->next_send;
        if (!send_head[dest])
            send_tail[dest] = NULL;
        sends_queued--;
        if (r->owns_data) {
            free(r->data);
            r->data = NULL;
            r->owns_data = 0;
        }
        if (send_complete(r))
            finish(r);
        else {
            r->next_sync = sync_wait;
            sync_wait = r;
        }
    }
    return err;
}

/* Hands every whole one-sided message to the hook. Messages from one
 * source complete in the order they were sent, so they are handled in
 * that order; the hook's own sends may append to the list meanwhile. */
static int run_am(void)
{
    int ran = 0;
    in_am = 1;
    struct zmpi_unexp **pp = &am_head, *prev = NULL;
    while (*pp) {
        struct zmpi_unexp *e = *pp;
        if (e->got < e->total) {
            prev = e;
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        if (am_tail == e)
            am_tail = prev;
        zmpi_am_hook(e->ctx, e->src, e->data, e->total);
        free(e->data);
        free(e);
        ran = 1;
    }
    in_am = 0;
    return ran;
}

int zmpi_progress(int block)
{
    int err = MPI_SUCCESS;
    int did = drain(&err);
    if (am_head && zmpi_am_hook && !in_am && run_am())
        did = 1;
    int threshold = window / 2 > 0 ? window / 2 : 1;
    for (int w = 0; w < zmpi_world_size && !err; w++)
        if (consumed[w] >= threshold) {
            struct hdr h = {0};
            h.kind = K_CREDIT;
            h.msgid = (uint32_t)consumed[w];
            consumed[w] = 0;
            /* A rank that has finished (left MPI_Finalize) takes no more
             * messages and needs no credit: that failure is not ours. */
            (void)send_frag(w, &h, NULL, 0);
            did = 1;
        }
    for (int i = 0; i < nacks && !err;) {
        int dest = acks[i].dest;
        if (credits[dest] <= 0) {
            i++;
            continue;
        }
        struct hdr h = {0};
        h.kind = K_ACK;
        h.msgid = acks[i].msgid;
        acks[i] = acks[--nacks];
        credits[dest]--;
        err = send_frag(dest, &h, NULL, 0);
        did = 1;
    }
    if (sends_queued > 0) {
        for (int d = 0; d < zmpi_world_size && !err; d++)
            if (send_head[d] && credits[d] > 0) {
                send_next(d);
                did = 1;
            }
    }
    if (!did && block && !err) {
        int rc = take_one(-1);
        if (rc < 0)
            err = -rc;
    }
    return err;
}

/* ---- receiving ---- */

static int matches(int ctx, int src, int tag, int rctx, int rsrc, int rtag)
{
    return ctx == rctx && (rsrc == MPI_ANY_SOURCE || rsrc == src) &&
           ((rtag == MPI_ANY_TAG && tag >= 0) || rtag == tag);
}

/* Prepares a matched receive for a message of `total` bytes. */
static void start_recv(MPI_Request r, int src, int tag, long long total)
{
    long long cap = zmpi_type_bytes(r->type, r->count);
    r->status.MPI_SOURCE = src;
    r->status.MPI_TAG = tag;
    r->total = total;
    r->got = 0;
    if (total > cap) {
        r->status.MPI_ERROR = MPI_ERR_TRUNCATE;
        total = cap;
    }
    r->status.zmpi_count = total;
    r->rcap = total;
    if (zmpi_type_contig(r->type)) {
        r->rbuf = (unsigned char *)r->buf + r->type->true_lb;
    } else {
        r->rbuf = total ? malloc(total) : NULL;
        if (total && !r->rbuf)
            abort();
    }
}

static void end_recv(MPI_Request r)
{
    if (!zmpi_type_contig(r->type) && r->rcap > 0) {
        zmpi_unpack(r->rbuf, r->rcap, r->buf, r->count, r->type);
        free(r->rbuf);
    }
    r->rbuf = NULL;
    finish(r);
}

static void recv_bytes(MPI_Request r, long long off, const unsigned char *p, long long len)
{
    if (off < r->rcap) {
        long long n = len;
        if (off + n > r->rcap)
            n = r->rcap - off;
        memcpy(r->rbuf + off, p, n);
    }
    r->got = off + len;
}

static void unlink_posted(MPI_Request r)
{
    MPI_Request *pp = &posted_head, prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->next_posted;
    }
    if (*pp) {
        *pp = r->next_posted;
        if (posted_tail == r)
            posted_tail = prev;
    }
}

/* Hands a complete unexpected message to its matched receive. */
static void deliver(struct zmpi_unexp *e, MPI_Request r)
{
    start_recv(r, e->src, e->tag, e->total);
    recv_bytes(r, 0, e->data, e->total);
    free(e->data);
    free(e);
    end_recv(r);
}

static void handle(int w, const unsigned char *msg, int32_t n)
{
    struct hdr h;
    if (n < HDR || w < 0 || w >= zmpi_world_size)
        return; /* not ours: ignore */
    memcpy(&h, msg, HDR);
    const unsigned char *p = msg + HDR;
    long long len = n - HDR;
    if (h.kind == K_CREDIT) {
        credits[w] += (int)h.msgid;
        return;
    }
    consumed[w]++;
    if (h.kind == K_ACK) {
        for (MPI_Request *pp = &sync_wait; *pp; pp = &(*pp)->next_sync) {
            MPI_Request r = *pp;
            if (r->dest_world == w && r->msgid == h.msgid) {
                *pp = r->next_sync;
                r->acked = 1;
                finish(r);
                return;
            }
        }
        /* The receiver acknowledges on matching the first fragment, so a
         * long Ssend can be acknowledged while its later fragments are still
         * queued here. */
        for (int d = 0; d < zmpi_world_size; d++)
            for (MPI_Request r = send_head[d]; r; r = r->next_send)
                if (r->dest_world == w && r->msgid == h.msgid)
                    r->acked = 1;
        return;
    }
    if (h.kind != K_DATA)
        return;
    if (h.offset == 0) {
        /* a new message from w */
        MPI_Request r = h.flags & F_AM ? NULL : posted_head;
        while (r && !matches(h.ctx, h.src, h.tag, r->ctx, r->src, r->tag))
            r = r->next_posted;
        if (r) {
            unlink_posted(r);
            start_recv(r, h.src, h.tag, h.total);
            if (h.flags & F_SYNC)
                queue_ack(w, h.msgid);
            recv_bytes(r, 0, p, len);
            if (r->got >= r->total)
                end_recv(r);
            else
                in_req[w] = r;
            return;
        }
        struct zmpi_unexp *e = calloc(1, sizeof *e);
        if (!e)
            abort();
        e->ctx = h.ctx;
        e->src = h.src;
        e->tag = h.tag;
        e->src_world = w;
        e->sync = h.flags & F_SYNC;
        e->msgid = h.msgid;
        e->total = h.total;
        e->data = malloc(h.total ? h.total : 1);
        if (!e->data)
            abort();
        struct zmpi_unexp **head = &unexp_head, **tail = &unexp_tail;
        if (h.flags & F_AM) {
            head = &am_head;
            tail = &am_tail;
        }
        if (*tail)
            (*tail)->next = e;
        else
            *head = e;
        *tail = e;
        memcpy(e->data, p, len);
        e->got = len;
        if (e->got < e->total)
            in_unexp[w] = e;
        return;
    }
    /* a later fragment of the message being assembled from w */
    if (in_req[w]) {
        MPI_Request r = in_req[w];
        recv_bytes(r, h.offset, p, len);
        if (r->got >= r->total) {
            in_req[w] = NULL;
            end_recv(r);
        }
    } else if (in_unexp[w]) {
        struct zmpi_unexp *e = in_unexp[w];
        if (h.offset + len <= e->total)
            memcpy(e->data + h.offset, p, len);
        e->got = h.offset + len;
        if (e->got >= e->total) {
            in_unexp[w] = NULL;
            if (e->req)
                deliver(e, e->req);
        }
    }
}

/* ---- posting ---- */

static uint32_t fresh_msgid(void) { return next_msgid++; }

/* Queues a send behind the others to its destination. */
static void enqueue(MPI_Request r)
{
    int d = r->dest_world;
    if (send_tail[d])
        send_tail[d]->next_send = r;
    else
        send_head[d] = r;
    send_tail[d] = r;
    sends_queued++;
    /* Start at once: small messages leave before the program goes back to
     * computing, as with an eager protocol. */
    if (send_head[d] == r && credits[d] > 0)
        send_next(d);
}

MPI_Request zmpi_isend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                       MPI_Comm comm, int ctx, int sync)
{
    MPI_Request r = calloc(1, sizeof *r);
    if (!r || !zmpi_p2p_ready())
        abort();
    r->kind = ZR_SEND;
    r->status.MPI_ERROR = MPI_SUCCESS;
    if (dest == MPI_PROC_NULL) {
        r->done = 1;
        return r;
    }
    long long total = zmpi_type_bytes(t, count);
    r->sync = sync;
    r->msgid = fresh_msgid();
    r->dest_world = zmpi_world(comm, dest);
    r->ctx = ctx;
    r->src = comm->rank;
    r->tag = tag;
    r->total = total;
    if (zmpi_type_contig(t)) {
        r->data = (unsigned char *)buf + t->true_lb;
    } else {
        r->data = malloc(total ? total : 1);
        if (!r->data)
            abort();
        r->owns_data = 1;
        zmpi_pack(buf, count, t, r->data);
    }
    enqueue(r);
    return r;
}

void zmpi_am_send(unsigned char *data, long long len, int dest, MPI_Comm comm, int ctx)
{
    MPI_Request r = calloc(1, sizeof *r);
    if (!r || !zmpi_p2p_ready())
        abort();
    r->kind = ZR_SEND;
    r->status.MPI_ERROR = MPI_SUCCESS;
    r->am = 1;
    r->freed = 1; /* nobody waits for it */
    r->msgid = fresh_msgid();
    r->dest_world = zmpi_world(comm, dest);
    r->ctx = ctx;
    r->src = comm->rank;
    r->total = len;
    r->data = data;
    r->owns_data = 1;
    enqueue(r);
}

MPI_Request zmpi_irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                       int ctx)
{
    MPI_Request r = calloc(1, sizeof *r);
    if (!r || !zmpi_p2p_ready())
        abort();
    r->kind = ZR_RECV;
    r->comm = comm;
    r->ctx = ctx;
    r->src = src;
    r->tag = tag;
    r->buf = buf;
    r->count = count;
    r->type = t;
    r->status.MPI_ERROR = MPI_SUCCESS;
    if (src == MPI_PROC_NULL) {
        r->status.MPI_SOURCE = MPI_PROC_NULL;
        r->status.MPI_TAG = MPI_ANY_TAG;
        r->done = 1;
        return r;
    }
    int err = MPI_SUCCESS;
    drain(&err);
    struct zmpi_unexp **pp = &unexp_head, *prev = NULL;
    while (*pp && !matches((*pp)->ctx, (*pp)->src, (*pp)->tag, ctx, src, tag)) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        struct zmpi_unexp *e = *pp;
        *pp = e->next;
        if (unexp_tail == e)
            unexp_tail = prev;
        if (e->sync)
            queue_ack(e->src_world, e->msgid);
        if (e->got >= e->total)
            deliver(e, r);
        else {
            e->req = r;
            r->pending = e;
        }
        return r;
    }
    if (posted_tail)
        posted_tail->next_posted = r;
    else
        posted_head = r;
    posted_tail = r;
    return r;
}

int zmpi_iprobe(int ctx, int src, int tag, MPI_Status *status)
{
    for (struct zmpi_unexp *e = unexp_head; e; e = e->next)
        if (matches(e->ctx, e->src, e->tag, ctx, src, tag)) {
            if (status) {
                status->MPI_SOURCE = e->src;
                status->MPI_TAG = e->tag;
                status->MPI_ERROR = MPI_SUCCESS;
                status->zmpi_count = e->total;
                status->zmpi_cancelled = 0;
            }
            return 1;
        }
    return 0;
}

/* Completes every pending send (MPI_Finalize). */
int zmpi_flush_sends(void)
{
    if (!scratch)
        return MPI_SUCCESS;
    while (sends_queued > 0 || nacks > 0 || sync_wait) {
        int err = zmpi_progress(1);
        if (err)
            return err;
    }
    return MPI_SUCCESS;
}
