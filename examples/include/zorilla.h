/*
 * zorilla.h — the Zorilla host API for parallel WebAssembly workers.
 *
 * Every worker of a Zorilla job runs the same WebAssembly module (a WASI
 * preview 1 "command": it has a `main`). The workers of one job are numbered
 * by *rank* from 0 to size-1 and exchange byte messages through the functions
 * below, which the sandbox provides as imports of the module "zorilla".
 *
 * Guarantees:
 *   - Messages between one pair of ranks arrive in the order they were sent
 *     and are never duplicated. Nothing is guaranteed about the interleaving
 *     of messages from different senders.
 *   - Every queue is bounded: zorilla_send() waits (without burning CPU time)
 *     while the receiver's queue is full, so a receiver that never reads will
 *     eventually stall its senders. A sender may run 16 KiB ahead of what a
 *     receiver has read, more as the receiver's budget allows: two ranks that
 *     send to each other must keep reading (see zorilla_send_timeout).
 *   - Blocking calls (send, recv, barrier) do not consume the worker's CPU
 *     budget, but they do count towards its wall-clock limit.
 *   - A worker started without a job transport behaves as rank 0 of a job of
 *     size 1 (it can send messages to itself).
 *
 * Files: a worker sees exactly two directories of its job, `/inputs`
 * (read-only) and `/outputs` (read-write); nothing else of the host's
 * filesystem exists for it. stdout and stderr are captured by the node.
 *
 * Every call returns a status: 0 or a positive count on success, or one of
 * the negative ZORILLA_E* codes below.
 *
 * Build a guest with:
 *   clang --target=wasm32-wasi --sysroot=/usr -O2 -I examples/include -o x.wasm x.c
 */
#ifndef ZORILLA_H
#define ZORILLA_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __wasm__
#define ZORILLA_IMPORT(name) __attribute__((import_module("zorilla"), import_name(name)))
#else
/* A native build (a native job, issue 32): the calls come from
 * sdk/native/zorilla_native.c, which has zorilla_rank(), zorilla_size()
 * and the checkpoint calls (a native program's messages go over MPI). */
#define ZORILLA_IMPORT(name)
#endif

/* Status codes (negative values are errors). */
#define ZORILLA_OK 0
/* A blocking call gave up after its timeout. */
#define ZORILLA_ETIMEDOUT (-1)
/* The destination rank is outside 0..size-1. */
#define ZORILLA_EBADRANK (-2)
/* A pointer/length argument points outside the worker's linear memory. */
#define ZORILLA_EFAULT (-3)
/* The message is larger than the transport accepts (see ZORILLA_MAX_MESSAGE). */
#define ZORILLA_ETOOBIG (-4)
/* The job's transport is closed (the job is ending, or the peer is gone for good). */
#define ZORILLA_ECLOSED (-5)
/* zorilla_recv() was interrupted because the job's membership changed and the
 * worker asked to be told (see zorilla_watch_membership()). */
#define ZORILLA_EMEMBERSHIP (-6)
/* No checkpoint was saved for this rank (zorilla_checkpoint_size/_load). */
#define ZORILLA_ENOCHECKPOINT (-7)
/* The node gives this worker no checkpoint store (a local run). */
#define ZORILLA_ENOTSUP (-8)
/* The node could not keep or give back the checkpoint (no holder could be
 * reached, or one refused); the node's log says why. */
#define ZORILLA_ECHECKPOINT (-9)
/* An argument is out of its range (a checkpoint generation). */
#define ZORILLA_EINVAL (-10)

/* The largest checkpoint any node takes: 256 MiB. A node may set a smaller
 * limit (its `checkpoint_max_mib`); a larger checkpoint gets ZORILLA_ETOOBIG. */
#define ZORILLA_MAX_CHECKPOINT (256 * 1024 * 1024)

/* The highest checkpoint generation (zorilla_checkpoint_save_generation). */
#define ZORILLA_MAX_GENERATION (1LL << 48)

/* The largest message the sandbox accepts: 64 MiB. A larger one gets
 * ZORILLA_ETOOBIG at once. */
#define ZORILLA_MAX_MESSAGE (64 * 1024 * 1024)

/* Kinds of membership change reported by zorilla_membership_next(). */
/* A new worker joined the job; `rank` is its rank and `size` the new size. */
#define ZORILLA_JOINED 1
/* The worker of `rank` was lost and a fresh worker replaced it: messages in
 * flight to or from the old one may be lost, and the new one starts from the
 * beginning of the program. `size` is unchanged. */
#define ZORILLA_REPLACED 2

/* One membership change (12 bytes, as written by the host). */
struct zorilla_membership {
    int32_t kind; /* ZORILLA_JOINED or ZORILLA_REPLACED */
    int32_t rank; /* the rank that joined or was replaced */
    int32_t size; /* the number of workers after the change */
};

/* This worker's rank, 0 <= rank < size. Never changes during a run. */
ZORILLA_IMPORT("rank") int32_t zorilla_rank(void);

/* The current number of workers in the job. Grows when workers join. */
ZORILLA_IMPORT("size") int32_t zorilla_size(void);

/* Of a job array's task (`tasks = N` in the job spec, `zorilla submit
 * --tasks N`): its index, 0 to N-1, from the environment variable
 * ZORILLA_TASK; -1 for a worker that is not an array's task. Each task is
 * a world of its own: zorilla_rank() is 0 and zorilla_size() 1 (the tasks
 * of an array exchange no messages). ZORILLA_TASKS holds N. */
static inline int32_t zorilla_task(void) {
    const char *task = getenv("ZORILLA_TASK");
    return task ? (int32_t)strtol(task, NULL, 10) : -1;
}

