/* nqueens: counts the solutions of the N-Queens problem in parallel over all
 * ranks of a Zorilla job (the application of the Zorilla paper).
 *
 * Usage: nqueens [N]   (default 8, 1 <= N <= 16)
 *
 * Work distribution: rank 0 (the master) splits the search tree into tasks
 * (every valid placement of queens on the first few rows) and hands them out
 * on demand: each other rank asks for a task, solves it, and asks again with
 * the task's count, so fast ranks do more. A rank holds up to two tasks: it
 * asks for the next while it solves the current one, so neither the
 * network's round trip nor a busy master leaves it idle. The master solves
 * tasks itself whenever no request is waiting, and prints the total:
 *   nqueens N=8 ranks=4 solutions=92
 *
 * Membership changes: the master knows which tasks each rank holds. When a
 * rank is replaced (its node failed; the fresh worker starts from the
 * beginning and asks for work without a result), the tasks it held are
 * queued again, so nothing is lost or counted twice. Workers that join a
 * malleable job just ask for work. (The master itself is not replaceable.)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "zorilla.h"

enum { TAG_REQUEST = 1, TAG_TASK = 2, TAG_DONE = 3 };

/* TAG_REQUEST's `task` when it carries no result: a fresh worker (whatever
 * its rank held is lost), or a worker asking for a second task. */
enum { FRESH = -1, ONE_MORE = -2 };

/* Tasks a rank holds at most: the one it solves and the next. */
enum { SLOTS = 2 };

/* Tasks the master solves between two looks at the job's size while it
 * works alone. */
enum { ALONE_POLL = 64 };

/* The one message format; unused fields are zero. */
struct msg {
    int64_t sum;     /* TAG_REQUEST: count of the task just solved */
    int32_t tag;
    int32_t row;     /* TAG_TASK: first row still free */
    uint32_t cols, ld, rd; /* TAG_TASK: attacked columns / diagonals */
    int32_t task;    /* TAG_TASK: its index; TAG_REQUEST: the task solved, FRESH or ONE_MORE */
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

/* A worker's request to the master. The master exits once it dismissed
 * every rank, so a request it can no longer take (a second one sent as
 * the first was answered with TAG_DONE) is refused as closed: this rank's
 * TAG_DONE is already in its inbox, so that is no error. */
static void request(struct msg m) {
    int32_t status = zorilla_send(0, &m, sizeof m);
    if (status != ZORILLA_ECLOSED) check(status, "send");
}

/* The master's bookkeeping. */
static char *done;        /* per task: its count has arrived */
static int ndone;
static int64_t total;
static int *queue;        /* tasks to hand out (a stack; lost tasks go back on it) */
static int nqueued;
static int *holding;      /* per rank, SLOTS entries: the tasks it holds, -1 for none */
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
    holding = grow(holding, sizeof *holding * SLOTS * (rank + 1));
    dismissed = grow(dismissed, rank + 1);
    for (int r = ranks_known; r <= rank; r++) {
        for (int k = 0; k < SLOTS; k++) holding[SLOTS * r + k] = -1;
        dismissed[r] = 0;
    }
    ranks_known = rank + 1;
}

static void record(int task, int64_t count) {
    if (task < 0 || task >= ntasks || done[task]) return; /* a duplicate */
    done[task] = 1;
    ndone++;
    total += count;
}

/* Rank `r` no longer has the tasks it held (its worker is gone). */
static void lose(int r) {
    know_rank(r);
    for (int k = 0; k < SLOTS; k++) {
        int t = holding[SLOTS * r + k];
        if (t >= 0 && !done[t]) queue[nqueued++] = t;
        holding[SLOTS * r + k] = -1;
    }
    if (dismissed[r]) { dismissed[r] = 0; ndismissed--; }
}

/* Whether rank `r` holds a task. */
static int holds_any(int r) {
    for (int k = 0; k < SLOTS; k++)
        if (holding[SLOTS * r + k] >= 0) return 1;
    return 0;
}

/* The slot of rank `r` that holds `task` (-1 for a free slot), or -1. */
static int slot_of(int r, int task) {
    for (int k = 0; k < SLOTS; k++)
        if (holding[SLOTS * r + k] == task) return k;
    return -1;
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
            int k = slot_of(src, m.task);
            if (k >= 0) holding[SLOTS * src + k] = -1;
        } else if (m.task == FRESH) {
            /* A fresh worker: whatever its rank held before is lost. */
            lose(src);
        }
        int free_slot = slot_of(src, -1);
        if (free_slot < 0) continue; /* it has its tasks */
        int t = next_task();
        if (t >= 0) {
            holding[SLOTS * src + free_slot] = t;
            send_msg(src, tasks[t]);
        } else if (holds_any(src)) {
            /* No work left, but it still solves a task: it is told once
             * that task's count has arrived. */
        } else if (!dismissed[src]) {
            dismissed[src] = 1;
            ndismissed++;
            send_msg(src, (struct msg){0, TAG_DONE, 0, 0, 0, 0, 0});
        }
    }
    printf("nqueens N=%d ranks=%d solutions=%lld\n", n, zorilla_size(), (long long)total);
}

/* Solves a task and sends its count, which also asks for the next. */
static void solve_and_report(struct msg t) {
    int64_t count = solve(t.row, t.cols, t.ld, t.rd);
    request((struct msg){count, TAG_REQUEST, 0, 0, 0, 0, t.task});
}

static void worker(void) {
    /* Room for more than SLOTS: after a replacement the master may count
     * a task of this worker twice, and a task is never dropped. */
    enum { ROOM = 2 * SLOTS };
    struct msg m, held[ROOM];
    int nheld = 0;
    int32_t src;
    request((struct msg){0, TAG_REQUEST, 0, 0, 0, 0, FRESH});
    request((struct msg){0, TAG_REQUEST, 0, 0, 0, 0, ONE_MORE});
    for (;;) {
        /* Take what has arrived; wait only when there is nothing to solve.
         * The master sends TAG_DONE only once this rank holds no task. */
        int32_t r = zorilla_recv(&src, &m, sizeof m, nheld > 0 ? 0 : -1);
        if (r == ZORILLA_ETIMEDOUT) {
            struct msg t = held[0];
            for (int k = 1; k < nheld; k++) held[k - 1] = held[k];
            nheld--;
            solve_and_report(t);
            continue;
        }
        check(r, "recv");
        if (m.tag == TAG_TASK && nheld < ROOM) {
            held[nheld++] = m;
        } else if (m.tag == TAG_TASK) {
            solve_and_report(m);
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
