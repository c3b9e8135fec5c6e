/* dl_symbols.c — function tables from dlsym (dl_symbols.h). */
#include "common/dl_symbols.h"

#include <dlfcn.h>
#include <string.h>

const char* dl_symbols_resolve(void* lib, const struct dl_symbol* syms, size_t n) {
  for (size_t i = 0; i < n; i++) {
    void* f = dlsym(lib, syms[i].name);
    if (f == NULL) return syms[i].name;
    memcpy(syms[i].slot, &f, sizeof f); /* POSIX: function pointers are object-pointer sized */
  }
  return NULL;
}
