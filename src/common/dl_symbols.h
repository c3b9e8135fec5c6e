/* dl_symbols.h — fills a table of function pointers from a library opened with
 * dlopen (dl_symbols.c); the NCCL and CBLAS tables use it. */
#ifndef GCCL_COMMON_DL_SYMBOLS_H
#define GCCL_COMMON_DL_SYMBOLS_H

#include <stddef.h>

struct dl_symbol {
  const char* name;
  void* slot; /* the address of a function pointer field */
};

/* Looks up every name in lib (a dlopen handle or RTLD_DEFAULT) and stores it in
 * its slot. Returns NULL when all were found, else the first missing name (the
 * slots before it are filled). */
const char* dl_symbols_resolve(void* lib, const struct dl_symbol* syms, size_t n);

#endif
