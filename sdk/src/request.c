/*
 * request.c — completing requests: Wait, Test and their any/all forms,
 * Request_free. Every wait drives the progress engine (p2p.c). A
 * persistent request completes with its current operation (`inner`) and
 * stays, inactive, for the next MPI_Start; while inactive it is complete
 * and answers an empty status, as MPI_REQUEST_NULL does.
 */
#include "zmpi.h"

static void empty_status(MPI_Status *s)
{
    if (s) {
        s->MPI_SOURCE = MPI_ANY_SOURCE;
        s->MPI_TAG = MPI_ANY_TAG;
        s->MPI_ERROR = MPI_SUCCESS;
        s->zmpi_cancelled = 0;
        s->zmpi_count = 0;
    }
}

static int done(MPI_Request r)
{
    return r->kind == ZR_PERSIST ? !r->inner || r->inner->done : r->done;
}

/* Whether r is a request that is not inactive. */
static int is_active(MPI_Request r) { return r && (r->kind != ZR_PERSIST || r->inner); }

/* Takes the result of a completed request and frees it (a persistent
 * request's operation only: the request becomes inactive). */
static int take(MPI_Request *rp, MPI_Status *status)
{
    MPI_Request r = *rp;
    if (r->kind == ZR_PERSIST) {
        MPI_Request op = r->inner;
        r->inner = NULL;
        if (!op) {
            empty_status(status);
            return MPI_SUCCESS;
        }
        return take(&op, status);
    }
    int err = r->status.MPI_ERROR;
    if (status) {
        if (r->kind == ZR_RECV)
            *status = r->status;
        else
            empty_status(status);
        status->MPI_ERROR = err;
    }
    zmpi_request_release(r);
    *rp = MPI_REQUEST_NULL;
    return err;
}

int zmpi_wait(MPI_Request *rp, MPI_Status *status)
{
    if (!*rp) {
        empty_status(status);
        return MPI_SUCCESS;
    }
    while (!done(*rp)) {
        int err = zmpi_progress(1);
        if (err)
            return err;
    }
    return take(rp, status);
}

int MPI_Wait(MPI_Request *rp, MPI_Status *status)
{
    int err = zmpi_check_init("MPI_Wait");
    if (err)
        return err;
    if (!rp)
        return zmpi_error(NULL, MPI_ERR_REQUEST, "MPI_Wait", "null request pointer");
    err = zmpi_wait(rp, status);
    return err ? zmpi_error(NULL, err, "MPI_Wait", "request failed") : MPI_SUCCESS;
}

int MPI_Test(MPI_Request *rp, int *flag, MPI_Status *status)
{
    int err = zmpi_check_init("MPI_Test");
    if (err)
        return err;
    if (!*rp) {
        *flag = 1;
        empty_status(status);
        return MPI_SUCCESS;
    }
    if (!done(*rp)) {
        err = zmpi_progress(0);
        if (err)
            return zmpi_error(NULL, err, "MPI_Test", "transport failed");
    }
    *flag = done(*rp);
    if (!*flag)
        return MPI_SUCCESS;
    err = take(rp, status);
    return err ? zmpi_error(NULL, err, "MPI_Test", "request failed") : MPI_SUCCESS;
}

int MPI_Waitall(int count, MPI_Request reqs[], MPI_Status statuses[])
{
    int err = zmpi_check_init("MPI_Waitall");
    if (err)
        return err;
    int failed = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < count; i++)
            if (reqs[i] && !done(reqs[i]))
                pending = 1;
        if (!pending)
            break;
        err = zmpi_progress(1);
        if (err)
            return zmpi_error(NULL, err, "MPI_Waitall", "transport failed");
    }
    for (int i = 0; i < count; i++) {
        MPI_Status *s = statuses ? &statuses[i] : NULL;
        if (!reqs[i])
            empty_status(s);
        else if (take(&reqs[i], s))
            failed = 1;
    }
    return failed ? zmpi_error(NULL, MPI_ERR_IN_STATUS, "MPI_Waitall", "a request failed")
                  : MPI_SUCCESS;
}

