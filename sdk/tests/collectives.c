/* Collectives with every op, MPI_IN_PLACE, MAXLOC/MINLOC, user ops
 * (commutative and not), Scan/Exscan, Gather(v), Scatter(v), Allgather(v),
 * Alltoall(v), Reduce_scatter(_block); every root. Expected values are
 * computed serially from the same formulas every rank uses for its input. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

static int rank, size;

/* The input of rank r at index i. */
static int in_int(int r, int i) { return (r * 7 + i * 3) % 11 - 4; }
static double in_dbl(int r, int i) { return (r + 1) * 0.5 + i * 0.25; }

/* 2x2 integer matrix product (not commutative): inout = in * inout. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                    a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}
static void mat_of(int r, int *m)
{
    m[0] = 1;
    m[1] = r + 1;
    m[2] = r % 2;
    m[3] = 1;
}

static void absmax(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        int x = a[i] < 0 ? -a[i] : a[i], y = b[i] < 0 ? -b[i] : b[i];
        b[i] = x > y ? x : y;
    }
}

#define N 5

static int expect_int(MPI_Op op, int i, int upto)
{
    int acc = in_int(0, i);
    for (int r = 1; r < upto; r++) {
        int x = in_int(r, i);
        if (op == MPI_SUM) acc += x;
        else if (op == MPI_PROD) acc *= x;
        else if (op == MPI_MIN) acc = x < acc ? x : acc;
        else if (op == MPI_MAX) acc = x > acc ? x : acc;
        else if (op == MPI_LAND) acc = acc && x;
        else if (op == MPI_LOR) acc = acc || x;
        else if (op == MPI_LXOR) acc = !acc != !x;
        else if (op == MPI_BAND) acc &= x;
        else if (op == MPI_BOR) acc |= x;
        else if (op == MPI_BXOR) acc ^= x;
    }
    return acc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
    const char *names[] = {"sum", "prod", "min", "max", "land", "lor", "lxor", "band", "bor", "bxor"};
    int mine[N], out[N];
    for (int i = 0; i < N; i++)
        mine[i] = in_int(rank, i);

    MPI_Barrier(MPI_COMM_WORLD);

    /* Allreduce and Reduce (every root) with every integer op, plain and in place. */
    for (int o = 0; o < 10; o++) {
        MPI_Allreduce(mine, out, N, MPI_INT, ops[o], MPI_COMM_WORLD);
        for (int i = 0; i < N; i++)
            CHECK(out[i] == expect_int(ops[o], i, size), "allreduce %s [%d] = %d", names[o], i, out[i]);
        SAY("allreduce_%s %d %d %d %d %d", names[o], out[0], out[1], out[2], out[3], out[4]);
        memcpy(out, mine, sizeof out);
        MPI_Allreduce(MPI_IN_PLACE, out, N, MPI_INT, ops[o], MPI_COMM_WORLD);
        for (int i = 0; i < N; i++)
            CHECK(out[i] == expect_int(ops[o], i, size), "allreduce in place %s", names[o]);
        for (int root = 0; root < size; root++) {
            memcpy(out, mine, sizeof out);
            if (rank == root)
                MPI_Reduce(MPI_IN_PLACE, out, N, MPI_INT, ops[o], root, MPI_COMM_WORLD);
            else
                MPI_Reduce(mine, NULL, N, MPI_INT, ops[o], root, MPI_COMM_WORLD);
            if (rank == root)
                for (int i = 0; i < N; i++)
                    CHECK(out[i] == expect_int(ops[o], i, size), "reduce %s root %d", names[o], root);
        }
    }

    /* Other element types. */
    {
        double d[3], dout[3];
        for (int i = 0; i < 3; i++)
            d[i] = in_dbl(rank, i);
        MPI_Allreduce(d, dout, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        double e = 0;
        for (int r = 0; r < size; r++)
            e += in_dbl(r, 2);
        CHECK(dout[2] == e, "double sum %g vs %g", dout[2], e);
        SAY("allreduce_double_sum %.3f %.3f %.3f", dout[0], dout[1], dout[2]);
        float f = (float)(rank + 1), fo = 0;
        MPI_Allreduce(&f, &fo, 1, MPI_FLOAT, MPI_PROD, MPI_COMM_WORLD);
        float fe = 1;
        for (int r = 0; r < size; r++)
            fe *= (float)(r + 1);
        CHECK(fo == fe, "float prod");
        long long ll = (long long)rank << 33, llo = 0;
        MPI_Allreduce(&ll, &llo, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        CHECK(llo == (long long)(size - 1) << 33, "long long max");
        unsigned char b = (unsigned char)(1 << (rank % 8)), bo = 0;
        MPI_Allreduce(&b, &bo, 1, MPI_BYTE, MPI_BOR, MPI_COMM_WORLD);
        unsigned char be = 0;
        for (int r = 0; r < size; r++)
            be |= (unsigned char)(1 << (r % 8));
        CHECK(bo == be, "byte bor");
        bool cb = rank != 1, cbo = false;
        MPI_Allreduce(&cb, &cbo, 1, MPI_C_BOOL, MPI_LAND, MPI_COMM_WORLD);
        CHECK(cbo == (size == 1), "bool land");
        int64_t i64 = -rank, i64o = 0;
        MPI_Allreduce(&i64, &i64o, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
        CHECK(i64o == -(size - 1), "int64 min");
        uint16_t u16 = (uint16_t)(rank + 1), u16o = 0;
        MPI_Allreduce(&u16, &u16o, 1, MPI_UINT16_T, MPI_SUM, MPI_COMM_WORLD);
        CHECK(u16o == size * (size + 1) / 2, "uint16 sum");
        short sh = (short)rank, sho = 0;
        MPI_Allreduce(&sh, &sho, 1, MPI_SHORT, MPI_MAX, MPI_COMM_WORLD);
        CHECK(sho == size - 1, "short max");
        unsigned long ul = 3, ulo = 0;
        MPI_Allreduce(&ul, &ulo, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
        CHECK(ulo == 3ul * size, "unsigned long sum");
        long double ld = 0.5L * rank, ldo = 0;
        MPI_Allreduce(&ld, &ldo, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        CHECK(ldo == 0.25L * size * (size - 1), "long double sum");
    }

    /* Large vectors (the ring algorithm), every rank count. */
    {
        int n = 100003;
        double *v = malloc(n * sizeof(double)), *w = malloc(n * sizeof(double));
        for (int i = 0; i < n; i++)
            v[i] = rank + i % 13;
        MPI_Allreduce(v, w, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += w[i] != size * (i % 13) + size * (size - 1) / 2.0;
        CHECK(bad == 0, "large allreduce: %d wrong", bad);
        MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        bad = 0;
        for (int i = 0; i < n; i++)
            bad += v[i] != size - 1 + i % 13;
        CHECK(bad == 0, "large allreduce max in place: %d wrong", bad);
        SAY("large_allreduce %.1f", w[n - 1]);
        free(v);
        free(w);
    }

    /* MAXLOC / MINLOC on pairs: value and the lowest rank holding it. */
    {
        struct { double v; int i; } dp = {(double)((rank * 5) % 3), rank}, dpo;
        MPI_Allreduce(&dp, &dpo, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        double mx = -1;
        int at = -1;
        for (int r = 0; r < size; r++)
            if ((r * 5) % 3 > mx) {
                mx = (r * 5) % 3;
                at = r;
            }
        CHECK(dpo.v == mx && dpo.i == at, "maxloc %g@%d", dpo.v, dpo.i);
        SAY("maxloc %.1f %d", dpo.v, dpo.i);
        struct { int v; int i; } ip[2] = {{rank % 2, rank}, {-rank, rank}}, ipo[2];
        MPI_Allreduce(ip, ipo, 2, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
        CHECK(ipo[0].v == 0 && ipo[0].i == 0, "minloc 2int");
        CHECK(ipo[1].v == -(size - 1) && ipo[1].i == size - 1, "minloc 2int second");
        SAY("minloc %d %d %d %d", ipo[0].v, ipo[0].i, ipo[1].v, ipo[1].i);
        struct { float v; int i; } fp = {1.0f, size - 1 - rank}, fpo;
        MPI_Reduce(&fp, &fpo, 1, MPI_FLOAT_INT, MPI_MAXLOC, 0, MPI_COMM_WORLD);
        if (rank == 0)
            CHECK(fpo.v == 1.0f && fpo.i == 0, "maxloc tie takes the lowest index");
        struct { long v; int i; } lp = {(long)rank, rank}, lpo;
        MPI_Allreduce(&lp, &lpo, 1, MPI_LONG_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        CHECK(lpo.v == size - 1 && lpo.i == size - 1, "long_int maxloc");
        struct { short v; int i; } sp = {(short)(rank % 2), rank}, spo;
        MPI_Allreduce(&sp, &spo, 1, MPI_SHORT_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        CHECK(spo.v == (size > 1) && spo.i == (size > 1), "short_int maxloc");
    }

    /* User ops: non-commutative matrix product in rank order; commutative absmax. */
    {
        MPI_Op mm, am;
        MPI_Op_create(matmul, 0, &mm);
        MPI_Op_create(absmax, 1, &am);
        int commute = -1;
        MPI_Op_commutative(mm, &commute);
        CHECK(commute == 0, "commutative flag");
        MPI_Datatype mat;
        MPI_Type_contiguous(4, MPI_INT, &mat);
        MPI_Type_commit(&mat);
        int m[4], res[4], e[4], tmp[4];
        mat_of(rank, m);
        /* expected: M0 * M1 * ... * M(n-1) */
        mat_of(size - 1, e);
        for (int r = size - 2; r >= 0; r--) {
            int one = 1;
            mat_of(r, tmp);
            matmul(tmp, e, &one, NULL);
        }
        MPI_Allreduce(m, res, 1, mat, mm, MPI_COMM_WORLD);
        CHECK(memcmp(res, e, sizeof e) == 0, "allreduce matmul %d %d %d %d", res[0], res[1], res[2], res[3]);
        SAY("matmul %d %d %d %d", res[0], res[1], res[2], res[3]);
        for (int root = 0; root < size; root++) {
            memset(res, 0, sizeof res);
            MPI_Reduce(m, res, 1, mat, mm, root, MPI_COMM_WORLD);
            if (rank == root)
                CHECK(memcmp(res, e, sizeof e) == 0, "reduce matmul root %d", root);
        }
        /* Scan with the matrix product: M0 * ... * M(rank) */
        MPI_Scan(m, res, 1, mat, mm, MPI_COMM_WORLD);
        mat_of(rank, e);
        for (int r = rank - 1; r >= 0; r--) {
            int one = 1;
            mat_of(r, tmp);
            matmul(tmp, e, &one, NULL);
        }
        CHECK(memcmp(res, e, sizeof e) == 0, "scan matmul");
        int x = rank % 2 ? -rank : rank, xo = 0;
        MPI_Allreduce(&x, &xo, 1, MPI_INT, am, MPI_COMM_WORLD);
        CHECK(xo == size - 1, "absmax %d", xo);
        MPI_Type_free(&mat);
        MPI_Op_free(&mm);
        MPI_Op_free(&am);
        CHECK(mm == MPI_OP_NULL, "op_free");
    }

    /* Scan / Exscan (sum, plain and in place). */
    {
        int v = rank + 1, s = 0, es = -1;
        MPI_Scan(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(s == (rank + 1) * (rank + 2) / 2, "scan %d", s);
        MPI_Exscan(&v, &es, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank > 0)
            CHECK(es == rank * (rank + 1) / 2, "exscan %d", es);
        int ip = rank + 1;
        MPI_Scan(MPI_IN_PLACE, &ip, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(ip == s, "scan in place");
        ip = rank + 1;
        MPI_Exscan(MPI_IN_PLACE, &ip, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank > 0)
            CHECK(ip == es, "exscan in place");
        int last = 0;
        MPI_Bcast(&s, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
        last = s;
        SAY("scan_last %d", last);
    }

    /* Bcast from every root, a few sizes. */
    for (int root = 0; root < size; root++) {
        int n = 1 + root * 1000;
        int *buf = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++)
            buf[i] = rank == root ? i * root : -1;
        MPI_Bcast(buf, n, MPI_INT, root, MPI_COMM_WORLD);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += buf[i] != i * root;
        CHECK(bad == 0, "bcast root %d: %d wrong", root, bad);
        free(buf);
    }

    /* A large Bcast (the library pipelines it in segments) whose ranks
     * describe the same 400,000 bytes differently: every other int of a
     * strided vector at the root and at even ranks, plain bytes at odd
     * ones. */
    {
        int n = 100000, root = size - 1, bad = 0;
        int *strided = calloc(2 * n, sizeof(int)), *flat = calloc(n, sizeof(int));
        MPI_Datatype every_other;
        MPI_Type_vector(n, 1, 2, MPI_INT, &every_other);
        MPI_Type_commit(&every_other);
        if (rank == root)
            for (int i = 0; i < n; i++)
                strided[2 * i] = i * 3 + 1;
        if (rank != root && rank % 2) {
            MPI_Bcast(flat, n * (int)sizeof(int), MPI_BYTE, root, MPI_COMM_WORLD);
            for (int i = 0; i < n; i++)
                bad += flat[i] != i * 3 + 1;
        } else {
            MPI_Bcast(strided, 1, every_other, root, MPI_COMM_WORLD);
            for (int i = 0; i < n; i++)
                bad += strided[2 * i] != i * 3 + 1 || strided[2 * i + 1] != 0;
        }
        CHECK(bad == 0, "large bcast with mixed datatypes: %d wrong", bad);
        MPI_Type_free(&every_other);
        free(strided);
        free(flat);
    }

    /* Gather / Scatter (every root, plain and in place). */
    for (int root = 0; root < size; root++) {
        int two[2] = {rank, rank * rank}, *all = malloc(2 * size * sizeof(int));
        MPI_Gather(two, 2, MPI_INT, all, 2, MPI_INT, root, MPI_COMM_WORLD);
        if (rank == root)
            for (int r = 0; r < size; r++)
                CHECK(all[2 * r] == r && all[2 * r + 1] == r * r, "gather root %d from %d", root, r);
        if (rank == root) {
            for (int r = 0; r < size; r++)
                all[2 * r] = all[2 * r + 1] = -1;
            all[2 * root] = root;
            all[2 * root + 1] = root * root;
            MPI_Gather(MPI_IN_PLACE, 2, MPI_INT, all, 2, MPI_INT, root, MPI_COMM_WORLD);
            for (int r = 0; r < size; r++)
                CHECK(all[2 * r] == r && all[2 * r + 1] == r * r, "gather in place root %d", root);
        } else
            MPI_Gather(two, 2, MPI_INT, NULL, 0, MPI_INT, root, MPI_COMM_WORLD);
        if (rank == root)
            for (int r = 0; r < size; r++) {
                all[2 * r] = r + 100;
                all[2 * r + 1] = r + 200;
            }
        int got[2] = {-1, -1};
        MPI_Scatter(all, 2, MPI_INT, got, 2, MPI_INT, root, MPI_COMM_WORLD);
        CHECK(got[0] == rank + 100 && got[1] == rank + 200, "scatter root %d", root);
        if (rank == root)
            MPI_Scatter(all, 2, MPI_INT, MPI_IN_PLACE, 2, MPI_INT, root, MPI_COMM_WORLD);
        else {
            got[0] = -1;
            MPI_Scatter(NULL, 2, MPI_INT, got, 2, MPI_INT, root, MPI_COMM_WORLD);
            CHECK(got[0] == rank + 100, "scatter (in place at root) %d", root);
        }
        free(all);
    }

    /* Gatherv / Scatterv: rank r has r+1 values. */
    {
        int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int)), total = 0;
        for (int r = 0; r < size; r++) {
            counts[r] = r + 1;
            displs[r] = total + r; /* a gap of r between blocks */
            total += r + 1 + r;
        }
        int *mineV = malloc((rank + 1) * sizeof(int)), *all = malloc(total * sizeof(int));
        for (int i = 0; i <= rank; i++)
            mineV[i] = rank * 100 + i;
        for (int root = 0; root < size; root++) {
            for (int i = 0; i < total; i++)
                all[i] = -7;
            MPI_Gatherv(mineV, rank + 1, MPI_INT, all, counts, displs, MPI_INT, root, MPI_COMM_WORLD);
            if (rank == root)
                for (int r = 0; r < size; r++)
                    for (int i = 0; i <= r; i++)
                        CHECK(all[displs[r] + i] == r * 100 + i, "gatherv root %d", root);
            int *back = malloc((rank + 1) * sizeof(int));
            MPI_Scatterv(all, counts, displs, MPI_INT, back, rank + 1, MPI_INT, root, MPI_COMM_WORLD);
            if (rank == root) {
                for (int i = 0; i <= rank; i++)
                    CHECK(back[i] == rank * 100 + i, "scatterv root %d", root);
            } else {
                MPI_Bcast(all, total, MPI_INT, root, MPI_COMM_WORLD);
                for (int i = 0; i <= rank; i++)
                    CHECK(back[i] == all[displs[rank] + i], "scatterv root %d", root);
            }
            if (rank == root)
                MPI_Bcast(all, total, MPI_INT, root, MPI_COMM_WORLD);
            if (rank == root) {
                MPI_Gatherv(MPI_IN_PLACE, 0, MPI_INT, all, counts, displs, MPI_INT, root, MPI_COMM_WORLD);
                MPI_Scatterv(all, counts, displs, MPI_INT, MPI_IN_PLACE, 0, MPI_INT, root, MPI_COMM_WORLD);
            } else {
                MPI_Gatherv(mineV, rank + 1, MPI_INT, NULL, NULL, NULL, MPI_INT, root, MPI_COMM_WORLD);
                MPI_Scatterv(NULL, NULL, NULL, MPI_INT, back, rank + 1, MPI_INT, root, MPI_COMM_WORLD);
                CHECK(back[0] == rank * 100, "scatterv in place");
            }
            free(back);
        }
        /* Allgatherv, plain and in place */
        for (int i = 0; i < total; i++)
            all[i] = -7;
        MPI_Allgatherv(mineV, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD);
        long long sum = 0;
        for (int r = 0; r < size; r++)
            for (int i = 0; i <= r; i++) {
                CHECK(all[displs[r] + i] == r * 100 + i, "allgatherv");
                sum += all[displs[r] + i];
            }
        for (int i = 0; i < total; i++)
            all[i] = -7;
        for (int i = 0; i <= rank; i++)
            all[displs[rank] + i] = rank * 100 + i;
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            for (int i = 0; i <= r; i++)
                CHECK(all[displs[r] + i] == r * 100 + i, "allgatherv in place");
        SAY("allgatherv_sum %lld", sum);
        free(mineV);
        free(all);
        free(counts);
        free(displs);
    }

    /* Allgather, plain and in place. */
    {
        int *all = malloc(3 * size * sizeof(int)), t[3] = {rank, -rank, rank * 3};
        MPI_Allgather(t, 3, MPI_INT, all, 3, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            CHECK(all[3 * r] == r && all[3 * r + 1] == -r && all[3 * r + 2] == 3 * r, "allgather");
        for (int i = 0; i < 3 * size; i++)
            all[i] = -1;
        memcpy(all + 3 * rank, t, sizeof t);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 3, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            CHECK(all[3 * r] == r && all[3 * r + 2] == 3 * r, "allgather in place");
        free(all);
    }

    /* Alltoall, plain and in place: element [r][k] sent by r to k is r*100+k. */
    {
        int *s = malloc(2 * size * sizeof(int)), *r = malloc(2 * size * sizeof(int));
        for (int k = 0; k < size; k++) {
            s[2 * k] = rank * 100 + k;
            s[2 * k + 1] = -(rank * 100 + k);
        }
        MPI_Alltoall(s, 2, MPI_INT, r, 2, MPI_INT, MPI_COMM_WORLD);
        for (int k = 0; k < size; k++)
            CHECK(r[2 * k] == k * 100 + rank && r[2 * k + 1] == -(k * 100 + rank), "alltoall from %d", k);
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s, 2, MPI_INT, MPI_COMM_WORLD);
        CHECK(memcmp(s, r, 2 * size * sizeof(int)) == 0, "alltoall in place");
        free(s);
        free(r);
    }

    /* Alltoallv: rank r sends (r+k)%3+1 values to rank k (symmetric, so the
     * same counts serve MPI_IN_PLACE). */
    {
        int *c = malloc(size * sizeof(int)), *d = malloc(size * sizeof(int)), t = 0;
        for (int k = 0; k < size; k++) {
            c[k] = (rank + k) % 3 + 1;
            d[k] = t + 1; /* a gap before every block */
            t += c[k] + 1;
        }
        int *s = malloc(t * sizeof(int)), *r = malloc(t * sizeof(int)), *ip = malloc(t * sizeof(int));
        for (int k = 0; k < size; k++)
            for (int i = 0; i < c[k]; i++)
                ip[d[k] + i] = s[d[k] + i] = rank * 1000 + k * 10 + i;
        MPI_Alltoallv(s, c, d, MPI_INT, r, c, d, MPI_INT, MPI_COMM_WORLD);
        for (int k = 0; k < size; k++)
            for (int i = 0; i < c[k]; i++)
                CHECK(r[d[k] + i] == k * 1000 + rank * 10 + i, "alltoallv from %d", k);
        MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, ip, c, d, MPI_INT, MPI_COMM_WORLD);
        for (int k = 0; k < size; k++)
            for (int i = 0; i < c[k]; i++)
                CHECK(ip[d[k] + i] == k * 1000 + rank * 10 + i, "alltoallv in place from %d", k);
        free(s); free(r); free(ip); free(c); free(d);
    }

    /* Reduce_scatter_block and Reduce_scatter (sum), plain and in place. */
    {
        int *v = malloc(2 * size * sizeof(int)), got[2];
        for (int i = 0; i < 2 * size; i++)
            v[i] = rank + i;
        MPI_Reduce_scatter_block(v, got, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int base = size * (size - 1) / 2;
        CHECK(got[0] == base + size * (2 * rank) && got[1] == base + size * (2 * rank + 1), "reduce_scatter_block");
        MPI_Reduce_scatter_block(MPI_IN_PLACE, v, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(v[0] == got[0] && v[1] == got[1], "reduce_scatter_block in place");
        int *counts = malloc(size * sizeof(int)), total = 0;
        for (int r = 0; r < size; r++) {
            counts[r] = r % 3;
            total += counts[r];
        }
        int *w = malloc((total + 1) * sizeof(int)), out3[3] = {0, 0, 0}, off = 0;
        for (int i = 0; i < total; i++)
            w[i] = rank * i;
        for (int r = 0; r < rank; r++)
            off += counts[r];
        MPI_Reduce_scatter(w, out3, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < counts[rank]; i++)
            CHECK(out3[i] == base * (off + i), "reduce_scatter");
        MPI_Reduce_scatter(MPI_IN_PLACE, w, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < counts[rank]; i++)
            CHECK(w[i] == base * (off + i), "reduce_scatter in place");
        free(v); free(w); free(counts);
    }

    return check_finish();
}
