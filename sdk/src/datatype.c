/*
 * datatype.c — predefined and derived datatypes as flattened type maps
 * (runs of bytes relative to the start of one element), and Pack/Unpack.
 */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include "zmpi.h"

struct zf_i { float v; int i; };
struct zd_i { double v; int i; };
struct zl_i { long v; int i; };
struct z2_i { int v; int i; };
struct zs_i { short v; int i; };
struct zld_i { long double v; int i; };

#define PRE(id, b, ctype)                                                                   \
    struct zmpi_type zmpi_type_##id = {                                                     \
        .predefined = 1, .committed = 1, .basic = b, .size = sizeof(ctype), .lb = 0,        \
        .extent = sizeof(ctype), .true_lb = 0, .true_ub = sizeof(ctype),                    \
        .align = _Alignof(ctype), .nblocks = 1, .blocks = &zmpi_type_##id.one,             \
        .one = {0, sizeof(ctype)}};
/* A pair's data ends after its int; the padding after it is extent only. */
#define PAIR(id, b, st)                                                                     \
    struct zmpi_type zmpi_type_##id = {                                                     \
        .predefined = 1, .committed = 1, .basic = b,                                        \
        .size = offsetof(struct st, i) + sizeof(int), .lb = 0, .extent = sizeof(struct st), \
        .true_lb = 0, .true_ub = offsetof(struct st, i) + sizeof(int),                      \
        .align = _Alignof(struct st), .nblocks = 1, .blocks = &zmpi_type_##id.one,         \
        .one = {0, offsetof(struct st, i) + sizeof(int)}};

PRE(char, ZB_CHAR, char)
PRE(signed_char, ZB_SCHAR, signed char)
PRE(unsigned_char, ZB_UCHAR, unsigned char)
PRE(short, ZB_SHORT, short)
PRE(unsigned_short, ZB_USHORT, unsigned short)
PRE(int, ZB_INT, int)
PRE(unsigned, ZB_UINT, unsigned)
PRE(long, ZB_LONG, long)
PRE(unsigned_long, ZB_ULONG, unsigned long)
PRE(long_long, ZB_LLONG, long long)
PRE(unsigned_long_long, ZB_ULLONG, unsigned long long)
PRE(int8, ZB_I8, int8_t)
PRE(int16, ZB_I16, int16_t)
PRE(int32, ZB_I32, int32_t)
PRE(int64, ZB_I64, int64_t)
PRE(uint8, ZB_U8, uint8_t)
PRE(uint16, ZB_U16, uint16_t)
PRE(uint32, ZB_U32, uint32_t)
PRE(uint64, ZB_U64, uint64_t)
PRE(float, ZB_FLOAT, float)
PRE(double, ZB_DOUBLE, double)
PRE(long_double, ZB_LDOUBLE, long double)
PRE(c_bool, ZB_BOOL, bool)
PRE(wchar, ZB_WCHAR, wchar_t)
PRE(byte, ZB_BYTE, unsigned char)
PRE(packed, ZB_PACKED, unsigned char)
PAIR(float_int, ZB_FLOAT_INT, zf_i)
PAIR(double_int, ZB_DOUBLE_INT, zd_i)
PAIR(long_int, ZB_LONG_INT, zl_i)
PAIR(2int, ZB_2INT, z2_i)
PAIR(short_int, ZB_SHORT_INT, zs_i)
PAIR(long_double_int, ZB_LDOUBLE_INT, zld_i)
/* Addresses are longs on wasm32 and on the 64-bit hosts of native runs. */
_Static_assert(sizeof(MPI_Aint) == sizeof(long), "MPI_Aint is a long");
PRE(aint, ZB_LONG, MPI_Aint)
PRE(offset, ZB_LLONG, MPI_Offset)
PRE(count, ZB_LLONG, MPI_Count)

long long zmpi_type_bytes(MPI_Datatype t, int count)
{
    long long n = (long long)t->size * count;
    return n > INT_MAX ? -1 : n;
}

