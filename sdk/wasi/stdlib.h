/* stdlib.h for Zorilla's WebAssembly workers: wasi-libc's, with the wait
 * status macros it leaves out (there are no child processes; system() from
 * libzmpi fails with ENOSYS, as when no shell can be started). */
#include_next <stdlib.h>

#ifndef ZMPI_WASI_STDLIB_H
#define ZMPI_WASI_STDLIB_H
#ifndef WEXITSTATUS
#define WEXITSTATUS(s) (((s) & 0xff00) >> 8)
#define WTERMSIG(s) ((s) & 0x7f)
#define WIFEXITED(s) (!WTERMSIG(s))
#define WIFSIGNALED(s) (((s) & 0xffff) - 1U < 0xffu)
#endif
#endif
