/* randk.h — randk's shared index set, for collectives that regenerate it without a frame. */
#ifndef GCCL_COMPRESS_RANDK_H
#define GCCL_COMPRESS_RANDK_H

#include <stddef.h>
#include <stdint.h>

/* The j-th index (j < k <= n) randk keeps of n elements under key (the frame's
 * rng_key): one uniform draw in stratum j = [floor(j n / k), floor((j+1) n / k)),
 * so indices strictly increase with j. A pure function: every rank, the CPU and
 * the GPU get the same index. Formula in codec_randk.c. */
size_t randk_index(uint64_t key, size_t n, size_t k, size_t j);

#endif