int zmpi_type_contig(MPI_Datatype t)
{
    return t->size == 0 || (t->nblocks == 1 && t->blocks[0].len == t->extent);
}

int zmpi_type_ok(MPI_Datatype t) { return t && t->committed; }

void zmpi_pack(const void *in, int count, MPI_Datatype t, void *out)
{
    const unsigned char *p = in;
    unsigned char *o = out;
    if (zmpi_type_contig(t)) {
        if (t->size)
            memcpy(o, p + t->true_lb, (size_t)t->size * count);
        return;
    }
    for (int i = 0; i < count; i++, p += t->extent)
        for (int b = 0; b < t->nblocks; b++) {
            memcpy(o, p + t->blocks[b].off, t->blocks[b].len);
            o += t->blocks[b].len;
        }
}

void zmpi_unpack(const void *in, long long bytes, void *out, int count, MPI_Datatype t)
{
    const unsigned char *s = in;
    unsigned char *p = out;
    if (zmpi_type_contig(t)) {
        long long max = (long long)t->size * count;
        if (bytes > max)
            bytes = max;
        if (bytes)
            memcpy(p + t->true_lb, s, bytes);
        return;
    }
    for (int i = 0; i < count && bytes > 0; i++, p += t->extent)
        for (int b = 0; b < t->nblocks && bytes > 0; b++) {
            long long n = t->blocks[b].len;
            if (n > bytes)
                n = bytes;
            memcpy(p + t->blocks[b].off, s, n);
            s += n;
            bytes -= n;
        }
}

int zmpi_copy(const void *src, int scount, MPI_Datatype st, void *dst, int rcount,
              MPI_Datatype rt)
{
    long long sb = zmpi_type_bytes(st, scount), rb = zmpi_type_bytes(rt, rcount);
    int err = sb > rb ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
    long long n = sb < rb ? sb : rb;
    if (n <= 0)
        return err;
    if (zmpi_type_contig(st) && zmpi_type_contig(rt)) {
        memmove((unsigned char *)dst + rt->true_lb, (const unsigned char *)src + st->true_lb, n);
        return err;
    }
    void *tmp = malloc(sb);
    if (!tmp)
        return MPI_ERR_NO_MEM;
    zmpi_pack(src, scount, st, tmp);
    zmpi_unpack(tmp, n, dst, rcount, rt);
    free(tmp);
    return err;
}

/* ---- building derived types ---- */

struct builder {
    struct zmpi_type *t;
    int cap;
    int first;
    MPI_Aint lb, ub;
    int basic_set;
};

static int add_block(struct builder *b, MPI_Aint off, MPI_Aint len)
{
    struct zmpi_type *t = b->t;
    if (len == 0)
        return 0;
    if (t->nblocks > 0) {
        struct zmpi_block *last = &t->blocks[t->nblocks - 1];
        if (last->off + last->len == off) {
            last->len += len;
            return 0;
        }
    }
    if (t->nblocks == b->cap) {
        int nc = b->cap ? 2 * b->cap : 8;
        struct zmpi_block *nb = realloc(t->blocks, nc * sizeof *nb);
        if (!nb)
            return -1;
        t->blocks = nb;
        b->cap = nc;
    }
    t->blocks[t->nblocks].off = off;
    t->blocks[t->nblocks].len = len;
    t->nblocks++;
    return 0;
}