/* Sends `len` bytes at `data` to worker `dest` (which may be this worker).
 * Returns ZORILLA_OK once the message is queued for delivery; waits while
 * the destination's queue is full. Errors: EBADRANK, EFAULT, ETOOBIG,
 * ECLOSED. */
ZORILLA_IMPORT("send") int32_t zorilla_send(int32_t dest, const void *data, uint32_t len);

/* Like zorilla_send(), but waits at most `timeout_ms` milliseconds for the
 * destination to have room: returns ZORILLA_ETIMEDOUT, and sends nothing,
 * if it has none by then. `timeout_ms` 0 only tries; < 0 waits for ever
 * (as zorilla_send()). Useful to an MPI library that must not block in a
 * send while it could receive. */
ZORILLA_IMPORT("send_timeout") int32_t zorilla_send_timeout(int32_t dest, const void *data, uint32_t len, int64_t timeout_ms);

/* Receives the next message from any rank.
 *
 * `timeout_ms` < 0 waits for ever, 0 only checks whether a message is
 * already waiting, and > 0 waits at most that many milliseconds.
 *
 * On success returns the message's full length n >= 0 and stores the sender's
 * rank in *source. If n <= cap the message is copied to `buf` and consumed.
 * If n > cap nothing is copied and the message stays at the head of the
 * queue: call again with a buffer of at least n bytes to receive it.
 * Errors: ETIMEDOUT, EFAULT, ECLOSED, EMEMBERSHIP. */
ZORILLA_IMPORT("recv") int32_t zorilla_recv(int32_t *source, void *buf, uint32_t cap, int64_t timeout_ms);

/* Waits until every worker of the job has entered the barrier.
 * A worker lost while waiting in it does not count: if its rank is replaced,
 * the barrier waits for the fresh worker (which starts from the beginning of
 * the program) to enter too.
 * Returns ZORILLA_OK, or ECLOSED. */
ZORILLA_IMPORT("barrier") int32_t zorilla_barrier(void);

/* Takes the oldest unread membership change, if any. Returns 1 and fills
 * *event if there was one, 0 if there was none. The host keeps the 64 most
 * recent changes; older unread ones are dropped. */
ZORILLA_IMPORT("membership_next") int32_t zorilla_membership_next(struct zorilla_membership *event);

/* With `enable` != 0, a blocking zorilla_recv() returns ZORILLA_EMEMBERSHIP
 * as soon as a membership change is waiting (read it with
 * zorilla_membership_next()). Off by default. Returns the previous setting. */
ZORILLA_IMPORT("watch_membership") int32_t zorilla_watch_membership(int32_t enable);

/*
 * Checkpoints. A worker hands the node its state as bytes; the node keeps
 * the latest complete checkpoint of each rank on other machines of the grid
 * (two by default), so that when this worker is lost, the fresh worker that
 * replaces its rank can load it and carry on instead of starting over. A
 * checkpoint is replaced as a whole: a save that fails leaves the previous
 * one. Checkpoints of a job are dropped when the job ends.
 */

/* Keeps `len` bytes at `data` as this rank's latest checkpoint, waiting
 * until they are stored. Returns on how many machines the checkpoint is
 * kept (>= 1; fewer than asked when the grid has fewer other nodes), or
 * ZORILLA_ETOOBIG, ZORILLA_EFAULT, ZORILLA_ENOTSUP, ZORILLA_ECHECKPOINT. */
ZORILLA_IMPORT("checkpoint_save") int32_t zorilla_checkpoint_save(const void *data, uint32_t len);

/* The size in bytes of this rank's latest checkpoint (fetching it), or
 * ZORILLA_ENOCHECKPOINT if there is none (a first start), ZORILLA_ENOTSUP,
 * ZORILLA_ECHECKPOINT. */
ZORILLA_IMPORT("checkpoint_size") int32_t zorilla_checkpoint_size(void);

/* Copies this rank's latest checkpoint into `buf` if it fits in `cap`
 * bytes, and returns its size (if that is larger than `cap`, nothing was
 * copied: call again with a larger buffer). Errors as zorilla_checkpoint_size,
 * and ZORILLA_EFAULT. */
ZORILLA_IMPORT("checkpoint_load") int32_t zorilla_checkpoint_load(void *buf, uint32_t cap);

/*
 * Checkpoints taken together. The ranks of an iterative code that exchange
 * data every step (a stencil's halos) cannot restart one rank alone from
 * its checkpoint: the others are further on. Such a job asks for
 * on_worker_lost = "rollback", and its ranks save at a barrier, all under
 * the same generation (1, 2, ...: every rank's checkpoint of generation g
 * describes the same step). When a rank is lost, every rank restarts from
 * the latest generation all of them hold (the node keeps each rank's two
 * latest, so one is common while a save is on its way), or from the start
 * if there is none:
 *
 *     zorilla_barrier();
 *     zorilla_checkpoint_save_generation(step / every, state, len);
 */

/* As zorilla_checkpoint_save(), as checkpoint `generation` (1 to
 * ZORILLA_MAX_GENERATION, else ZORILLA_EINVAL). */
ZORILLA_IMPORT("checkpoint_save_generation") int32_t zorilla_checkpoint_save_generation(int64_t generation, const void *data, uint32_t len);

/* The generation of this rank's latest checkpoint (fetching it, as
 * zorilla_checkpoint_size() does): the one to load after a rollback; 0 if
 * the checkpoint has none (saved by zorilla_checkpoint_save()). Errors as
 * zorilla_checkpoint_size(). */
ZORILLA_IMPORT("checkpoint_generation") int64_t zorilla_checkpoint_generation(void);

#ifdef __cplusplus
}
#endif

#endif /* ZORILLA_H */
