/* blas.c — CBLAS through dlopen (blas.h). */
#include "compress/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/dl_symbols.h"
#include "common/result.h"

static struct blas_api api;
static char api_error[512]; /* empty once loaded */
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

/* Fills api from lib; 0, naming the missing function in api_error, when lib lacks one. */
static int take_functions(void* lib, const char* name) {
  const struct dl_symbol syms[] = {
      {"cblas_sgemm", (void*)&api.sgemm}, {"cblas_snrm2", (void*)&api.snrm2}, {"cblas_sdot", (void*)&api.sdot},
      {"cblas_saxpy", (void*)&api.saxpy}, {"cblas_sscal", (void*)&api.sscal},
  };
  const char* missing = dl_symbols_resolve(lib, syms, sizeof syms / sizeof syms[0]);
  if (missing == NULL) return 1;
  size_t at = strlen(api_error);
  snprintf(api_error + at, sizeof api_error - at, " %s: no %s;", name, missing);
  return 0;
}

static void load(void) {
  /* A BLAS the process has already (numpy's, torch's): no second thread pool. */
  if (dlsym(RTLD_DEFAULT, "cblas_sgemm") != NULL && take_functions(RTLD_DEFAULT, "the process")) {
    api_error[0] = '\0';
    return;
  }
  static const char* const names[] = {"libopenblas.so.0", "libcblas.so.3", "libblas.so.3"};
  snprintf(api_error, sizeof api_error, "powersgd needs a CBLAS library, and none could be loaded:");
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void* lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      size_t at = strlen(api_error);
      snprintf(api_error + at, sizeof api_error - at, " %s;", dlerror());
      continue;
    }
    if (take_functions(lib, names[i])) {
      api_error[0] = '\0';
      return; /* kept loaded for the process's life */
    }
    dlclose(lib);
  }
  size_t at = strlen(api_error);
  snprintf(api_error + at, sizeof api_error - at, " install OpenBLAS (Debian: libopenblas0)");
}

gcclResult_t blas_get(const struct blas_api** out) {
  pthread_once(&api_once, load);
  *out = NULL;
  if (api_error[0]) return err_set(gcclSystemError, "%s", api_error);
  *out = &api;
  return gcclSuccess;
}
