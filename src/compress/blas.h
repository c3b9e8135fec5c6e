/* blas.h — the CBLAS functions of powersgd's products, loaded at the first
 * powersgd compressor (blas.c).
 *
 * Linked instead, OpenBLAS started its thread pool when libgccl was loaded:
 * every process that loaded gccl, each rank of an MPI program under the
 * interposer included, got a thread per core, each spinning on sched_yield for
 * about 0.1 s (0.11 s of CPU with 2 cores), whether or not it ever used powersgd.
 * Loaded on first use, only powersgd pays that, and a build needs no BLAS. */
#ifndef GCCL_COMPRESS_BLAS_H
#define GCCL_COMPRESS_BLAS_H

#include "gccl.h"

/* CBLAS's enum values (cblas.h's CBLAS_ORDER and CBLAS_TRANSPOSE, passed as int). */
enum { BLAS_ROW_MAJOR = 101, BLAS_NO_TRANS = 111, BLAS_TRANS = 112 };

struct blas_api {
  void (*sgemm)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc);
  float (*snrm2)(int n, const float* x, int incx);
  float (*sdot)(int n, const float* x, int incx, const float* y, int incy);
  void (*saxpy)(int n, float alpha, const float* x, int incx, float* y, int incy);
  void (*sscal)(int n, float alpha, float* x, int incx);
};

/* The functions in *out; the first call loads them, from the CBLAS the process
 * has already or else the first library of libopenblas.so.0, libcblas.so.3,
 * libblas.so.3 that has them. Any thread. gcclSystemError, saying what was
 * tried, when none has. */
gcclResult_t blas_get(const struct blas_api** out);

#endif
