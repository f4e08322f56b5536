/* A 2-D Jacobi stencil with halo exchange over a Cartesian communicator:
 * the N x N interior of a plate whose top edge is held at 1 (the others at
 * 0), decomposed in blocks over a Dims_create grid; halos go by Sendrecv,
 * columns as a vector type; the largest change is an Allreduce(MAX) every
 * 10 sweeps. Rank 0 gathers the result and compares it, bit for bit, with
 * the same sweeps computed serially.
 *   jacobi [N [sweeps [bench]]]   (bench: skip the serial check, print time) */
#include <math.h>
#include <string.h>
#include "check.h"

static int lo(int i, int n, int p) { return (int)((long long)n * i / p); }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 60;
    int sweeps = argc > 2 ? atoi(argv[2]) : 200;
    int bench = argc > 3 && strcmp(argv[3], "bench") == 0;
    int rank, size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int dims[2] = {0, 0}, periods[2] = {0, 0}, coords[2];
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &cart);
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 2, coords);
    int up, down, left, right;
    MPI_Cart_shift(cart, 0, 1, &up, &down);
    MPI_Cart_shift(cart, 1, 1, &left, &right);

    /* my block: rows r0..r1-1, columns c0..c1-1 of the interior, plus halos */
    int r0 = lo(coords[0], n, dims[0]), r1 = lo(coords[0] + 1, n, dims[0]);
    int c0 = lo(coords[1], n, dims[1]), c1 = lo(coords[1] + 1, n, dims[1]);
    int h = r1 - r0, w = c1 - c0, W = w + 2;
    double *u = calloc((size_t)(h + 2) * W, sizeof(double));
    double *v = calloc((size_t)(h + 2) * W, sizeof(double));
#define U(a, i, j) (a)[(size_t)(i) * W + (j)]
    if (r0 == 0)
        for (int j = 0; j < W; j++)
            U(u, 0, j) = U(v, 0, j) = 1.0; /* the hot top edge */
    MPI_Datatype column;
    MPI_Type_vector(h, 1, W, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);

    MPI_Barrier(cart);
    double t0 = MPI_Wtime(), change = 0;
    for (int s = 0; s < sweeps; s++) {
        /* halos: rows are contiguous, columns are a vector */
        MPI_Sendrecv(&U(u, 1, 1), w, MPI_DOUBLE, up, 0, &U(u, h + 1, 1), w, MPI_DOUBLE, down, 0, cart, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&U(u, h, 1), w, MPI_DOUBLE, down, 1, &U(u, 0, 1), w, MPI_DOUBLE, up, 1, cart, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&U(u, 1, 1), 1, column, left, 2, &U(u, 1, w + 1), 1, column, right, 2, cart, MPI_STATUS_IGNORE);
        MPI_Sendrecv(&U(u, 1, w), 1, column, right, 3, &U(u, 1, 0), 1, column, left, 3, cart, MPI_STATUS_IGNORE);
        double local = 0;
        for (int i = 1; i <= h; i++)
            for (int j = 1; j <= w; j++) {
                double x = 0.25 * (U(u, i - 1, j) + U(u, i + 1, j) + U(u, i, j - 1) + U(u, i, j + 1));
                double d = fabs(x - U(u, i, j));
                if (d > local)
                    local = d;
                U(v, i, j) = x;
            }
        double *t = u;
        u = v;
        v = t;
        if (s % 10 == 9)
            MPI_Allreduce(&local, &change, 1, MPI_DOUBLE, MPI_MAX, cart);
    }
    double t1 = MPI_Wtime();

    /* gather the interior to rank 0, block by block */
    double *mine = malloc((size_t)(h * w + 1) * sizeof(double));
    for (int i = 0; i < h; i++)
        memcpy(mine + (size_t)i * w, &U(u, i + 1, 1), w * sizeof(double));
    int *counts = NULL, *displs = NULL;
    double *all = NULL;
    if (rank == 0) {
        counts = malloc(size * sizeof(int));
        displs = malloc(size * sizeof(int));
        all = malloc((size_t)n * n * sizeof(double));
        for (int r = 0, off = 0; r < size; r++) {
            int c[2];
            MPI_Cart_coords(cart, r, 2, c);
            counts[r] = (lo(c[0] + 1, n, dims[0]) - lo(c[0], n, dims[0])) *
                        (lo(c[1] + 1, n, dims[1]) - lo(c[1], n, dims[1]));
            displs[r] = off;
            off += counts[r];
        }
    }
    MPI_Gatherv(mine, h * w, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, cart);
    if (rank == 0) {
        double *grid = malloc((size_t)n * n * sizeof(double));
        for (int r = 0; r < size; r++) {
            int c[2];
            MPI_Cart_coords(cart, r, 2, c);
            int a0 = lo(c[0], n, dims[0]), a1 = lo(c[0] + 1, n, dims[0]);
            int b0 = lo(c[1], n, dims[1]), b1 = lo(c[1] + 1, n, dims[1]);
            for (int i = a0; i < a1; i++)
                for (int j = b0; j < b1; j++)
                    grid[(size_t)i * n + j] = all[displs[r] + (size_t)(i - a0) * (b1 - b0) + (j - b0)];
        }
        double sum = 0;
        for (size_t k = 0; k < (size_t)n * n; k++)
            sum += grid[k];
        if (bench) {
            printf("time_s %.6f\n", t1 - t0);
        } else {
            /* the same sweeps, serially */
            int S = n + 2;
            double *a = calloc((size_t)S * S, sizeof(double)), *b = calloc((size_t)S * S, sizeof(double));
            for (int j = 0; j < S; j++)
                a[j] = b[j] = 1.0;
            for (int s = 0; s < sweeps; s++) {
                for (int i = 1; i <= n; i++)
                    for (int j = 1; j <= n; j++)
                        b[(size_t)i * S + j] = 0.25 * (a[(size_t)(i - 1) * S + j] + a[(size_t)(i + 1) * S + j] +
                                                       a[(size_t)i * S + j - 1] + a[(size_t)i * S + j + 1]);
                double *t = a;
                a = b;
                b = t;
            }
            long bad = 0;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    bad += grid[(size_t)i * n + j] != a[(size_t)(i + 1) * S + j + 1];
            CHECK(bad == 0, "%ld points differ from the serial sweeps", bad);
            free(a);
            free(b);
        }
        printf("jacobi n %d sweeps %d sum %.12e change %.12e centre %.12e\n", n, sweeps, sum, change,
               grid[(size_t)(n / 2) * n + n / 2]);
        free(grid);
        free(all);
        free(counts);
        free(displs);
    }
    free(mine);
    free(u);
    free(v);
    MPI_Type_free(&column);
    MPI_Comm_free(&cart);
    return check_finish();
}
