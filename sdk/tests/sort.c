/* A parallel sample sort with Alltoallv: every rank draws its keys from a
 * seeded generator, the ranks agree on splitters from regular samples
 * (Allgather), exchange keys (Alltoall of counts, Alltoallv of keys) and
 * sort locally. Checked: every rank's keys are sorted and not above the
 * next rank's, and rank 0 gathers everything and compares it with all the
 * keys drawn and sorted serially.   sort [keys-per-rank] */
#include <string.h>
#include "check.h"

static int cmp(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

static int count_of(int r, int base) { return base + (r * 37) % 101; }

static void draw(int r, int n, unsigned *out)
{
    unsigned long long s = 12345 + (unsigned long long)r * 7919;
    for (int i = 0; i < n; i++)
        out[i] = (unsigned)(lcg_next(&s) % 1000000);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int base = argc > 1 ? atoi(argv[1]) : 2000;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n = count_of(rank, base);
    unsigned *keys = malloc(n * sizeof(unsigned));
    draw(rank, n, keys);
    qsort(keys, n, sizeof(unsigned), cmp);

    /* regular samples -> splitters */
    unsigned *samples = malloc(size * sizeof(unsigned)), *all_samples = malloc(size * size * sizeof(unsigned));
    for (int i = 0; i < size; i++)
        samples[i] = keys[(long long)i * n / size];
    MPI_Allgather(samples, size, MPI_UNSIGNED, all_samples, size, MPI_UNSIGNED, MPI_COMM_WORLD);
    qsort(all_samples, size * size, sizeof(unsigned), cmp);
    unsigned *split = malloc(size * sizeof(unsigned));
    for (int i = 1; i < size; i++)
        split[i - 1] = all_samples[i * size];

    /* counts per destination, exchanged */
    int *sc = calloc(size, sizeof(int)), *sd = calloc(size, sizeof(int));
    int *rc = calloc(size, sizeof(int)), *rd = calloc(size, sizeof(int));
    for (int i = 0, d = 0; i < n; i++) {
        while (d < size - 1 && keys[i] >= split[d])
            d++;
        sc[d]++;
    }
    MPI_Alltoall(sc, 1, MPI_INT, rc, 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (int i = 0; i < size; i++) {
        sd[i] = i ? sd[i - 1] + sc[i - 1] : 0;
        rd[i] = total;
        total += rc[i];
    }
    unsigned *mine = malloc((total + 1) * sizeof(unsigned));
    MPI_Alltoallv(keys, sc, sd, MPI_UNSIGNED, mine, rc, rd, MPI_UNSIGNED, MPI_COMM_WORLD);
    qsort(mine, total, sizeof(unsigned), cmp);

    /* every rank's largest is not above the next non-empty rank's smallest */
    unsigned my_max = total ? mine[total - 1] : 0, prev_max = 0;
    int has = total > 0;
    /* the largest key of all lower ranks */
    unsigned pm = has ? my_max : 0;
    MPI_Exscan(&pm, &prev_max, 1, MPI_UNSIGNED, MPI_MAX, MPI_COMM_WORLD);
    if (rank > 0 && has)
        CHECK(prev_max <= mine[0], "rank %d starts at %u below %u", rank, mine[0], prev_max);
    for (int i = 1; i < total; i++)
        CHECK(mine[i - 1] <= mine[i], "not sorted locally");

    /* rank 0 gathers and checks against a serial sort */
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
    MPI_Gather(&total, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    long long grand = 0;
    if (rank == 0)
        for (int r = 0; r < size; r++) {
            displs[r] = (int)grand;
            grand += counts[r];
        }
    unsigned *sorted = rank == 0 ? malloc((grand + 1) * sizeof(unsigned)) : NULL;
    MPI_Gatherv(mine, total, MPI_UNSIGNED, sorted, counts, displs, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        long long expect_n = 0;
        for (int r = 0; r < size; r++)
            expect_n += count_of(r, base);
        unsigned *ref = malloc(expect_n * sizeof(unsigned));
        for (int r = 0, off = 0; r < size; r++) {
            draw(r, count_of(r, base), ref + off);
            off += count_of(r, base);
        }
        qsort(ref, expect_n, sizeof(unsigned), cmp);
        CHECK(grand == expect_n, "%lld keys, expected %lld", grand, expect_n);
        CHECK(grand != expect_n || memcmp(ref, sorted, grand * sizeof(unsigned)) == 0, "differs from the serial sort");
        unsigned long long sum = 0;
        for (long long i = 0; i < grand; i++)
            sum += sorted[i] * (unsigned long long)(i % 7 + 1);
        printf("sorted %lld keys, first %u median %u last %u weighted_sum %llu\n", grand, sorted[0],
               sorted[grand / 2], sorted[grand - 1], sum);
        free(ref);
        free(sorted);
    }
    free(keys); free(samples); free(all_samples); free(split); free(sc); free(sd); free(rc);
    free(rd); free(mine); free(counts); free(displs);
    return check_finish();
}
