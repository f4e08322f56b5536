/* nqueens: counts the solutions of the N-Queens problem in parallel over all
 * ranks of a Zorilla job (the application of the Zorilla paper).
 *
 * Usage: nqueens [N]   (default 8, 1 <= N <= 16)
 *
 * Work distribution: rank 0 splits the search tree into tasks (every valid
 * placement of queens on the first few rows) and hands them out on demand:
 * each other rank asks for a task, solves it, and asks again, so fast ranks
 * do more. Rank 0 solves tasks itself whenever no request is waiting.
 * Reduction: once told there is no more work, the ranks sum their counts up
 * a binary tree (rank r receives from 2r+1 and 2r+2, sends to (r-1)/2), and
 * rank 0 prints the total:
 *   nqueens N=8 ranks=4 solutions=92
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "zorilla.h"

enum { TAG_REQUEST = 1, TAG_TASK = 2, TAG_DONE = 3, TAG_SUM = 4 };

/* The one message format; unused fields are zero. */
struct msg {
    int64_t sum;     /* TAG_SUM: partial count of the subtree */
    int32_t tag;
    int32_t row;     /* TAG_TASK: first row still free */
    uint32_t cols, ld, rd; /* TAG_TASK: attacked columns / diagonals */
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
        tasks[ntasks++] = (struct msg){0, TAG_TASK, row, cols, ld, rd};
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

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 8;
    if (n < 1 || n > 16) { fprintf(stderr, "nqueens: N must be 1..16\n"); return 2; }
    all = (1u << n) - 1;
    int rank = zorilla_rank(), size = zorilla_size();

    int64_t local = 0;      /* solutions found by this rank */
    int64_t reduced = 0;    /* partial sums received from children */
    int sums_received = 0;
    struct msg m;
    int32_t src;

    if (rank == 0) {
        make_tasks(0, n > 3 ? 3 : n, 0, 0, 0);
        int next = 0, done_sent = 0;
        while (done_sent < size - 1) {
            /* Serve waiting requests first; only block when we have no work. */
            int32_t r = zorilla_recv(&src, &m, sizeof m, next < ntasks ? 0 : -1);
            if (r == ZORILLA_ETIMEDOUT) {
                struct msg *t = &tasks[next++];
                local += solve(t->row, t->cols, t->ld, t->rd);
                continue;
            }
            check(r, "recv");
            if (m.tag == TAG_REQUEST) {
                if (next < ntasks) {
                    send_msg(src, tasks[next++]);
                } else {
                    send_msg(src, (struct msg){0, TAG_DONE, 0, 0, 0, 0});
                    done_sent++;
                }
            } else if (m.tag == TAG_SUM) {
                reduced += m.sum;
                sums_received++;
            }
        }
        while (next < ntasks) {
            struct msg *t = &tasks[next++];
            local += solve(t->row, t->cols, t->ld, t->rd);
        }
    } else {
        send_msg(0, (struct msg){0, TAG_REQUEST, 0, 0, 0, 0});
        for (;;) {
            check(zorilla_recv(&src, &m, sizeof m, -1), "recv");
            if (m.tag == TAG_TASK) {
                local += solve(m.row, m.cols, m.ld, m.rd);
                send_msg(0, (struct msg){0, TAG_REQUEST, 0, 0, 0, 0});
            } else if (m.tag == TAG_DONE) {
                break;
            } else if (m.tag == TAG_SUM) { /* a child finished before us */
                reduced += m.sum;
                sums_received++;
            }
        }
    }

    /* Tree reduction towards rank 0. */
    int children = (2 * rank + 1 < size) + (2 * rank + 2 < size);
    while (sums_received < children) {
        check(zorilla_recv(&src, &m, sizeof m, -1), "recv");
        if (m.tag == TAG_SUM) {
            reduced += m.sum;
            sums_received++;
        }
    }
    int64_t total = local + reduced;
    if (rank > 0) {
        send_msg((rank - 1) / 2, (struct msg){total, TAG_SUM, 0, 0, 0, 0});
    } else {
        printf("nqueens N=%d ranks=%d solutions=%lld\n", n, size, (long long)total);
    }
    return 0;
}
