/*
 * pthread.h for Zorilla's WebAssembly workers, which have one thread each
 * (zmpicc puts this directory on the include path; wasi-libc has no
 * pthread.h of its own in its single-threaded build).
 *
 * Programs that only include it, or take locks and run initializers once
 * (a library written to be thread-safe), build and run: with one thread a
 * lock is always free and an initializer runs at its first call. Creating
 * or joining threads, and waiting for another thread (condition variables,
 * barriers), cannot work in a single-threaded worker, so those calls are
 * compile errors that say so.
 *
 * The types are wasi-libc's own (musl's), as <sys/types.h> defines them.
 */
#ifndef ZMPI_WASI_PTHREAD_H
#define ZMPI_WASI_PTHREAD_H

#define __NEED_pthread_t
#define __NEED_pthread_once_t
#define __NEED_pthread_key_t
#define __NEED_pthread_spinlock_t
#define __NEED_pthread_attr_t
#define __NEED_pthread_mutex_t
#define __NEED_pthread_mutexattr_t
#define __NEED_pthread_cond_t
#define __NEED_pthread_condattr_t
#define __NEED_pthread_rwlock_t
#define __NEED_pthread_rwlockattr_t
#define __NEED_pthread_barrier_t
#define __NEED_pthread_barrierattr_t
#include <bits/alltypes.h>
#include <sched.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PTHREAD_MUTEX_INITIALIZER {{{0}}}
#define PTHREAD_COND_INITIALIZER {{{0}}}
#define PTHREAD_RWLOCK_INITIALIZER {{{0}}}
#define PTHREAD_ONCE_INIT 0
#define PTHREAD_MUTEX_NORMAL 0
#define PTHREAD_MUTEX_DEFAULT 0
#define PTHREAD_MUTEX_RECURSIVE 1
#define PTHREAD_MUTEX_ERRORCHECK 2
#define PTHREAD_CREATE_JOINABLE 0
#define PTHREAD_CREATE_DETACHED 1
#define PTHREAD_PROCESS_PRIVATE 0
#define PTHREAD_BARRIER_SERIAL_THREAD (-1)

/* The one thread. */
static inline pthread_t pthread_self(void) { return (pthread_t)1; }
static inline int pthread_equal(pthread_t a, pthread_t b) { return a == b; }

/* Locks: always free, with one thread. */
static inline int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    (void)m;
    (void)a;
    return 0;
}
static inline int pthread_mutex_destroy(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_lock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_trylock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_unlock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutexattr_init(pthread_mutexattr_t *a) { (void)a; return 0; }
static inline int pthread_mutexattr_destroy(pthread_mutexattr_t *a) { (void)a; return 0; }
static inline int pthread_mutexattr_settype(pthread_mutexattr_t *a, int t)
{
    (void)a;
    (void)t;
    return 0;
}
static inline int pthread_spin_init(pthread_spinlock_t *s, int shared)
{
    (void)s;
    (void)shared;
    return 0;
}
static inline int pthread_spin_destroy(pthread_spinlock_t *s) { (void)s; return 0; }
static inline int pthread_spin_lock(pthread_spinlock_t *s) { (void)s; return 0; }
static inline int pthread_spin_unlock(pthread_spinlock_t *s) { (void)s; return 0; }
static inline int pthread_rwlock_init(pthread_rwlock_t *l, const pthread_rwlockattr_t *a)
{
    (void)l;
    (void)a;
    return 0;
}
static inline int pthread_rwlock_destroy(pthread_rwlock_t *l) { (void)l; return 0; }
static inline int pthread_rwlock_rdlock(pthread_rwlock_t *l) { (void)l; return 0; }
static inline int pthread_rwlock_wrlock(pthread_rwlock_t *l) { (void)l; return 0; }
static inline int pthread_rwlock_unlock(pthread_rwlock_t *l) { (void)l; return 0; }

/* Initializers run at the first call. */
static inline int pthread_once(pthread_once_t *once, void (*init)(void))
{
    if (*once == 0) {
        *once = 1;
        init();
    }
    return 0;
}

/* Condition variables may be set up and signalled (nobody waits). */
static inline int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
    (void)c;
    (void)a;
    return 0;
}
static inline int pthread_cond_destroy(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_signal(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_broadcast(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_attr_init(pthread_attr_t *a) { (void)a; return 0; }
static inline int pthread_attr_destroy(pthread_attr_t *a) { (void)a; return 0; }

#define ZMPI_ONE_THREAD \
    __attribute__((unavailable("a Zorilla worker (WebAssembly) has a single thread")))
ZMPI_ONE_THREAD int pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
ZMPI_ONE_THREAD int pthread_join(pthread_t, void **);
ZMPI_ONE_THREAD int pthread_detach(pthread_t);
ZMPI_ONE_THREAD int pthread_cond_wait(pthread_cond_t *, pthread_mutex_t *);
ZMPI_ONE_THREAD int pthread_cond_timedwait(pthread_cond_t *, pthread_mutex_t *,
                                           const struct timespec *);
ZMPI_ONE_THREAD int pthread_barrier_init(pthread_barrier_t *, const pthread_barrierattr_t *,
                                         unsigned);
ZMPI_ONE_THREAD int pthread_barrier_wait(pthread_barrier_t *);
ZMPI_ONE_THREAD int pthread_barrier_destroy(pthread_barrier_t *);
ZMPI_ONE_THREAD int pthread_key_create(pthread_key_t *, void (*)(void *));

#ifdef __cplusplus
}
#endif

#endif /* ZMPI_WASI_PTHREAD_H */
