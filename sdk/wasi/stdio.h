/* stdio.h for Zorilla's WebAssembly workers: wasi-libc's, and popen and
 * pclose, which wasi-libc leaves out (a worker cannot start processes).
 * libzmpi's popen fails with ENOSYS, as when no shell can be started, so a
 * program that tries to run a helper (a plotter) carries on without it
 * instead of failing to build. */
#include_next <stdio.h>

#ifndef ZMPI_WASI_STDIO_H
#define ZMPI_WASI_STDIO_H
#ifdef __cplusplus
extern "C" {
#endif
FILE *popen(const char *command, const char *mode);
int pclose(FILE *stream);
#ifdef __cplusplus
}
#endif
#endif
