/* Cartesian topologies: Dims_create, Cart_create/rank/coords/shift/sub. */
#include "check.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int cases[][2] = {{1, 2}, {6, 2}, {7, 2}, {12, 2}, {16, 2}, {24, 3}, {36, 2}, {8, 3}, {30, 3}};
    for (unsigned k = 0; k < sizeof cases / sizeof *cases; k++) {
        int d[3] = {0, 0, 0};
        MPI_Dims_create(cases[k][0], cases[k][1], d);
        int prod = 1;
        for (int i = 0; i < cases[k][1]; i++)
            prod *= d[i];
        CHECK(prod == cases[k][0], "dims product");
        SAY("dims %d %d -> %d %d %d", cases[k][0], cases[k][1], d[0], d[1], cases[k][1] > 2 ? d[2] : 0);
    }
    int fixed[2] = {0, 2};
    if (MPI_Dims_create(6, 2, fixed) == MPI_SUCCESS)
        SAY("dims fixed 6 -> %d %d", fixed[0], fixed[1]);

    /* a 2-D grid, periodic in x only */
    int dims[2] = {0, 0}, periods[2] = {1, 0};
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    int cr, coords[2];
    MPI_Comm_rank(cart, &cr);
    MPI_Cart_coords(cart, cr, 2, coords);
    int back;
    MPI_Cart_rank(cart, coords, &back);
    CHECK(back == cr, "rank of coords");
    CHECK(coords[0] == cr / dims[1] && coords[1] == cr % dims[1], "row-major coords");
    int status;
    MPI_Topo_test(cart, &status);
    CHECK(status == MPI_CART, "topo_test");
    int nd;
    MPI_Cartdim_get(cart, &nd);
    CHECK(nd == 2, "cartdim");

    int up, down, lft, rgt;
    MPI_Cart_shift(cart, 0, 1, &up, &down);
    MPI_Cart_shift(cart, 1, 1, &lft, &rgt);
    CHECK(up == ((coords[0] - 1 + dims[0]) % dims[0]) * dims[1] + coords[1], "periodic shift");
    CHECK(lft == (coords[1] == 0 ? MPI_PROC_NULL : cr - 1), "non-periodic shift left %d", lft);
    CHECK(rgt == (coords[1] == dims[1] - 1 ? MPI_PROC_NULL : cr + 1), "non-periodic shift right");
    /* exchange ranks with the four neighbours */
    int got[4] = {-5, -5, -5, -5};
    MPI_Sendrecv(&cr, 1, MPI_INT, down, 0, &got[0], 1, MPI_INT, up, 0, cart, MPI_STATUS_IGNORE);
    MPI_Sendrecv(&cr, 1, MPI_INT, up, 1, &got[1], 1, MPI_INT, down, 1, cart, MPI_STATUS_IGNORE);
    MPI_Sendrecv(&cr, 1, MPI_INT, rgt, 2, &got[2], 1, MPI_INT, lft, 2, cart, MPI_STATUS_IGNORE);
    MPI_Sendrecv(&cr, 1, MPI_INT, lft, 3, &got[3], 1, MPI_INT, rgt, 3, cart, MPI_STATUS_IGNORE);
    CHECK(got[0] == up && got[1] == down, "vertical neighbours");
    CHECK(got[2] == (lft == MPI_PROC_NULL ? -5 : lft) && got[3] == (rgt == MPI_PROC_NULL ? -5 : rgt),
          "horizontal neighbours");
    int twice[2];
    MPI_Cart_shift(cart, 0, 2, &twice[0], &twice[1]);
    CHECK(twice[1] == ((coords[0] + 2) % dims[0]) * dims[1] + coords[1], "shift by 2");

    /* rows and columns */
    MPI_Comm row, col;
    int keep_row[2] = {0, 1}, keep_col[2] = {1, 0};
    MPI_Cart_sub(cart, keep_row, &row);
    MPI_Cart_sub(cart, keep_col, &col);
    int rs, rr, cs, ccr;
    MPI_Comm_size(row, &rs);
    MPI_Comm_rank(row, &rr);
    MPI_Comm_size(col, &cs);
    MPI_Comm_rank(col, &ccr);
    CHECK(rs == dims[1] && rr == coords[1] && cs == dims[0] && ccr == coords[0], "sub sizes");
    int rowsum = 0, colsum = 0;
    MPI_Allreduce(&cr, &rowsum, 1, MPI_INT, MPI_SUM, row);
    MPI_Allreduce(&cr, &colsum, 1, MPI_INT, MPI_SUM, col);
    int er = 0, ec = 0;
    for (int j = 0; j < dims[1]; j++)
        er += coords[0] * dims[1] + j;
    for (int i = 0; i < dims[0]; i++)
        ec += i * dims[1] + coords[1];
    CHECK(rowsum == er && colsum == ec, "row %d col %d sums", rowsum, colsum);
    int sd[2], sp[2], sc[2];
    MPI_Cart_get(row, 1, sd, sp, sc);
    CHECK(sd[0] == dims[1] && sp[0] == 0 && sc[0] == coords[1], "cart_get of a row");
    int r0sum = 0;
    if (cr == 0)
        r0sum = rowsum;
    MPI_Bcast(&rowsum, 1, MPI_INT, 0, cart);
    SAY("grid %d x %d, row0_sum %d", dims[0], dims[1], rowsum);
    (void)r0sum;

    MPI_Comm_free(&row);
    MPI_Comm_free(&col);
    MPI_Comm_free(&cart);
    return check_finish();
}
