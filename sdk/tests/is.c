/* An integer sort shaped like the NAS Parallel Benchmarks' IS (written
 * here, from its published description, not from its code): 2^K keys in
 * [0, 2^M) drawn as the mean of four uniform numbers (so they bunch in the
 * middle of the range), spread evenly over the ranks; every iteration
 * changes two keys, then ranks them:
 *   - each rank counts its keys per bucket (1,024 buckets, or 2^M if
 *     fewer) and groups them by bucket;
 *   - MPI_Allreduce of the bucket counts, from which every rank assigns
 *     consecutive buckets to ranks so that each gets about its share of
 *     keys;
 *   - MPI_Alltoall of the number of keys for each rank, MPI_Alltoallv of
 *     the keys;
 *   - each rank counts its keys per key value and sums the counts up (a
 *     key's rank in the sorted order, as IS computes it).
 * After the timed iterations (untimed): each rank sorts its keys by those
 * counts, and the sort is checked: every rank's keys are sorted, inside the
 * buckets it was given and not below the keys of the rank before it, and
 * no key was lost or made up (count and sum of every key against the keys
 * drawn). The keys drawn are the same for any number of ranks, so the
 * output is too.
 *   is [LOG2_KEYS LOG2_MAX_KEY ITERATIONS [bench]]
 * Defaults 16 11 10 (a test size); NPB IS class W is 20 16 10. With
 * "bench", rank 0 also prints "is_seconds T" (the slowest rank's time for
 * the iterations) and "is_mops R", keys x iterations / T / 10^6 (IS's
 * Mop/s). */
#include <string.h>
#include "check.h"

#define LOG2_BUCKETS 10

/* The keys come from one 64-bit linear congruential sequence, four draws
 * per key; a rank starts at its first key's place by jumping ahead. */
#define LCG_A 6364136223846793005ULL
#define LCG_C 1442695040888963407ULL

static unsigned long long jump(unsigned long long x, unsigned long long steps)
{
    unsigned long long mult = 1, plus = 0, a = LCG_A, c = LCG_C;
    for (; steps; steps >>= 1) {
        if (steps & 1) {
            mult *= a;
            plus = plus * a + c;
        }
        c *= a + 1;
        a *= a;
    }
    return mult * x + plus;
}

