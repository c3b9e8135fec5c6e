/* randk.h — randk's shared index set, for collectives that regenerate it without a frame. */
#ifndef GCCL_COMPRESS_RANDK_H
#define GCCL_COMPRESS_RANDK_H

#include <stddef.h>
#include <stdint.h>

#include "common/hd.h"
#include "compress/rng.h"

__extension__ typedef unsigned __int128 randk_u128;

/* The index drawn in stratum j = [lo, lo + span) under key (formula in codec_randk.c). */
static inline GCCL_HD size_t randk_draw(uint64_t key, size_t j, size_t lo, size_t span) {
  uint64_t r = rng_u32(key, j);
  if (span <= (UINT64_C(1) << 32)) return lo + (size_t)((r * span) >> 32);
  r = r << 32 | rng_u32(key, UINT64_MAX - (uint64_t)j);
  return lo + (size_t)(((randk_u128)r * span) >> 64);
}

/* The j-th index (j < k <= n) randk keeps of n elements under key (the frame's
 * rng_key): one uniform draw in stratum j = [floor(j n / k), floor((j+1) n / k)),
 * so indices strictly increase with j. A pure function: every rank, the CPU and
 * the GPU get the same index. */
static inline GCCL_HD size_t randk_index(uint64_t key, size_t n, size_t k, size_t j) {
  size_t lo = (size_t)((randk_u128)j * n / k), hi = (size_t)((randk_u128)(j + 1) * n / k);
  return randk_draw(key, j, lo, hi - lo);
}

#endif
