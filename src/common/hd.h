/* hd.h — GCCL_HD marks a small inline function that CPU code and the CUDA kernels
 * (src/cuda/) both compile, so the arithmetic that defines frame bytes is written
 * once and computes the same bits on either side. */
#ifndef GCCL_COMMON_HD_H
#define GCCL_COMMON_HD_H

#ifdef __CUDACC__
#define GCCL_HD __host__ __device__
#else
#define GCCL_HD
#endif

#endif