int MPI_Testall(int count, MPI_Request reqs[], int *flag, MPI_Status statuses[])
{
    int err = zmpi_check_init("MPI_Testall");
    if (err)
        return err;
    err = zmpi_progress(0);
    if (err)
        return zmpi_error(NULL, err, "MPI_Testall", "transport failed");
    for (int i = 0; i < count; i++)
        if (reqs[i] && !done(reqs[i])) {
            *flag = 0;
            return MPI_SUCCESS;
        }
    *flag = 1;
    int failed = 0;
    for (int i = 0; i < count; i++) {
        MPI_Status *s = statuses ? &statuses[i] : NULL;
        if (!reqs[i])
            empty_status(s);
        else if (take(&reqs[i], s))
            failed = 1;
    }
    return failed ? zmpi_error(NULL, MPI_ERR_IN_STATUS, "MPI_Testall", "a request failed")
                  : MPI_SUCCESS;
}

static int any_done(int count, MPI_Request reqs[], int *index, int *active)
{
    *active = 0;
    for (int i = 0; i < count; i++)
        if (is_active(reqs[i])) {
            *active = 1;
            if (done(reqs[i])) {
                *index = i;
                return 1;
            }
        }
    return 0;
}

int MPI_Waitany(int count, MPI_Request reqs[], int *index, MPI_Status *status)
{
    int err = zmpi_check_init("MPI_Waitany");
    if (err)
        return err;
    int active;
    while (!any_done(count, reqs, index, &active)) {
        if (!active) {
            *index = MPI_UNDEFINED;
            empty_status(status);
            return MPI_SUCCESS;
        }
        err = zmpi_progress(1);
        if (err)
            return zmpi_error(NULL, err, "MPI_Waitany", "transport failed");
    }
    err = take(&reqs[*index], status);
    return err ? zmpi_error(NULL, err, "MPI_Waitany", "request failed") : MPI_SUCCESS;
}

int MPI_Testany(int count, MPI_Request reqs[], int *index, int *flag, MPI_Status *status)
{
    int err = zmpi_check_init("MPI_Testany");
    if (err)
        return err;
    err = zmpi_progress(0);
    if (err)
        return zmpi_error(NULL, err, "MPI_Testany", "transport failed");
    int active;
    if (!any_done(count, reqs, index, &active)) {
        *flag = !active;
        *index = MPI_UNDEFINED;
        if (!active)
            empty_status(status);
        return MPI_SUCCESS;
    }
    *flag = 1;
    err = take(&reqs[*index], status);
    return err ? zmpi_error(NULL, err, "MPI_Testany", "request failed") : MPI_SUCCESS;
}

int MPI_Request_free(MPI_Request *rp)
{
    int err = zmpi_check_init("MPI_Request_free");
    if (err)
        return err;
    if (!*rp)
        return zmpi_error(NULL, MPI_ERR_REQUEST, "MPI_Request_free", "null request");
    MPI_Request r = *rp;
    if (r->kind == ZR_PERSIST) {
        /* an active operation finishes on its own, then goes */
        if (r->inner && r->inner->done)
            zmpi_request_release(r->inner);
        else if (r->inner)
            r->inner->freed = 1;
        zmpi_request_release(r);
    } else if (r->done)
        zmpi_request_release(r);
    else
        r->freed = 1;
    *rp = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}

int MPI_Get_count(const MPI_Status *s, MPI_Datatype t, int *count)
{
    long long size = t ? t->size : 0;
    if (size == 0) {
        *count = 0;
        return MPI_SUCCESS;
    }
    *count = s->zmpi_count % size ? MPI_UNDEFINED : (int)(s->zmpi_count / size);
    return MPI_SUCCESS;
}

int MPI_Get_elements(const MPI_Status *s, MPI_Datatype t, int *count)
{
    /* Counted in whole elements of t (exact for predefined types). */
    return MPI_Get_count(s, t, count);
}
