/* nqueens: counts the solutions of the N-Queens problem in parallel over all
 * ranks of a Zorilla job (the application of the Zorilla paper).
 *
 * Usage: nqueens [N]   (default 8, 1 <= N <= 16)
 *
 * Work distribution: rank 0 (the master) splits the search tree into tasks
 * (every valid placement of queens on the first few rows) and hands them out
 * on demand: each other rank asks for a task, solves it, and asks again with
 * the task's count, so fast ranks do more. The master solves tasks itself
 * whenever no request is waiting, and prints the total:
 *   nqueens N=8 ranks=4 solutions=92
 *
 * Membership changes: the master knows which task each rank holds. When a
 * rank is replaced (its node failed; the fresh worker starts from the
 * beginning and asks for work without a result), the task it held is queued
 * again, so nothing is lost or counted twice. Workers that join a malleable
 * job just ask for work. (The master itself is not replaceable.)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "zorilla.h"

enum { TAG_REQUEST = 1, TAG_TASK = 2, TAG_DONE = 3 };

/* Tasks the master solves between two looks at the job's size while it
 * works alone. */
enum { ALONE_POLL = 64 };

/* The one message format; unused fields are zero. */
struct msg {
    int64_t sum;     /* TAG_REQUEST: count of the task just solved */
    int32_t tag;
    int32_t row;     /* TAG_TASK: first row still free */
    uint32_t cols, ld, rd; /* TAG_TASK: attacked columns / diagonals */
    int32_t task;    /* TAG_TASK: its index; TAG_REQUEST: the task solved, or -1 */
};

static int n;
static uint32_t all;

/* Classic bitmask backtracking from `row` with the given attacked sets. */
static int64_t solve(int row, uint32_t cols, uint32_t ld, uint32_t rd) {
    if (row == n) return 1;
    int64_t count = 0;
    uint32_t free = all & ~(cols | ld | rd);
    while (free) {
        uint32_t bit = free & -free;
        free ^= bit;
        count += solve(row + 1, cols | bit, ((ld | bit) << 1) & all, (rd | bit) >> 1);
    }
    return count;
}

static struct msg *tasks;
static int ntasks, task_cap;

/* Enumerates every valid placement of the first `depth` rows as a task. */
static void make_tasks(int row, int depth, uint32_t cols, uint32_t ld, uint32_t rd) {
    if (row == depth) {
        if (ntasks == task_cap) {
            task_cap = task_cap ? 2 * task_cap : 256;
            tasks = realloc(tasks, sizeof *tasks * task_cap);
            if (!tasks) { fprintf(stderr, "nqueens: out of memory\n"); exit(1); }
        }
        tasks[ntasks] = (struct msg){0, TAG_TASK, row, cols, ld, rd, ntasks};
        ntasks++;
        return;
    }
    uint32_t free = all & ~(cols | ld | rd);
    while (free) {
        uint32_t bit = free & -free;
        free ^= bit;
        make_tasks(row + 1, depth, cols | bit, ((ld | bit) << 1) & all, (rd | bit) >> 1);
    }
}

static void check(int32_t status, const char *what) {
    if (status < 0) {
        fprintf(stderr, "nqueens rank %d: %s failed: %d\n", zorilla_rank(), what, status);
        exit(1);
    }
}

static void send_msg(int dest, struct msg m) {
    check(zorilla_send(dest, &m, sizeof m), "send");
}

/* The master's bookkeeping. */
static char *done;        /* per task: its count has arrived */
static int ndone;
static int64_t total;
static int *queue;        /* tasks to hand out (a stack; lost tasks go back on it) */
static int nqueued;
static int *holding;      /* per rank: the task it holds, or -1 */
static char *dismissed;   /* per rank: told there is no more work */
static int ranks_known, ndismissed;

static void *grow(void *p, size_t size) {
    p = realloc(p, size);
    if (!p) { fprintf(stderr, "nqueens: out of memory\n"); exit(1); }
    return p;
}

/* Makes room for ranks 0..rank in the per-rank tables. */
static void know_rank(int rank) {
    if (rank < ranks_known) return;
    holding = grow(holding, sizeof *holding * (rank + 1));
    dismissed = grow(dismissed, rank + 1);
    for (int r = ranks_known; r <= rank; r++) { holding[r] = -1; dismissed[r] = 0; }
    ranks_known = rank + 1;
}

static void record(int task, int64_t count) {
    if (task < 0 || task >= ntasks || done[task]) return; /* a duplicate */
    done[task] = 1;
    ndone++;
    total += count;
}

