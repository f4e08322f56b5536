/* A fix for MPICH 4.0's MPI_Finalize over UCX, built into the node's
 * library for native ranks (libzorilla-pmi.so, with zorilla_pmi.c), which
 * the node preloads into every native rank (LD_PRELOAD).
 *
 * The bug: MPICH 4.0.x (Debian 12 ships 4.0.2, with UCX 1.13) closes each
 * rank's UCX endpoints in MPI_Finalize with ucp_disconnect_nb(), waits for
 * the closes, and only then enters a PMI barrier. A close over TCP needs the
 * peer's UCX to make progress; a peer that already waits in the barrier, a
 * blocking read on its PMI descriptor, makes none. So jobs of three ranks or
 * more hang in MPI_Finalize now and then (most runs of 4 ranks here), under
 * MPICH's own mpiexec as under Zorilla. MPICH 4.1 moved the barrier before
 * the closes.
 *
 * The fix: ucp_disconnect_nb() starts the same close (flush mode, as
 * before) but hands MPICH no request to wait for, so every rank reaches the
 * barrier; the closes are then completed in ucp_worker_destroy(), which
 * every rank calls after the barrier, progressing the worker until they
 * are done (at most CLOSE_WAIT_SECONDS, then the worker is destroyed as
 * MPICH would have). Programs that call neither function (Open MPI's, or
 * any MPICH built without UCX) are not touched: the UCX calls are looked
 * up only when MPICH makes one, so nothing here needs UCX to load.
 *
 * One thread finalizes, as MPICH does; the pending closes live until the
 * worker is destroyed. Build (deploy/install.sh does):
 *
 *   cc -O2 -shared -fPIC sdk/native/zorilla_pmi.c sdk/native/zorilla_ucx.c \
 *      -o libzorilla-pmi.so -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

/* UCX's types and constants (ucp/api/ucp.h, ucs/type/status.h), which
 * have been stable since UCX 1.x: an endpoint, a worker and a request are
 * pointers; a request pointer is an error when it is a small negative
 * number. */
typedef void *ucp_ep_h;
typedef void *ucp_worker_h;
typedef void *ucs_status_ptr_t;
#define UCS_INPROGRESS 1
#define UCS_ERR_LAST -100
#define UCP_EP_CLOSE_MODE_FLUSH 1

/* How long ucp_worker_destroy() waits for the closes it was left. */
#define CLOSE_WAIT_SECONDS 10

static ucs_status_ptr_t *pending;
static size_t pending_len, pending_cap;

static void *ucx(const char *name) {
    return dlsym(RTLD_NEXT, name);
}

static int is_request(ucs_status_ptr_t r) {
    return r != NULL && (uintptr_t)r < (uintptr_t)UCS_ERR_LAST;
}

EXPORT ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep) {
    ucs_status_ptr_t (*close_nb)(ucp_ep_h, unsigned) =
        (ucs_status_ptr_t (*)(ucp_ep_h, unsigned))ucx("ucp_ep_close_nb");
    if (!close_nb) {
        ucs_status_ptr_t (*real)(ucp_ep_h) = (ucs_status_ptr_t (*)(ucp_ep_h))ucx("ucp_disconnect_nb");
        return real ? real(ep) : NULL;
    }
    ucs_status_ptr_t r = close_nb(ep, UCP_EP_CLOSE_MODE_FLUSH);
    if (!is_request(r)) return r;
    if (pending_len == pending_cap) {
        size_t cap = pending_cap ? pending_cap * 2 : 64;
        ucs_status_ptr_t *grown = realloc(pending, cap * sizeof *pending);
        /* Without room the close is MPICH's to wait for, as before. */
        if (!grown) return r;
        pending = grown;
        pending_cap = cap;
    }
    pending[pending_len++] = r;
    return NULL; /* UCS_OK: nothing for MPICH to wait for */
}

EXPORT void ucp_worker_destroy(ucp_worker_h worker) {
    void (*real)(ucp_worker_h) = (void (*)(ucp_worker_h))ucx("ucp_worker_destroy");
    unsigned (*progress)(ucp_worker_h) = (unsigned (*)(ucp_worker_h))ucx("ucp_worker_progress");
    int (*status)(void *) = (int (*)(void *))ucx("ucp_request_check_status");
    void (*release)(void *) = (void (*)(void *))ucx("ucp_request_free");
    if (pending_len && progress && status && release) {
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (;;) {
            size_t left = 0;
            for (size_t i = 0; i < pending_len; i++) {
                if (status(pending[i]) == UCS_INPROGRESS)
                    pending[left++] = pending[i];
                else
                    release(pending[i]);
            }
            pending_len = left;
            if (!left) break;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - start.tv_sec >= CLOSE_WAIT_SECONDS) break;
            progress(worker);
        }
    }
    if (real) real(worker);
}