static double uniform(unsigned long long *x)
{
    *x = *x * LCG_A + LCG_C;
    return (double)(*x >> 11) / 9007199254740992.0; /* 2^53 */
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int log2_keys = argc > 3 ? atoi(argv[1]) : 16;
    int log2_max = argc > 3 ? atoi(argv[2]) : 11;
    int iterations = argc > 3 ? atoi(argv[3]) : 10;
    int bench = argc > 4 && strcmp(argv[4], "bench") == 0;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (log2_keys < 4 || log2_keys > 28 || log2_max < 1 || log2_max > 30 || iterations < 1 ||
        (1LL << log2_keys) / size < 2 * iterations + 2) {
        if (rank == 0)
            fprintf(stderr, "is: LOG2_KEYS 4..28, LOG2_MAX_KEY 1..30, ITERATIONS >= 1, "
                            "and enough keys for the changes\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    /* long long: long is 32 bits in WebAssembly, and total * size may not fit. */
    long long total = 1LL << log2_keys;
    int max_key = 1 << log2_max;
    int shift = log2_max > LOG2_BUCKETS ? log2_max - LOG2_BUCKETS : 0;
    int buckets = max_key >> shift;
    long long first = total * rank / size;
    int n = (int)(total * (rank + 1) / size - first);

    int *keys = malloc(n * sizeof(int)), *grouped = malloc(n * sizeof(int));
    unsigned long long x = jump(20261129, 4 * (unsigned long long)first);
    for (int i = 0; i < n; i++) {
        double sum = uniform(&x) + uniform(&x) + uniform(&x) + uniform(&x);
        keys[i] = (int)(sum / 4 * max_key);
    }
    int *count = malloc(buckets * sizeof(int)), *all_counts = malloc(buckets * sizeof(int));
    int *start = malloc(buckets * sizeof(int)), *owner = malloc(buckets * sizeof(int));
    int *scount = malloc(size * sizeof(int)), *sdispl = malloc(size * sizeof(int));
    int *rcount = malloc(size * sizeof(int)), *rdispl = malloc(size * sizeof(int));
    int *mine = NULL, *rank_of = malloc(max_key * sizeof(int));
    int have = 0, room = 0, lo = 0, hi = 0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 1; it <= iterations; it++) {
        /* IS changes two keys every iteration, so nothing can be kept. */
        if (rank == 0) {
            keys[it] = it;
            keys[it + iterations] = max_key - it;
        }
        memset(count, 0, buckets * sizeof(int));
        for (int i = 0; i < n; i++)
            count[keys[i] >> shift]++;
        for (int b = 0, s = 0; b < buckets; b++) {
            start[b] = s;
            s += count[b];
        }
        for (int i = 0; i < n; i++)
            grouped[start[keys[i] >> shift]++] = keys[i];
        MPI_Allreduce(count, all_counts, buckets, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

        /* Consecutive buckets to each rank, about total/size keys each. */
        memset(scount, 0, size * sizeof(int));
        long long seen = 0;
        int r = 0;
        for (int b = 0; b < buckets; b++) {
            while (r < size - 1 && seen >= total * (r + 1) / size)
                r++;
            owner[b] = r;
            seen += all_counts[b];
            scount[r] += count[b];
        }
        lo = -1;
        hi = 0;
        for (int b = 0; b < buckets; b++)
            if (owner[b] == rank) {
                if (lo < 0)
                    lo = b << shift;
                hi = (b + 1) << shift;
            }
        if (lo < 0)
            lo = hi = 0;
        MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
        have = 0;
        for (int i = 0; i < size; i++) {
            sdispl[i] = i ? sdispl[i - 1] + scount[i - 1] : 0;
            rdispl[i] = have;
            have += rcount[i];
        }
        if (have > room) {
            free(mine);
            room = have + have / 8;
            mine = malloc(room * sizeof(int));
        }
        MPI_Alltoallv(grouped, scount, sdispl, MPI_INT, mine, rcount, rdispl, MPI_INT,
                      MPI_COMM_WORLD);

        /* Each key's rank among this rank's keys: counts per value, summed. */
        memset(rank_of + lo, 0, (hi - lo) * sizeof(int));
        for (int i = 0; i < have; i++)
            rank_of[mine[i]]++;
        for (int k = lo + 1; k < hi; k++)
            rank_of[k] += rank_of[k - 1];
    }
    double t = MPI_Wtime() - t0, slowest = 0;
    MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    /* The full check, untimed: the keys placed by their ranks. */
    int *sorted = malloc((have + 1) * sizeof(int));
    for (int i = 0; i < have; i++) {
        int k = mine[i];
        CHECK(k >= lo && k < hi, "key %d outside this rank's range [%d, %d)", k, lo, hi);
        if (k >= lo && k < hi)
            sorted[--rank_of[k]] = k;
    }
    for (int i = 1; i < have; i++)
        CHECK(sorted[i - 1] <= sorted[i], "keys %d and %d out of order", i - 1, i);
    /* The largest key of the ranks before must not be above my smallest. */
    int last = have ? sorted[have - 1] : -1, before = -1;
    MPI_Exscan(&last, &before, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank > 0 && have)
        CHECK(before <= sorted[0], "rank %d starts at %d below %d", rank, sorted[0], before);
    long long drawn[2] = {n, 0}, got[2] = {have, 0}, totals[4];
    for (int i = 0; i < n; i++)
        drawn[1] += keys[i];
    for (int i = 0; i < have; i++)
        got[1] += sorted[i];
    long long both[4] = {drawn[0], drawn[1], got[0], got[1]};
    MPI_Allreduce(both, totals, 4, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(totals[0] == total && totals[2] == total, "%lld keys drawn, %lld sorted, of %lld",
          totals[0], totals[2], total);
    CHECK(totals[1] == totals[3], "keys drawn sum to %lld, sorted to %lld", totals[1], totals[3]);

    SAY("is keys %lld max_key %d buckets %d iterations %d", total, max_key, buckets, iterations);
    SAY("is key_sum %lld", totals[3]);
    if (bench) {
        SAY("is_seconds %.4f", slowest);
        SAY("is_mops %.2f", (double)total * iterations / slowest / 1e6);
    }
    free(keys);
    free(grouped);
    free(count);
    free(all_counts);
    free(start);
    free(owner);
    free(scount);
    free(sdispl);
    free(rcount);
    free(rdispl);
    free(mine);
    free(rank_of);
    free(sorted);
    return check_finish();
}
