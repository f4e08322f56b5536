/* sweep: one task of a job array (a parameter sweep).
 *
 * Usage: sweep [spin MS | sleep MS] [PARAM]. With `spin MS` the task
 * first computes for MS milliseconds of wall-clock time, with `sleep MS`
 * it first sleeps that long (a task of that length that leaves the CPU to
 * others, for the benchmarks of scheduling on one machine). Task i
 * (zorilla_task(), from ZORILLA_TASK) then squares its parameter, the
 * last argument (from its line of the array's task arguments file), or i
 * itself without one, and writes
 * "task i of N: x^2 = y" to stdout and to /outputs/result.txt. A
 * parameter "fail" makes the task exit with status 3 (a task that fails,
 * for the tests of retries). A worker that is not an array's task acts
 * as task `rank` of `size` (the benchmarks compare the two). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zorilla.h"

int main(int argc, char **argv) {
    int32_t task = zorilla_task();
    char size[16];
    const char *tasks = getenv("ZORILLA_TASKS");
    if (task < 0) {
        task = zorilla_rank();
        snprintf(size, sizeof size, "%d", (int)zorilla_size());
        tasks = size;
    }
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "sleep") == 0) {
        long ms = atol(argv[2]);
        struct timespec nap = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&nap, NULL);
        first = 3;
    } else if (argc > 2 && strcmp(argv[1], "spin") == 0) {
        long ms = atol(argv[2]);
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        volatile unsigned long counter = 0;
        do {
            for (int k = 0; k < 10000; k++) counter++;
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
        first = 3;
    }
    const char *param = argc > first ? argv[argc - 1] : NULL;
    if (param && strcmp(param, "fail") == 0) {
        fprintf(stderr, "sweep: task %d asked to fail\n", (int)task);
        return 3;
    }
    long long x = param ? strtoll(param, NULL, 10) : task;
    char line[128];
    snprintf(line, sizeof line, "task %d of %s: %lld^2 = %lld\n", (int)task,
             tasks ? tasks : "?", x, x * x);
    fputs(line, stdout);
    FILE *out = fopen("/outputs/result.txt", "w");
    if (!out) {
        fprintf(stderr, "sweep: cannot create /outputs/result.txt\n");
        return 4;
    }
    fputs(line, out);
    fclose(out);
    return 0;
}
