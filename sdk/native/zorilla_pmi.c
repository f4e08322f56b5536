/* A PMI-1 client library (the PMI_* calls of MPICH's pmi.h) speaking the
 * PMI-1 wire protocol on the descriptor PMI_FD: the node's PMI server
 * (node/src/pmi.rs) answers it, as Hydra's and Flux's do.
 *
 * What it is for: Open MPI 4.x programs, built unchanged with the
 * distribution's mpicc, run as native Zorilla jobs through Open MPI's
 * "flux" PMIx component. That component is chosen when FLUX_JOB_ID is set
 * and dlopen()s the PMI-1 library named by FLUX_PMI_LIBRARY_PATH; the node
 * sets both for a native rank when its owner installed this library (see
 * README, "MPI programs, natively"). MPICH's library has a client of its
 * own and does not need this one. The same library carries a fix for
 * MPICH's MPI_Finalize (zorilla_ucx.c), and the node preloads it into
 * every native rank. Build (deploy/install.sh does):
 *
 *   cc -O2 -shared -fPIC sdk/native/zorilla_pmi.c sdk/native/zorilla_ucx.c \
 *      -o libzorilla-pmi.so -ldl
 *
 * Each rank runs alone in its sandbox, with a /dev/shm of its own, so its
 * clique (the ranks sharing its memory) is itself. One thread makes the
 * calls, as PMI-1 requires. Lines are bounded by what the server said
 * (get_maxes); an answer that does not fit fails the call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PMI_SUCCESS 0
#define PMI_FAIL -1
#define PMI_ERR_INIT 1
#define PMI_ERR_NOMEM 2
#define PMI_ERR_INVALID_ARG 3
#define PMI_ERR_INVALID_KEY 4
#define PMI_ERR_INVALID_KEY_LENGTH 5
#define PMI_ERR_INVALID_VAL 6
#define PMI_ERR_INVALID_VAL_LENGTH 7
#define PMI_ERR_INVALID_LENGTH 8

#define EXPORT __attribute__((visibility("default")))

/* The server's longest line (node/src/pmi.rs, MAX_LINE). */
#define LINE_MAX_BYTES 4096

static int fd = -1;
static int rank = 0;
static int size = 1;
static int kvsname_max = 256;
static int keylen_max = 64;
static int vallen_max = 1024;

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

static int write_all(const char *p, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One answer line, without its newline, into `line`. Reads a byte at a
 * time: the protocol is one answer per request, and nothing may be read
 * past it. */
static int read_line(char *line, size_t cap) {
    size_t n = 0;
    for (;;) {
        char c;
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        if (c == '\n') break;
        if (n + 1 >= cap) return -1;
        line[n++] = c;
    }
    line[n] = '\0';
    return 0;
}

/* Sends `request` and reads the answer, which must be `cmd=<expect>` and,
 * if it says, rc=0. */
static int ask(const char *request, const char *expect, char *answer, size_t cap) {
    if (fd < 0) return PMI_ERR_INIT;
    if (write_all(request, strlen(request)) != 0) return PMI_FAIL;
    if (read_line(answer, cap) != 0) return PMI_FAIL;
    size_t len = strlen(expect);
    if (strncmp(answer, "cmd=", 4) != 0 || strncmp(answer + 4, expect, len) != 0 ||
        (answer[4 + len] != ' ' && answer[4 + len] != '\0'))
        return PMI_FAIL;
    const char *rc = strstr(answer, " rc=");
    if (rc && atoi(rc + 4) != 0) return PMI_FAIL;
    return PMI_SUCCESS;
}

/* The value of ` <name>=` in an answer, copied into `out` (at most `cap` -
 * 1 bytes, else an error). */
static int field(const char *answer, const char *name, char *out, size_t cap) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, " %s=", name);
    const char *at = strstr(answer, pattern);
    if (!at) return PMI_FAIL;
    at += strlen(pattern);
    size_t len = strcspn(at, " ");
    if (len + 1 > cap) return PMI_ERR_INVALID_LENGTH;
    memcpy(out, at, len);
    out[len] = '\0';
    return PMI_SUCCESS;
}

static int int_field(const char *answer, const char *name, int *out) {
    char text[32];
    int rc = field(answer, name, text, sizeof text);
    if (rc == PMI_SUCCESS) *out = atoi(text);
    return rc;
}