/* Rank `r` no longer has the task it held (its worker is gone). */
static void lose(int r) {
    know_rank(r);
    if (holding[r] >= 0 && !done[holding[r]]) queue[nqueued++] = holding[r];
    holding[r] = -1;
    if (dismissed[r]) { dismissed[r] = 0; ndismissed--; }
}

/* The next task nobody has solved yet, or -1. */
static int next_task(void) {
    while (nqueued > 0) {
        int t = queue[--nqueued];
        if (!done[t]) return t;
    }
    return -1;
}

static void take_membership_changes(void) {
    struct zorilla_membership ev;
    while (zorilla_membership_next(&ev) == 1) {
        if (ev.kind == ZORILLA_REPLACED && ev.rank > 0) {
            fprintf(stderr, "nqueens: rank %d was replaced\n", ev.rank);
            lose(ev.rank);
        } else if (ev.kind == ZORILLA_JOINED) {
            know_rank(ev.rank);
        }
    }
}

static void master(void) {
    make_tasks(0, n > 3 ? 3 : n, 0, 0, 0);
    done = grow(NULL, ntasks + 1);
    for (int t = 0; t < ntasks; t++) done[t] = 0;
    queue = grow(NULL, sizeof *queue * (ntasks + 1));
    /* Hand out the first tasks first: the stack pops from the end. */
    for (int t = ntasks - 1; t >= 0; t--) queue[nqueued++] = t;
    zorilla_watch_membership(1);
    struct msg m;
    int32_t src;
    int size = zorilla_size();
    int alone_tasks = 0; /* tasks solved alone since size was last asked */
    while (ndone < ntasks || ndismissed < size - 1) {
        /* Alone (size 1), nobody can ask for work: solve tasks without a
         * host call each, asking only every ALONE_POLL tasks whether a
         * worker joined (a malleable job grows). */
        if (size == 1 && nqueued > 0 && alone_tasks < ALONE_POLL) {
            int t = next_task();
            if (t >= 0) record(t, solve(tasks[t].row, tasks[t].cols, tasks[t].ld, tasks[t].rd));
            alone_tasks++;
            continue;
        }
        alone_tasks = 0;
        take_membership_changes();
        size = zorilla_size();
        if (size == 1 && nqueued > 0) continue;
        /* Serve waiting requests first; only block when we have no work. */
        int32_t r = zorilla_recv(&src, &m, sizeof m, nqueued > 0 ? 0 : -1);
        if (r == ZORILLA_EMEMBERSHIP) continue;
        if (r == ZORILLA_ETIMEDOUT) {
            int t = next_task();
            if (t >= 0) record(t, solve(tasks[t].row, tasks[t].cols, tasks[t].ld, tasks[t].rd));
            continue;
        }
        check(r, "recv");
        if (m.tag != TAG_REQUEST || src <= 0) continue;
        know_rank(src);
        if (m.task >= 0) {
            record(m.task, m.sum);
            if (holding[src] == m.task) holding[src] = -1;
        } else {
            /* A fresh worker: whatever its rank held before is lost. */
            lose(src);
        }
        if (holding[src] >= 0) continue; /* the task it holds is on its way */
        int t = next_task();
        if (t >= 0) {
            holding[src] = t;
            send_msg(src, tasks[t]);
        } else if (!dismissed[src]) {
            dismissed[src] = 1;
            ndismissed++;
            send_msg(src, (struct msg){0, TAG_DONE, 0, 0, 0, 0, 0});
        }
    }
    printf("nqueens N=%d ranks=%d solutions=%lld\n", n, zorilla_size(), (long long)total);
}

static void worker(void) {
    struct msg m;
    int32_t src;
    send_msg(0, (struct msg){0, TAG_REQUEST, 0, 0, 0, 0, -1});
    for (;;) {
        check(zorilla_recv(&src, &m, sizeof m, -1), "recv");
        if (m.tag == TAG_TASK) {
            int64_t count = solve(m.row, m.cols, m.ld, m.rd);
            send_msg(0, (struct msg){count, TAG_REQUEST, 0, 0, 0, 0, m.task});
        } else if (m.tag == TAG_DONE) {
            return;
        }
    }
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 8;
    if (n < 1 || n > 16) { fprintf(stderr, "nqueens: N must be 1..16\n"); return 2; }
    all = (1u << n) - 1;
    if (zorilla_rank() == 0) {
        master();
    } else {
        worker();
    }
    return 0;
}
