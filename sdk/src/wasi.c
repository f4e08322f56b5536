/*
 * wasi.c — the few C library calls MPI programs make that wasi-libc leaves
 * out, declared by the headers in sdk/wasi (zmpicc puts them on the include
 * path). A WebAssembly worker cannot start processes, so those calls fail
 * as they do on a system without a shell; nothing here is MPI.
 */
#ifdef __wasi__
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

FILE *popen(const char *command, const char *mode)
{
    (void)command;
    (void)mode;
    errno = ENOSYS;
    return NULL;
}

int pclose(FILE *stream)
{
    (void)stream;
    errno = ECHILD;
    return -1;
}

int system(const char *command)
{
    if (!command)
        return 0; /* no shell */
    errno = ENOSYS;
    return -1;
}

int getpagesize(void) { return (int)sysconf(_SC_PAGESIZE); }
#else
typedef int zmpi_not_wasi; /* native test builds use the host's C library */
#endif
