/*
 * op.c — reduction operators: the predefined ones on every element kind
 * they apply to, MAXLOC/MINLOC on the pair types, and user operators.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <wchar.h>
#include "zmpi.h"

enum { O_MAX, O_MIN, O_SUM, O_PROD, O_LAND, O_LOR, O_LXOR, O_BAND, O_BOR, O_BXOR, O_MAXLOC,
       O_MINLOC, O_REPLACE, O_NO_OP };

#define OP(id, w) struct zmpi_op zmpi_op_##id = {1, 1, w, NULL};
OP(max, O_MAX) OP(min, O_MIN) OP(sum, O_SUM) OP(prod, O_PROD) OP(land, O_LAND) OP(lor, O_LOR)
OP(lxor, O_LXOR) OP(band, O_BAND) OP(bor, O_BOR) OP(bxor, O_BXOR) OP(maxloc, O_MAXLOC)
OP(minloc, O_MINLOC) OP(replace, O_REPLACE) OP(no_op, O_NO_OP)

enum kclass { C_NONE, C_INT, C_FLOAT, C_BOOL, C_BYTE, C_PAIR };

static enum kclass class_of(enum zmpi_basic b)
{
    switch (b) {
    case ZB_CHAR: case ZB_SCHAR: case ZB_UCHAR: case ZB_SHORT: case ZB_USHORT: case ZB_INT:
    case ZB_UINT: case ZB_LONG: case ZB_ULONG: case ZB_LLONG: case ZB_ULLONG: case ZB_I8:
    case ZB_I16: case ZB_I32: case ZB_I64: case ZB_U8: case ZB_U16: case ZB_U32: case ZB_U64:
    case ZB_WCHAR:
        return C_INT;
    case ZB_FLOAT: case ZB_DOUBLE: case ZB_LDOUBLE:
        return C_FLOAT;
    case ZB_BOOL:
        return C_BOOL;
    case ZB_BYTE:
        return C_BYTE;
    case ZB_FLOAT_INT: case ZB_DOUBLE_INT: case ZB_LONG_INT: case ZB_2INT: case ZB_SHORT_INT:
    case ZB_LDOUBLE_INT:
        return C_PAIR;
    default:
        return C_NONE;
    }
}

int zmpi_op_ok(MPI_Op op, MPI_Datatype t)
{
    if (!op)
        return 0;
    if (!op->predefined)
        return 1;
    if (op->which == O_REPLACE || op->which == O_NO_OP)
        return 1;
    enum kclass c = class_of(t->basic);
    switch (op->which) {
    case O_MAX: case O_MIN: case O_SUM: case O_PROD:
        return c == C_INT || c == C_FLOAT;
    case O_LAND: case O_LOR: case O_LXOR:
        return c == C_INT || c == C_BOOL;
    case O_BAND: case O_BOR: case O_BXOR:
        return c == C_INT || c == C_BYTE;
    case O_MAXLOC: case O_MINLOC:
        return c == C_PAIR;
    }
    return 0;
}

#define ARITH(T)                                                             \
    static void k_##T(int w, const void *in, void *io, long n)               \
    {                                                                        \
        const T *a = in;                                                     \
        T *b = io;                                                           \
        switch (w) {                                                         \
        case O_MAX: for (long i = 0; i < n; i++) if (a[i] > b[i]) b[i] = a[i]; break; \
        case O_MIN: for (long i = 0; i < n; i++) if (a[i] < b[i]) b[i] = a[i]; break; \
        case O_SUM: for (long i = 0; i < n; i++) b[i] = a[i] + b[i]; break;  \
        case O_PROD: for (long i = 0; i < n; i++) b[i] = a[i] * b[i]; break; \
        case O_LAND: for (long i = 0; i < n; i++) b[i] = a[i] && b[i]; break; \
        case O_LOR: for (long i = 0; i < n; i++) b[i] = a[i] || b[i]; break; \
        case O_LXOR: for (long i = 0; i < n; i++) b[i] = !a[i] != !b[i]; break; \
        case O_REPLACE: for (long i = 0; i < n; i++) b[i] = a[i]; break;     \
        BITS(T)                                                              \
        }                                                                    \
    }
#define BITS(T)                                                              \
    case O_BAND: for (long i = 0; i < n; i++) b[i] = a[i] & b[i]; break;     \
    case O_BOR: for (long i = 0; i < n; i++) b[i] = a[i] | b[i]; break;      \
    case O_BXOR: for (long i = 0; i < n; i++) b[i] = a[i] ^ b[i]; break;

typedef signed char schar;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef long long llong;
typedef unsigned long long ullong;
typedef long double ldouble;
ARITH(char) ARITH(schar) ARITH(uchar) ARITH(short) ARITH(ushort) ARITH(int) ARITH(uint)
ARITH(long) ARITH(ulong) ARITH(llong) ARITH(ullong) ARITH(int8_t) ARITH(int16_t) ARITH(int32_t)
ARITH(int64_t) ARITH(uint8_t) ARITH(uint16_t) ARITH(uint32_t) ARITH(uint64_t) ARITH(wchar_t)
ARITH(bool)
#undef BITS
#define BITS(T)
ARITH(float) ARITH(double) ARITH(ldouble)

#define PAIRK(name, VT)                                                       \
    static void k_##name(int w, const void *in, void *io, long n, long stride) \
    {                                                                         \
        const unsigned char *pa = in;                                         \
        unsigned char *pb = io;                                               \
        for (long k = 0; k < n; k++, pa += stride, pb += stride) {            \
            const struct { VT v; int i; } *a = (const void *)pa;              \
            struct { VT v; int i; } *b = (void *)pb;                          \
            if (w == O_REPLACE) {                                             \
                b->v = a->v;                                                  \
                b->i = a->i;                                                  \
            } else if (w == O_MAXLOC ? a->v > b->v : a->v < b->v) {           \
                b->v = a->v;                                                  \
                b->i = a->i;                                                  \
            } else if (a->v == b->v && a->i < b->i)                           \
                b->i = a->i;                                                  \
        }                                                                     \
    }
PAIRK(fi, float) PAIRK(di, double) PAIRK(li, long) PAIRK(ii, int) PAIRK(si, short)
PAIRK(ldi, long double)

/* Applies the predefined op `w` to the elements of kind b in one run of len bytes. */
static void kernel(int w, enum zmpi_basic b, const void *in, void *io, long len, long pstride)
{
    switch (b) {
#define K(Z, T) case Z: k_##T(w, in, io, len / (long)sizeof(T)); break;
    K(ZB_CHAR, char) K(ZB_SCHAR, schar) K(ZB_UCHAR, uchar) K(ZB_SHORT, short)
    K(ZB_USHORT, ushort) K(ZB_INT, int) K(ZB_UINT, uint) K(ZB_LONG, long) K(ZB_ULONG, ulong)
    K(ZB_LLONG, llong) K(ZB_ULLONG, ullong) K(ZB_I8, int8_t) K(ZB_I16, int16_t)
    K(ZB_I32, int32_t) K(ZB_I64, int64_t) K(ZB_U8, uint8_t) K(ZB_U16, uint16_t)
    K(ZB_U32, uint32_t) K(ZB_U64, uint64_t) K(ZB_WCHAR, wchar_t) K(ZB_BOOL, bool)
    K(ZB_BYTE, uchar) K(ZB_PACKED, uchar) K(ZB_FLOAT, float) K(ZB_DOUBLE, double)
    K(ZB_LDOUBLE, ldouble)
#undef K
#define P(Z, name, ty)                                                         \
    case Z: {                                                                  \
        long esize = ty.size, n = (len + pstride - esize) / pstride;           \
        k_##name(w, in, io, n, pstride);                                       \
        break;                                                                 \
    }
    P(ZB_FLOAT_INT, fi, zmpi_type_float_int) P(ZB_DOUBLE_INT, di, zmpi_type_double_int)
    P(ZB_LONG_INT, li, zmpi_type_long_int) P(ZB_2INT, ii, zmpi_type_2int)
    P(ZB_SHORT_INT, si, zmpi_type_short_int) P(ZB_LDOUBLE_INT, ldi, zmpi_type_long_double_int)
#undef P
    default:
        break;
    }
}