/* Appends `n` elements of `old` starting at byte displacement `disp`. */
static int add_elems(struct builder *b, MPI_Aint disp, int n, MPI_Datatype old)
{
    struct zmpi_type *t = b->t;
    if (n <= 0)
        return 0;
    if (!b->basic_set) {
        t->basic = old->basic;
        b->basic_set = 1;
    } else if (t->basic != old->basic)
        t->basic = ZB_NONE;
    if (old->align > t->align)
        t->align = old->align;
    MPI_Aint lo = disp + old->lb, hi = disp + old->lb + (MPI_Aint)n * old->extent;
    if (old->extent < 0) {
        MPI_Aint x = lo;
        lo = hi;
        hi = x;
    }
    if (b->first || lo < b->lb)
        b->lb = lo;
    if (b->first || hi > b->ub)
        b->ub = hi;
    b->first = 0;
    t->size += (MPI_Aint)n * old->size;
    if (zmpi_type_contig(old) && old->size > 0)
        return add_block(b, disp + old->true_lb, (MPI_Aint)n * old->extent);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < old->nblocks; k++)
            if (add_block(b, disp + (MPI_Aint)i * old->extent + old->blocks[k].off,
                          old->blocks[k].len))
                return -1;
    return 0;
}

static struct zmpi_type *begin(struct builder *b)
{
    memset(b, 0, sizeof *b);
    b->first = 1;
    b->t = calloc(1, sizeof *b->t);
    if (b->t)
        b->t->align = 1;
    return b->t;
}

static int end(struct builder *b, int pad, MPI_Datatype *out)
{
    struct zmpi_type *t = b->t;
    if (b->first) {
        b->lb = b->ub = 0;
        t->basic = ZB_NONE;
    }
    t->lb = b->lb;
    t->extent = b->ub - b->lb;
    if (pad && t->align > 1 && t->extent % t->align)
        t->extent += t->align - t->extent % t->align;
    if (t->nblocks > 0) {
        t->true_lb = t->blocks[0].off;
        t->true_ub = t->blocks[0].off + t->blocks[0].len;
        for (int i = 1; i < t->nblocks; i++) {
            MPI_Aint lo = t->blocks[i].off, hi = lo + t->blocks[i].len;
            if (lo < t->true_lb)
                t->true_lb = lo;
            if (hi > t->true_ub)
                t->true_ub = hi;
        }
    } else {
        t->true_lb = t->true_ub = 0;
    }
    *out = t;
    return MPI_SUCCESS;
}

