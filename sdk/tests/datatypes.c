/* Derived datatypes (contiguous, vector, indexed, struct, resized), their
 * sizes and extents, sending them, Pack/Unpack/Pack_size. */
#include <stddef.h>
#include <string.h>
#include "check.h"

struct particle {
    double x[3];
    int id;
    char tag;
};

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    int sz;
    MPI_Aint lb, ext;

    /* contiguous */
    MPI_Datatype c3;
    MPI_Type_contiguous(3, MPI_INT, &c3);
    MPI_Type_commit(&c3);
    MPI_Type_size(c3, &sz);
    MPI_Type_get_extent(c3, &lb, &ext);
    CHECK(sz == 12 && lb == 0 && ext == 12, "contiguous size %d extent %ld", sz, (long)ext);
    SAY("contiguous %d %ld", sz, (long)ext);

    /* vector: a column of a 6x5 row-major matrix */
    enum { R = 6, C = 5 };
    double m[R][C], col[R];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            m[i][j] = rank * 100 + i * 10 + j;
    MPI_Datatype column;
    MPI_Type_vector(R, 1, C, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);
    MPI_Type_size(column, &sz);
    MPI_Type_get_extent(column, &lb, &ext);
    CHECK(sz == R * 8 && ext == ((R - 1) * C + 1) * 8, "vector size %d extent %ld", sz, (long)ext);
    SAY("vector %d %ld", sz, (long)ext);
    /* send column 2 to the right, receive as contiguous doubles */
    MPI_Sendrecv(&m[0][2], 1, column, right, 1, col, R, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < R; i++)
        CHECK(col[i] == left * 100 + i * 10 + 2, "column value %g", col[i]);
    /* and receive a column into column 4 */
    MPI_Sendrecv(col, R, MPI_DOUBLE, right, 2, &m[0][4], 1, column, left, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int left2 = (rank - 2 + 2 * size) % size;
    for (int i = 0; i < R; i++)
        CHECK(m[i][4] == left2 * 100 + i * 10 + 2 && m[i][3] == rank * 100 + i * 10 + 3, "column into matrix");

    /* indexed: the upper triangle of a 4x4 matrix */
    int lens[4], disps[4], tri[16], got[16];
    for (int i = 0; i < 4; i++) {
        lens[i] = 4 - i;
        disps[i] = i * 4 + i;
    }
    for (int i = 0; i < 16; i++) {
        tri[i] = rank * 16 + i;
        got[i] = -1;
    }
    MPI_Datatype upper;
    MPI_Type_indexed(4, lens, disps, MPI_INT, &upper);
    MPI_Type_commit(&upper);
    MPI_Type_size(upper, &sz);
    MPI_Type_get_extent(upper, &lb, &ext);
    CHECK(sz == 40 && lb == 0 && ext == 64, "indexed size %d extent %ld", sz, (long)ext);
    SAY("indexed %d %ld", sz, (long)ext);
    MPI_Sendrecv(tri, 1, upper, right, 3, got, 1, upper, left, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            CHECK(got[i * 4 + j] == (j >= i ? left * 16 + i * 4 + j : -1), "triangle [%d][%d]", i, j);

    /* struct, resized to sizeof(struct particle), arrays of it */
    struct particle ps[4], pr[4];
    int blens[3] = {3, 1, 1};
    MPI_Aint pd[3] = {offsetof(struct particle, x), offsetof(struct particle, id), offsetof(struct particle, tag)};
    MPI_Datatype pt[3] = {MPI_DOUBLE, MPI_INT, MPI_CHAR}, ptype, ptype2;
    MPI_Type_create_struct(3, blens, pd, pt, &ptype);
    MPI_Type_size(ptype, &sz);
    CHECK(sz == 3 * 8 + 4 + 1, "struct size %d", sz);
    MPI_Type_create_resized(ptype, 0, sizeof(struct particle), &ptype2);
    MPI_Type_commit(&ptype2);
    MPI_Type_get_extent(ptype2, &lb, &ext);
    CHECK(lb == 0 && ext == (MPI_Aint)sizeof(struct particle), "resized extent %ld", (long)ext);
    SAY("struct %d", sz);
    for (int k = 0; k < 4; k++) {
        for (int d = 0; d < 3; d++)
            ps[k].x[d] = rank + k * 0.5 + d * 0.25;
        ps[k].id = rank * 10 + k;
        ps[k].tag = (char)('a' + k);
    }
    memset(pr, 0, sizeof pr);
    MPI_Sendrecv(ps, 4, ptype2, right, 4, pr, 4, ptype2, left, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int k = 0; k < 4; k++)
        CHECK(pr[k].id == left * 10 + k && pr[k].tag == 'a' + k && pr[k].x[2] == left + k * 0.5 + 0.5,
              "particle %d", k);
    /* a Bcast and an Allgather of structs */
    struct particle *allp = malloc(size * sizeof *allp);
    MPI_Allgather(&ps[1], 1, ptype2, allp, 1, ptype2, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        CHECK(allp[r].id == r * 10 + 1, "allgather of structs");
    free(allp);
    MPI_Type_free(&ptype);
    CHECK(ptype == MPI_DATATYPE_NULL, "type_free");

    /* Pack / Unpack: an int, a column, and 4 particles in one buffer */
    int psz1, psz2, psz3;
    MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &psz1);
    MPI_Pack_size(1, column, MPI_COMM_WORLD, &psz2);
    MPI_Pack_size(4, ptype2, MPI_COMM_WORLD, &psz3);
    int cap = psz1 + psz2 + psz3;
    char *buf = malloc(cap), *rbuf = malloc(cap);
    int pos = 0, count = 4;
    MPI_Pack(&count, 1, MPI_INT, buf, cap, &pos, MPI_COMM_WORLD);
    MPI_Pack(&m[0][1], 1, column, buf, cap, &pos, MPI_COMM_WORLD);
    MPI_Pack(ps, 4, ptype2, buf, cap, &pos, MPI_COMM_WORLD);
    CHECK(pos <= cap, "packed %d of %d", pos, cap);
    MPI_Status st;
    MPI_Sendrecv(buf, pos, MPI_PACKED, right, 5, rbuf, cap, MPI_PACKED, left, 5, MPI_COMM_WORLD, &st);
    int n = 0, rpos = 0, rc = 0;
    MPI_Get_count(&st, MPI_PACKED, &rc);
    CHECK(rc == pos, "packed count %d", rc);
    double col2[R];
    struct particle up[4];
    MPI_Unpack(rbuf, rc, &rpos, &n, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Unpack(rbuf, rc, &rpos, col2, R, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Unpack(rbuf, rc, &rpos, up, n, ptype2, MPI_COMM_WORLD);
    CHECK(n == 4 && rpos == rc, "unpack header");
    for (int i = 0; i < R; i++)
        CHECK(col2[i] == left * 100 + i * 10 + 1, "unpacked column");
    for (int k = 0; k < 4; k++)
        CHECK(up[k].id == left * 10 + k && up[k].x[0] == left + k * 0.5, "unpacked particle");
    SAY("packed_bytes %d", pos);
    free(buf);
    free(rbuf);

    /* a 2x2 block of a 6x5 matrix as a resized contiguous type, broadcast
     * from the last rank */
    MPI_Datatype row2, block;
    MPI_Type_contiguous(2, MPI_DOUBLE, &row2);
    MPI_Type_create_resized(row2, 0, C * sizeof(double), &block);
    MPI_Type_commit(&block);
    double bb[R][C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            bb[i][j] = rank == size - 1 ? m[i][j] : -1;
    MPI_Bcast(&bb[1][1], 2, block, size - 1, MPI_COMM_WORLD);
    double e = (size - 1) * 100 + 2 * 10 + 2;
    CHECK(bb[2][2] == e && bb[1][2] == e - 10 && (rank == size - 1 || (bb[0][0] == -1 && bb[1][3] == -1)),
          "bcast of a derived type %g", bb[2][2]);
    SAY("block %.1f", bb[2][2]);

    MPI_Type_free(&c3);
    MPI_Type_free(&column);
    MPI_Type_free(&upper);
    MPI_Type_free(&ptype2);
    MPI_Type_free(&row2);
    MPI_Type_free(&block);
    return check_finish();
}
