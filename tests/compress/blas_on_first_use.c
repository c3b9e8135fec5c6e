/* blas_on_first_use.c — loading libgccl loads no BLAS and starts no thread; the
 * first powersgd compressor loads CBLAS (src/compress/blas.h). A process of its
 * own: gccl_tests' other cases make powersgd compressors in the same process.
 * Linked, OpenBLAS had started one spinning thread per core at load time. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "gccl.h"

static const char* const blas_names[] = {"libopenblas.so.0", "libcblas.so.3", "libblas.so.3"};

static int blas_loaded(void) {
  for (size_t i = 0; i < sizeof blas_names / sizeof blas_names[0]; i++) {
    void* lib = dlopen(blas_names[i], RTLD_NOW | RTLD_NOLOAD);
    if (lib) {
      dlclose(lib); /* drops only the reference NOLOAD took */
      return 1;
    }
  }
  return dlsym(RTLD_DEFAULT, "cblas_sgemm") != NULL;
}

static int threads(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static int failed = 0;
static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s\n", what);
    failed = 1;
  }
}

int main(void) {
  int version = 0;
  expect(gcclGetVersion(&version) == gcclSuccess, "gcclGetVersion");
  expect(!blas_loaded(), "no BLAS is loaded before a powersgd compressor");
  expect(threads() == 1, "the process has one thread before a powersgd compressor");

  gcclCompressor_t c = NULL;
  gcclResult_t res = gcclCompressorCreate(&c, "powersgd:rank=2", 1000, gcclFloat32);
  if (res != gcclSuccess) fprintf(stderr, "gcclCompressorCreate: %s\n", gcclGetLastError(NULL));
  expect(res == gcclSuccess, "a powersgd compressor is made");
  expect(blas_loaded(), "the powersgd compressor loaded a CBLAS library");
  if (c) expect(gcclCompressorDestroy(c) == gcclSuccess, "gcclCompressorDestroy");
  if (!failed) printf("blas_on_first_use: passed\n");
  return failed;
}
