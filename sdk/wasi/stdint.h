/* stdint.h for Zorilla's WebAssembly workers: wasi-libc's, and glibc's
 * internal names for the exact-width types (__int8_t...), which programs
 * written on Linux sometimes use. */
#include_next <stdint.h>

#ifndef ZMPI_WASI_STDINT_H
#define ZMPI_WASI_STDINT_H
typedef int8_t __int8_t;
typedef int16_t __int16_t;
typedef int32_t __int32_t;
typedef int64_t __int64_t;
typedef uint8_t __uint8_t;
typedef uint16_t __uint16_t;
typedef uint32_t __uint32_t;
typedef uint64_t __uint64_t;
#endif