/* A name or key the wire protocol can carry: not empty, no blanks, no
 * '=', shorter than `max`. */
static int token_ok(const char *s, int max) {
    if (!s || !*s || (int)strlen(s) >= max) return 0;
    for (; *s; s++)
        if (*s == ' ' || *s == '\n' || *s == '\t' || *s == '=') return 0;
    return 1;
}

/* A value: the last word of its line, so it may hold blanks (Open MPI's
 * encoding pads with them), but no newline; at most `max` bytes. */
static int value_ok(const char *s, int max) {
    return s && (int)strlen(s) <= max && !strchr(s, '\n');
}

EXPORT int PMI_Init(int *spawned) {
    char answer[LINE_MAX_BYTES];
    if (spawned) *spawned = 0;
    fd = env_int("PMI_FD", -1);
    if (fd < 0) return PMI_FAIL;
    rank = env_int("PMI_RANK", 0);
    size = env_int("PMI_SIZE", 1);
    int rc = ask("cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init", answer,
                 sizeof answer);
    if (rc != PMI_SUCCESS) goto failed;
    rc = ask("cmd=get_maxes\n", "maxes", answer, sizeof answer);
    if (rc != PMI_SUCCESS) goto failed;
    if (int_field(answer, "kvsname_max", &kvsname_max) != PMI_SUCCESS ||
        int_field(answer, "keylen_max", &keylen_max) != PMI_SUCCESS ||
        int_field(answer, "vallen_max", &vallen_max) != PMI_SUCCESS) {
        rc = PMI_FAIL;
        goto failed;
    }
    return PMI_SUCCESS;
failed:
    fd = -1;
    return rc;
}

EXPORT int PMI_Initialized(int *initialized) {
    if (!initialized) return PMI_ERR_INVALID_ARG;
    *initialized = fd >= 0;
    return PMI_SUCCESS;
}

EXPORT int PMI_Finalize(void) {
    char answer[LINE_MAX_BYTES];
    if (fd < 0) return PMI_SUCCESS;
    int rc = ask("cmd=finalize\n", "finalize_ack", answer, sizeof answer);
    fd = -1;
    return rc;
}

EXPORT int PMI_Abort(int exit_code, const char error_msg[]) {
    char request[LINE_MAX_BYTES];
    /* The message goes without blanks (the protocol splits on them). */
    char msg[256];
    size_t n = 0;
    for (const char *p = error_msg ? error_msg : ""; *p && n + 1 < sizeof msg; p++)
        msg[n++] = (*p == ' ' || *p == '\n' || *p == '=') ? '_' : *p;
    msg[n] = '\0';
    if (fd >= 0) {
        snprintf(request, sizeof request, "cmd=abort exitcode=%d msg=%s\n", exit_code, msg);
        (void)write_all(request, strlen(request));
    }
    _exit(exit_code ? exit_code : 1);
}

EXPORT int PMI_Get_size(int *out) {
    if (!out) return PMI_ERR_INVALID_ARG;
    if (fd < 0) return PMI_ERR_INIT;
    *out = size;
    return PMI_SUCCESS;
}

EXPORT int PMI_Get_rank(int *out) {
    if (!out) return PMI_ERR_INVALID_ARG;
    if (fd < 0) return PMI_ERR_INIT;
    *out = rank;
    return PMI_SUCCESS;
}

EXPORT int PMI_Get_universe_size(int *out) {
    char answer[LINE_MAX_BYTES];
    if (!out) return PMI_ERR_INVALID_ARG;
    int rc = ask("cmd=get_universe_size\n", "universe_size", answer, sizeof answer);
    return rc == PMI_SUCCESS ? int_field(answer, "size", out) : rc;
}

EXPORT int PMI_Get_appnum(int *out) {
    char answer[LINE_MAX_BYTES];
    if (!out) return PMI_ERR_INVALID_ARG;
    int rc = ask("cmd=get_appnum\n", "appnum", answer, sizeof answer);
    return rc == PMI_SUCCESS ? int_field(answer, "appnum", out) : rc;
}

EXPORT int PMI_Barrier(void) {
    char answer[LINE_MAX_BYTES];
    return ask("cmd=barrier_in\n", "barrier_out", answer, sizeof answer);
}

