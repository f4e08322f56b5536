/* unistd.h for Zorilla's WebAssembly workers: wasi-libc's, and
 * getpagesize(), which it leaves out (libzmpi's returns WebAssembly's page
 * size, as sysconf(_SC_PAGESIZE) does). A worker cannot start processes:
 * fork() is a compile error that says so. */
#include_next <unistd.h>

#ifndef ZMPI_WASI_UNISTD_H
#define ZMPI_WASI_UNISTD_H
#ifdef __cplusplus
extern "C" {
#endif
int getpagesize(void);
__attribute__((unavailable("a Zorilla worker (WebAssembly) cannot start processes")))
pid_t fork(void);
#ifdef __cplusplus
}
#endif
#endif