static int fail(struct builder *b, const char *fn)
{
    free(b->t->blocks);
    free(b->t);
    return zmpi_error(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
}

static int check_old(const char *fn, MPI_Datatype old, int count)
{
    int err = zmpi_check_init(fn);
    if (err)
        return err;
    if (!old)
        return zmpi_error(NULL, MPI_ERR_TYPE, fn, "null datatype");
    if (count < 0)
        return zmpi_error(NULL, MPI_ERR_COUNT, fn, "negative count");
    return MPI_SUCCESS;
}

static int hindexed(const char *fn, int count, const int *lens, int lens_same,
                    const MPI_Aint *disps, const int *idisps, MPI_Aint stride_bytes,
                    MPI_Datatype old, MPI_Datatype *out)
{
    int err = check_old(fn, old, count);
    if (err)
        return err;
    struct builder b;
    if (!begin(&b))
        return zmpi_error(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    for (int i = 0; i < count; i++) {
        int n = lens ? lens[i] : lens_same;
        MPI_Aint d = disps ? disps[i] : idisps ? (MPI_Aint)idisps[i] * old->extent
                                               : (MPI_Aint)i * stride_bytes;
        if (n < 0) {
            free(b.t->blocks);
            free(b.t);
            return zmpi_error(NULL, MPI_ERR_COUNT, fn, "negative block length");
        }
        if (add_elems(&b, d, n, old))
            return fail(&b, fn);
    }
    if (count == 0 || b.first)
        b.t->basic = old->basic;
    return end(&b, 0, out);
}

int MPI_Type_contiguous(int count, MPI_Datatype old, MPI_Datatype *out)
{
    return hindexed("MPI_Type_contiguous", count > 0 ? 1 : 0, NULL, count, NULL, NULL, 0, old,
                    out);
}

int MPI_Type_vector(int count, int blocklen, int stride, MPI_Datatype old, MPI_Datatype *out)
{
    if (!old)
        return check_old("MPI_Type_vector", old, count);
    return hindexed("MPI_Type_vector", count, NULL, blocklen, NULL, NULL,
                    (MPI_Aint)stride * old->extent, old, out);
}

int MPI_Type_create_hvector(int count, int blocklen, MPI_Aint stride, MPI_Datatype old,
                            MPI_Datatype *out)
{
    return hindexed("MPI_Type_create_hvector", count, NULL, blocklen, NULL, NULL, stride, old,
                    out);
}

int MPI_Type_indexed(int count, const int lens[], const int disps[], MPI_Datatype old,
                     MPI_Datatype *out)
{
    return hindexed("MPI_Type_indexed", count, lens, 0, NULL, disps, 0, old, out);
}

int MPI_Type_create_hindexed(int count, const int lens[], const MPI_Aint disps[],
                             MPI_Datatype old, MPI_Datatype *out)
{
    return hindexed("MPI_Type_create_hindexed", count, lens, 0, disps, NULL, 0, old, out);
}

int MPI_Type_create_indexed_block(int count, int blocklen, const int disps[], MPI_Datatype old,
                                  MPI_Datatype *out)
{
    return hindexed("MPI_Type_create_indexed_block", count, NULL, blocklen, NULL, disps, 0, old,
                    out);
}

int MPI_Type_create_struct(int count, const int lens[], const MPI_Aint disps[],
                           const MPI_Datatype types[], MPI_Datatype *out)
{
    const char *fn = "MPI_Type_create_struct";
    int err = check_old(fn, MPI_BYTE, count);
    if (err)
        return err;
    struct builder b;
    if (!begin(&b))
        return zmpi_error(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    for (int i = 0; i < count; i++) {
        if (!types[i] || lens[i] < 0) {
            free(b.t->blocks);
            free(b.t);
            return zmpi_error(NULL, MPI_ERR_ARG, fn, "null type or negative block length");
        }
        if (add_elems(&b, disps[i], lens[i], types[i]))
            return fail(&b, fn);
    }
    return end(&b, 1, out);
}

int MPI_Type_create_resized(MPI_Datatype old, MPI_Aint lb, MPI_Aint extent, MPI_Datatype *out)
{
    const char *fn = "MPI_Type_create_resized";
    int err = check_old(fn, old, 0);
    if (err)
        return err;
    struct zmpi_type *t = malloc(sizeof *t);
    if (!t)
        return zmpi_error(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    *t = *old;
    t->predefined = 0;
    t->committed = 0;
    t->blocks = malloc((old->nblocks ? old->nblocks : 1) * sizeof *t->blocks);
    if (!t->blocks) {
        free(t);
        return zmpi_error(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    memcpy(t->blocks, old->blocks, old->nblocks * sizeof *t->blocks);
    t->lb = lb;
    t->extent = extent;
    *out = t;
    return MPI_SUCCESS;
}

int MPI_Type_dup(MPI_Datatype old, MPI_Datatype *out)
{
    int err = MPI_Type_create_resized(old, old ? old->lb : 0, old ? old->extent : 0, out);
    if (!err)
        (*out)->committed = 1;
    return err;
}

int MPI_Type_commit(MPI_Datatype *t)
{
    int err = zmpi_check_init("MPI_Type_commit");
    if (err)
        return err;
    if (!t || !*t)
        return zmpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_commit", "null datatype");
    (*t)->committed = 1;
    return MPI_SUCCESS;
}

int MPI_Type_free(MPI_Datatype *t)
{
    int err = zmpi_check_init("MPI_Type_free");
    if (err)
        return err;
    if (!t || !*t || (*t)->predefined)
        return zmpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_free",
                          "null or predefined datatype");
    free((*t)->blocks);
    free((*t)->name);
    free(*t);
    *t = MPI_DATATYPE_NULL;
    return MPI_SUCCESS;
}

int MPI_Type_size(MPI_Datatype t, int *size)
{
    if (!t)
        return zmpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_size", "null datatype");
    *size = t->size > INT_MAX ? MPI_UNDEFINED : (int)t->size;
    return MPI_SUCCESS;
}

int MPI_Type_set_name(MPI_Datatype t, const char *name)
{
    if (!t || !name)
        return zmpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_set_name", "null datatype or name");
    size_t n = strnlen(name, MPI_MAX_OBJECT_NAME - 1);
    char *copy = malloc(n + 1);
    if (!copy)
        return zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Type_set_name", "out of memory");
    memcpy(copy, name, n);
    copy[n] = 0;
    free(t->name);
    t->name = copy;
    return MPI_SUCCESS;
}

/* The name of a predefined type is its MPI name. */
static const char *predefined_name(MPI_Datatype t)
{
#define NAME(name, id) if (t == &zmpi_type_##id) return #name;
    ZMPI_TYPES(NAME)
#undef NAME
    return "";
}

int MPI_Type_get_name(MPI_Datatype t, char *name, int *len)
{
    if (!t || !name || !len)
        return zmpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_get_name", "null datatype or name");
    const char *s = t->name ? t->name : t->predefined ? predefined_name(t) : "";
    *len = snprintf(name, MPI_MAX_OBJECT_NAME, "%s", s);
    return MPI_SUCCESS;
}

int MPI_Type_get_extent(MPI_Datatype t, MPI_Aint *lb, MPI_Aint *extent)
{
    if (!t)
        return zmpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_get_extent", "null datatype");
    *lb = t->lb;
    *extent = t->extent;
    return MPI_SUCCESS;
}

int MPI_Type_get_true_extent(MPI_Datatype t, MPI_Aint *lb, MPI_Aint *extent)
{
    if (!t)
        return zmpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_get_true_extent", "null datatype");
    *lb = t->true_lb;
    *extent = t->true_ub - t->true_lb;
    return MPI_SUCCESS;
}

int MPI_Get_address(const void *location, MPI_Aint *address)
{
    *address = (MPI_Aint)location;
    return MPI_SUCCESS;
}

int MPI_Pack(const void *in, int incount, MPI_Datatype t, void *out, int outsize, int *position,
             MPI_Comm comm)
{
    int err = zmpi_check_init("MPI_Pack");
    if (err)
        return err;
    if (!zmpi_type_ok(t) || incount < 0)
        return zmpi_error(comm, MPI_ERR_TYPE, "MPI_Pack", "invalid datatype or count");
    long long n = zmpi_type_bytes(t, incount);
    if (n < 0 || *position < 0 || *position + n > outsize)
        return zmpi_error(comm, MPI_ERR_TRUNCATE, "MPI_Pack", "output buffer too small");
    zmpi_pack(in, incount, t, (unsigned char *)out + *position);
    *position += (int)n;
    return MPI_SUCCESS;
}

int MPI_Unpack(const void *in, int insize, int *position, void *out, int outcount,
               MPI_Datatype t, MPI_Comm comm)
{
    int err = zmpi_check_init("MPI_Unpack");
    if (err)
        return err;
    if (!zmpi_type_ok(t) || outcount < 0)
        return zmpi_error(comm, MPI_ERR_TYPE, "MPI_Unpack", "invalid datatype or count");
    long long n = zmpi_type_bytes(t, outcount);
    if (n < 0 || *position < 0 || *position + n > insize)
        return zmpi_error(comm, MPI_ERR_TRUNCATE, "MPI_Unpack", "input buffer too short");
    zmpi_unpack((const unsigned char *)in + *position, n, out, outcount, t);
    *position += (int)n;
    return MPI_SUCCESS;
}

int MPI_Pack_size(int incount, MPI_Datatype t, MPI_Comm comm, int *size)
{
    if (!t || incount < 0)
        return zmpi_error(comm, MPI_ERR_TYPE, "MPI_Pack_size", "invalid datatype or count");
    long long n = zmpi_type_bytes(t, incount);
    if (n < 0)
        return zmpi_error(comm, MPI_ERR_COUNT, "MPI_Pack_size", "larger than 2 GiB");
    *size = (int)n;
    return MPI_SUCCESS;
}