EXPORT int PMI_Get_clique_size(int *out) {
    if (!out) return PMI_ERR_INVALID_ARG;
    if (fd < 0) return PMI_ERR_INIT;
    *out = 1;
    return PMI_SUCCESS;
}

EXPORT int PMI_Get_clique_ranks(int ranks[], int length) {
    if (!ranks || length < 1) return PMI_ERR_INVALID_LENGTH;
    if (fd < 0) return PMI_ERR_INIT;
    ranks[0] = rank;
    return PMI_SUCCESS;
}

EXPORT int PMI_KVS_Get_name_length_max(int *out) {
    if (!out) return PMI_ERR_INVALID_ARG;
    *out = kvsname_max;
    return PMI_SUCCESS;
}

EXPORT int PMI_KVS_Get_key_length_max(int *out) {
    if (!out) return PMI_ERR_INVALID_ARG;
    *out = keylen_max;
    return PMI_SUCCESS;
}

EXPORT int PMI_KVS_Get_value_length_max(int *out) {
    if (!out) return PMI_ERR_INVALID_ARG;
    *out = vallen_max;
    return PMI_SUCCESS;
}

EXPORT int PMI_KVS_Get_my_name(char kvsname[], int length) {
    char answer[LINE_MAX_BYTES];
    if (!kvsname || length < 1) return PMI_ERR_INVALID_LENGTH;
    int rc = ask("cmd=get_my_kvsname\n", "my_kvsname", answer, sizeof answer);
    return rc == PMI_SUCCESS ? field(answer, "kvsname", kvsname, (size_t)length) : rc;
}

EXPORT int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]) {
    char request[LINE_MAX_BYTES], answer[LINE_MAX_BYTES];
    if (!token_ok(kvsname, kvsname_max)) return PMI_ERR_INVALID_ARG;
    if (!token_ok(key, keylen_max)) return PMI_ERR_INVALID_KEY;
    if (!value_ok(value, vallen_max)) return PMI_ERR_INVALID_VAL;
    int n = snprintf(request, sizeof request, "cmd=put kvsname=%s key=%s value=%s\n", kvsname,
                     key, value);
    if (n < 0 || (size_t)n >= sizeof request) return PMI_ERR_INVALID_LENGTH;
    return ask(request, "put_result", answer, sizeof answer);
}

EXPORT int PMI_KVS_Commit(const char kvsname[]) {
    /* Puts reach the server as they are made; the barrier publishes them. */
    (void)kvsname;
    return fd < 0 ? PMI_ERR_INIT : PMI_SUCCESS;
}

EXPORT int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length) {
    char request[LINE_MAX_BYTES], answer[LINE_MAX_BYTES];
    if (!token_ok(kvsname, kvsname_max)) return PMI_ERR_INVALID_ARG;
    if (!token_ok(key, keylen_max)) return PMI_ERR_INVALID_KEY;
    if (!value || length < 1) return PMI_ERR_INVALID_LENGTH;
    int n = snprintf(request, sizeof request, "cmd=get kvsname=%s key=%s\n", kvsname, key);
    if (n < 0 || (size_t)n >= sizeof request) return PMI_ERR_INVALID_LENGTH;
    int rc = ask(request, "get_result", answer, sizeof answer);
    if (rc != PMI_SUCCESS) return rc;
    /* The value is the rest of the line. */
    const char *at = strstr(answer, " value=");
    if (!at) return PMI_FAIL;
    at += strlen(" value=");
    if (strlen(at) + 1 > (size_t)length) return PMI_ERR_INVALID_LENGTH;
    strcpy(value, at);
    return PMI_SUCCESS;
}

/* Not served: a Zorilla job's ranks are started by the grid, not by a
 * rank, and names are not published. */
EXPORT int PMI_Spawn_multiple(void) { return PMI_FAIL; }
EXPORT int PMI_Publish_name(const char service[], const char port[]) {
    (void)service;
    (void)port;
    return PMI_FAIL;
}
EXPORT int PMI_Unpublish_name(const char service[]) {
    (void)service;
    return PMI_FAIL;
}
EXPORT int PMI_Lookup_name(const char service[], char port[]) {
    (void)service;
    (void)port;
    return PMI_FAIL;
}
