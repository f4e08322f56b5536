/*
 * sendrecv.c — the point-to-point MPI calls: Send, Recv and their
 * nonblocking, synchronous and ready forms, Sendrecv, persistent requests
 * and Start, Probe; and the blocking sends and receives the collectives
 * use in their own context (ctx + 1). Each checks its arguments and hands
 * the message to the engine (p2p.c); the blocking ones wait with
 * request.c. Above both in the library's layers (scripts/c-cycles.py).
 */
#include <stdlib.h>
#include "zmpi.h"

/* ---- the MPI calls ---- */

static int check_p2p(const char *fn, MPI_Comm comm, int count, MPI_Datatype t, int peer,
                     int tag, int any_ok)
{
    int err = zmpi_check_init(fn);
    if (err)
        return err;
    if (!zmpi_comm_ok(comm))
        return zmpi_error(NULL, MPI_ERR_COMM, fn, "invalid communicator");
    if (count < 0)
        return zmpi_error(comm, MPI_ERR_COUNT, fn, "negative count");
    if (!zmpi_type_ok(t))
        return zmpi_error(comm, MPI_ERR_TYPE, fn, "invalid or uncommitted datatype");
    if (zmpi_type_bytes(t, count) < 0)
        return zmpi_error(comm, MPI_ERR_COUNT, fn, "message larger than 2 GiB");
    if (!(peer == MPI_PROC_NULL || (any_ok && peer == MPI_ANY_SOURCE) ||
          (peer >= 0 && peer < comm->size)))
        return zmpi_error(comm, MPI_ERR_RANK, fn, "rank outside the communicator");
    if (!(tag >= 0 && tag <= MPI_TAG_UB_VALUE) && !(any_ok && tag == MPI_ANY_TAG))
        return zmpi_error(comm, MPI_ERR_TAG, fn, "invalid tag");
    return MPI_SUCCESS;
}

static int do_isend(const char *fn, const void *buf, int count, MPI_Datatype t, int dest,
                    int tag, MPI_Comm comm, int sync, MPI_Request *req)
{
    int err = check_p2p(fn, comm, count, t, dest, tag, 0);
    if (err)
        return err;
    *req = zmpi_isend(buf, count, t, dest, tag, comm, comm->ctx, sync);
    return MPI_SUCCESS;
}

static int do_send(const char *fn, const void *buf, int count, MPI_Datatype t, int dest, int tag,
                   MPI_Comm comm, int sync)
{
    MPI_Request r;
    int err = do_isend(fn, buf, count, t, dest, tag, comm, sync, &r);
    if (err)
        return err;
    err = zmpi_wait(&r, MPI_STATUS_IGNORE);
    return err ? zmpi_error(comm, err, fn, "send failed") : MPI_SUCCESS;
}

int MPI_Send(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm)
{
    return do_send("MPI_Send", buf, count, t, dest, tag, comm, 0);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm)
{
    return do_send("MPI_Ssend", buf, count, t, dest, tag, comm, 1);
}

int MPI_Rsend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm)
{
    return do_send("MPI_Rsend", buf, count, t, dest, tag, comm, 0);
}

int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    return do_isend("MPI_Isend", buf, count, t, dest, tag, comm, 0, req);
}

int MPI_Issend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
               MPI_Request *req)
{
    return do_isend("MPI_Issend", buf, count, t, dest, tag, comm, 1, req);
}

int MPI_Irsend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
               MPI_Request *req)
{
    return do_isend("MPI_Irsend", buf, count, t, dest, tag, comm, 0, req);
}

/* ---- persistent requests: the arguments kept, an operation per Start ---- */

static int persist(const char *fn, int send, int sync, const void *buf, int count,
                   MPI_Datatype t, int peer, int tag, MPI_Comm comm, MPI_Request *req)
{
    int err = check_p2p(fn, comm, count, t, peer, tag, !send);
    if (err)
        return err;
    MPI_Request r = calloc(1, sizeof *r);
    if (!r)
        return zmpi_error(comm, MPI_ERR_NO_MEM, fn, "out of memory");
    r->kind = ZR_PERSIST;
    r->psend = send;
    r->sync = sync;
    r->buf = (void *)buf;
    r->count = count;
    r->type = t;
    r->src = peer;
    r->tag = tag;
    r->comm = comm;
    r->status.MPI_ERROR = MPI_SUCCESS;
    *req = r;
    return MPI_SUCCESS;
}

int MPI_Send_init(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                  MPI_Request *req)
{
    return persist("MPI_Send_init", 1, 0, buf, count, t, dest, tag, comm, req);
}

int MPI_Ssend_init(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                   MPI_Request *req)
{
    return persist("MPI_Ssend_init", 1, 1, buf, count, t, dest, tag, comm, req);
}

int MPI_Rsend_init(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                   MPI_Request *req)
{
    return persist("MPI_Rsend_init", 1, 0, buf, count, t, dest, tag, comm, req);
}

int MPI_Recv_init(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                  MPI_Request *req)
{
    return persist("MPI_Recv_init", 0, 0, buf, count, t, src, tag, comm, req);
}

int MPI_Start(MPI_Request *req)
{
    int err = zmpi_check_init("MPI_Start");
    if (err)
        return err;
    MPI_Request r = req ? *req : NULL;
    if (!r || r->kind != ZR_PERSIST)
        return zmpi_error(NULL, MPI_ERR_REQUEST, "MPI_Start", "not a persistent request");
    if (r->inner)
        return zmpi_error(r->comm, MPI_ERR_REQUEST, "MPI_Start", "the request is already active");
    r->inner = r->psend ? zmpi_isend(r->buf, r->count, r->type, r->src, r->tag, r->comm,
                                     r->comm->ctx, r->sync)
                        : zmpi_irecv(r->buf, r->count, r->type, r->src, r->tag, r->comm,
                                     r->comm->ctx);
    return MPI_SUCCESS;
}

