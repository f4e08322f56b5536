/*
 * info.c — Info objects: ordered lists of (key, value) strings that programs
 * hand to window and topology constructors. This library takes no hints
 * from them, but keeps what is set so that it can be read back.
 */
#include <stdlib.h>
#include <string.h>
#include "zmpi.h"

struct entry {
    char *key, *value;
    struct entry *next;
};

struct zmpi_info {
    struct entry *head;
    int n;
};

#define CHECK_INFO(fn, info)                                                  \
    do {                                                                      \
        int e_ = zmpi_check_init(fn);                                         \
        if (e_)                                                               \
            return e_;                                                        \
        if (!(info))                                                          \
            return zmpi_error(NULL, MPI_ERR_INFO, fn, "null info object");     \
    } while (0)

static int key_ok(const char *key)
{
    return key && key[0] && strlen(key) <= MPI_MAX_INFO_KEY;
}

static struct entry *find(MPI_Info info, const char *key)
{
    for (struct entry *e = info->head; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

int MPI_Info_create(MPI_Info *info)
{
    int err = zmpi_check_init("MPI_Info_create");
    if (err)
        return err;
    *info = calloc(1, sizeof **info);
    return *info ? MPI_SUCCESS
                 : zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Info_create", "out of memory");
}

int MPI_Info_set(MPI_Info info, const char *key, const char *value)
{
    CHECK_INFO("MPI_Info_set", info);
    if (!key_ok(key))
        return zmpi_error(NULL, MPI_ERR_INFO_KEY, "MPI_Info_set", "empty or too long key");
    if (!value || strlen(value) > MPI_MAX_INFO_VAL)
        return zmpi_error(NULL, MPI_ERR_INFO_VALUE, "MPI_Info_set", "null or too long value");
    char *v = strdup(value);
    if (!v)
        return zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Info_set", "out of memory");
    struct entry *e = find(info, key);
    if (e) {
        free(e->value);
        e->value = v;
        return MPI_SUCCESS;
    }
    e = calloc(1, sizeof *e);
    char *k = strdup(key);
    if (!e || !k) {
        free(e);
        free(k);
        free(v);
        return zmpi_error(NULL, MPI_ERR_NO_MEM, "MPI_Info_set", "out of memory");
    }
    e->key = k;
    e->value = v;
    /* at the end: keys are numbered in the order they were first set */
    struct entry **pp = &info->head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = e;
    info->n++;
    return MPI_SUCCESS;
}

int MPI_Info_get(MPI_Info info, const char *key, int valuelen, char *value, int *flag)
{
    CHECK_INFO("MPI_Info_get", info);
    if (!key_ok(key))
        return zmpi_error(NULL, MPI_ERR_INFO_KEY, "MPI_Info_get", "empty or too long key");
    if (valuelen < 0)
        return zmpi_error(NULL, MPI_ERR_ARG, "MPI_Info_get", "negative length");
    struct entry *e = find(info, key);
    *flag = e != NULL;
    if (e) {
        /* at most valuelen characters, and the terminating zero */
        size_t n = strlen(e->value);
        if (n > (size_t)valuelen)
            n = valuelen;
        memcpy(value, e->value, n);
        value[n] = 0;
    }
    return MPI_SUCCESS;
}

int MPI_Info_get_string(MPI_Info info, const char *key, int *buflen, char *value, int *flag)
{
    CHECK_INFO("MPI_Info_get_string", info);
    if (!key_ok(key))
        return zmpi_error(NULL, MPI_ERR_INFO_KEY, "MPI_Info_get_string", "empty or too long key");
    struct entry *e = find(info, key);
    *flag = e != NULL;
    if (!e)
        return MPI_SUCCESS;
    int need = (int)strlen(e->value) + 1;
    if (*buflen > 0) {
        int n = need <= *buflen ? need - 1 : *buflen - 1;
        memcpy(value, e->value, n);
        value[n] = 0;
    }
    *buflen = need;
    return MPI_SUCCESS;
}

int MPI_Info_get_valuelen(MPI_Info info, const char *key, int *valuelen, int *flag)
{
    CHECK_INFO("MPI_Info_get_valuelen", info);
    if (!key_ok(key))
        return zmpi_error(NULL, MPI_ERR_INFO_KEY, "MPI_Info_get_valuelen", "empty or too long key");
    struct entry *e = find(info, key);
    *flag = e != NULL;
    if (e)
        *valuelen = (int)strlen(e->value);
    return MPI_SUCCESS;
}

int MPI_Info_get_nkeys(MPI_Info info, int *nkeys)
{
    CHECK_INFO("MPI_Info_get_nkeys", info);
    *nkeys = info->n;
    return MPI_SUCCESS;
}

int MPI_Info_get_nthkey(MPI_Info info, int n, char *key)
{
    CHECK_INFO("MPI_Info_get_nthkey", info);
    if (n < 0 || n >= info->n)
        return zmpi_error(NULL, MPI_ERR_ARG, "MPI_Info_get_nthkey", "no key of that number");
    struct entry *e = info->head;
    while (n-- > 0)
        e = e->next;
    strcpy(key, e->key);
    return MPI_SUCCESS;
}

int MPI_Info_delete(MPI_Info info, const char *key)
{
    CHECK_INFO("MPI_Info_delete", info);
    if (!key_ok(key))
        return zmpi_error(NULL, MPI_ERR_INFO_KEY, "MPI_Info_delete", "empty or too long key");
    for (struct entry **pp = &info->head; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->key, key) == 0) {
            struct entry *e = *pp;
            *pp = e->next;
            free(e->key);
            free(e->value);
            free(e);
            info->n--;
            return MPI_SUCCESS;
        }
    return zmpi_error(NULL, MPI_ERR_INFO_NOKEY, "MPI_Info_delete", "no such key");
}

int MPI_Info_dup(MPI_Info info, MPI_Info *out)
{
    CHECK_INFO("MPI_Info_dup", info);
    int err = MPI_Info_create(out);
    for (struct entry *e = info->head; e && !err; e = e->next)
        err = MPI_Info_set(*out, e->key, e->value);
    return err;
}

int MPI_Info_free(MPI_Info *info)
{
    CHECK_INFO("MPI_Info_free", info ? *info : NULL);
    struct entry *e = (*info)->head;
    while (e) {
        struct entry *next = e->next;
        free(e->key);
        free(e->value);
        free(e);
        e = next;
    }
    free(*info);
    *info = MPI_INFO_NULL;
    return MPI_SUCCESS;
}