static long pair_stride(enum zmpi_basic b)
{
    switch (b) {
    case ZB_FLOAT_INT: return zmpi_type_float_int.extent;
    case ZB_DOUBLE_INT: return zmpi_type_double_int.extent;
    case ZB_LONG_INT: return zmpi_type_long_int.extent;
    case ZB_2INT: return zmpi_type_2int.extent;
    case ZB_SHORT_INT: return zmpi_type_short_int.extent;
    case ZB_LDOUBLE_INT: return zmpi_type_long_double_int.extent;
    default: return 1;
    }
}

int zmpi_apply(MPI_Op op, const void *in, void *inout, int count, MPI_Datatype t)
{
    if (count <= 0)
        return MPI_SUCCESS;
    if (!op->predefined) {
        int n = count;
        MPI_Datatype dt = t;
        op->fn((void *)in, inout, &n, &dt);
        return MPI_SUCCESS;
    }
    if (!zmpi_op_ok(op, t))
        return MPI_ERR_OP;
    if (op->which == O_NO_OP) /* one-sided: leaves the target as it is */
        return MPI_SUCCESS;
    long ps = pair_stride(t->basic);
    if (zmpi_type_contig(t)) {
        long len = (long)t->size * count;
        kernel(op->which, t->basic, (const char *)in + t->true_lb, (char *)inout + t->true_lb,
               len, ps);
        return MPI_SUCCESS;
    }
    for (int i = 0; i < count; i++)
        for (int k = 0; k < t->nblocks; k++) {
            MPI_Aint off = (MPI_Aint)i * t->extent + t->blocks[k].off;
            kernel(op->which, t->basic, (const char *)in + off, (char *)inout + off,
                   t->blocks[k].len, ps);
        }
    return MPI_SUCCESS;
}

int MPI_Op_create(MPI_User_function *fn, int commute, MPI_Op *op)
{
    int err = zmpi_check_init("MPI_Op_create");
    if (err)
        return err;
    struct zmpi_op *o = calloc(1, sizeof *o);
    if (!o)
        return zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Op_create", "out of memory");
    o->commute = commute != 0;
    o->fn = fn;
    *op = o;
    return MPI_SUCCESS;
}

int MPI_Op_free(MPI_Op *op)
{
    if (!op || !*op || (*op)->predefined)
        return zmpi_error(NULL, MPI_ERR_OP, "MPI_Op_free", "null or predefined operator");
    free(*op);
    *op = MPI_OP_NULL;
    return MPI_SUCCESS;
}

int MPI_Op_commutative(MPI_Op op, int *commute)
{
    if (!op)
        return zmpi_error(NULL, MPI_ERR_OP, "MPI_Op_commutative", "null operator");
    *commute = op->commute;
    return MPI_SUCCESS;
}

int MPI_Reduce_local(const void *in, void *inout, int count, MPI_Datatype t, MPI_Op op)
{
    if (!zmpi_type_ok(t) || !op)
        return zmpi_error(NULL, MPI_ERR_ARG, "MPI_Reduce_local", "invalid datatype or operator");
    int err = zmpi_apply(op, in, inout, count, t);
    return err ? zmpi_error(NULL, err, "MPI_Reduce_local", "operator does not apply to datatype")
               : MPI_SUCCESS;
}