int MPI_Startall(int count, MPI_Request reqs[])
{
    for (int i = 0; i < count; i++) {
        int err = MPI_Start(&reqs[i]);
        if (err)
            return err;
    }
    return MPI_SUCCESS;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
              MPI_Request *req)
{
    int err = check_p2p("MPI_Irecv", comm, count, t, src, tag, 1);
    if (err)
        return err;
    *req = zmpi_irecv(buf, count, t, src, tag, comm, comm->ctx);
    return MPI_SUCCESS;
}

int MPI_Recv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm,
             MPI_Status *status)
{
    MPI_Request r;
    int err = MPI_Irecv(buf, count, t, src, tag, comm, &r);
    if (err)
        return err;
    err = zmpi_wait(&r, status);
    return err ? zmpi_error(comm, err, "MPI_Recv", "receive failed") : MPI_SUCCESS;
}

int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype st, int dest, int stag, void *rbuf,
                 int rcount, MPI_Datatype rt, int src, int rtag, MPI_Comm comm,
                 MPI_Status *status)
{
    MPI_Request r, s;
    int err = MPI_Irecv(rbuf, rcount, rt, src, rtag, comm, &r);
    if (err)
        return err;
    err = do_isend("MPI_Sendrecv", sbuf, scount, st, dest, stag, comm, 0, &s);
    if (err)
        return err;
    int e1 = zmpi_wait(&s, MPI_STATUS_IGNORE);
    int e2 = zmpi_wait(&r, status);
    err = e1 ? e1 : e2;
    return err ? zmpi_error(comm, err, "MPI_Sendrecv", "exchange failed") : MPI_SUCCESS;
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype t, int dest, int stag, int src,
                         int rtag, MPI_Comm comm, MPI_Status *status)
{
    int err = check_p2p("MPI_Sendrecv_replace", comm, count, t, dest, stag, 0);
    if (err)
        return err;
    long long n = zmpi_type_bytes(t, count);
    void *tmp = malloc(n ? n : 1);
    if (!tmp)
        return zmpi_error(comm, MPI_ERR_NO_MEM, "MPI_Sendrecv_replace", "out of memory");
    zmpi_pack(buf, count, t, tmp);
    MPI_Request s, r;
    err = MPI_Irecv(buf, count, t, src, rtag, comm, &r);
    if (err) {
        free(tmp);
        return err;
    }
    s = zmpi_isend(tmp, (int)n, MPI_BYTE, dest, stag, comm, comm->ctx, 0);
    int e1 = zmpi_wait(&s, MPI_STATUS_IGNORE);
    int e2 = zmpi_wait(&r, status);
    free(tmp);
    err = e1 ? e1 : e2;
    return err ? zmpi_error(comm, err, "MPI_Sendrecv_replace", "exchange failed") : MPI_SUCCESS;
}

int MPI_Iprobe(int src, int tag, MPI_Comm comm, int *flag, MPI_Status *status)
{
    int err = check_p2p("MPI_Iprobe", comm, 0, MPI_BYTE, src, tag, 1);
    if (err)
        return err;
    if (src == MPI_PROC_NULL) {
        *flag = 1;
        if (status) {
            status->MPI_SOURCE = MPI_PROC_NULL;
            status->MPI_TAG = MPI_ANY_TAG;
            status->MPI_ERROR = MPI_SUCCESS;
            status->zmpi_count = 0;
        }
        return MPI_SUCCESS;
    }
    zmpi_p2p_ready();
    err = zmpi_progress(0);
    if (err)
        return zmpi_error(comm, err, "MPI_Iprobe", "transport failed");
    *flag = zmpi_iprobe(comm->ctx, src, tag, status);
    return MPI_SUCCESS;
}

int MPI_Probe(int src, int tag, MPI_Comm comm, MPI_Status *status)
{
    int flag = 0;
    for (;;) {
        int err = MPI_Iprobe(src, tag, comm, &flag, status);
        if (err || flag)
            return err;
        err = zmpi_progress(1);
        if (err)
            return zmpi_error(comm, err, "MPI_Probe", "transport failed");
    }
}

/* ---- helpers for collectives: their own context, ctx + 1 ---- */

int zmpi_csend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm)
{
    MPI_Request r = zmpi_isend(buf, count, t, dest, tag, comm, comm->ctx + 1, 0);
    return zmpi_wait(&r, MPI_STATUS_IGNORE);
}

int zmpi_crecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm)
{
    MPI_Request r = zmpi_irecv(buf, count, t, src, tag, comm, comm->ctx + 1);
    return zmpi_wait(&r, MPI_STATUS_IGNORE);
}

int zmpi_csendrecv(const void *sbuf, int scount, MPI_Datatype st, int dest, void *rbuf,
                   int rcount, MPI_Datatype rt, int src, int tag, MPI_Comm comm)
{
    MPI_Request r = zmpi_irecv(rbuf, rcount, rt, src, tag, comm, comm->ctx + 1);
    MPI_Request s = zmpi_isend(sbuf, scount, st, dest, tag, comm, comm->ctx + 1, 0);
    int e1 = zmpi_wait(&s, MPI_STATUS_IGNORE);
    int e2 = zmpi_wait(&r, MPI_STATUS_IGNORE);
    return e1 ? e1 : e2;
}
