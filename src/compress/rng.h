/* rng.h — the counter-based generator behind stochastic rounding and random-k.
 *
 * A random number is a pure function of (key, index): no state, so any element
 * can be drawn in any order, by any thread, on CPU or GPU, with the same result.
 * The key mixes (seed, call number, rank); random-k uses RNG_SHARED in place of
 * the rank so that every rank draws the same indices. Only 32-bit integer
 * multiplies, xors and shifts per element, so AVX2 and CUDA compute it cheaply
 * and bit-identically. Not cryptographic; good enough to make rounding unbiased.
 */
#ifndef GCCL_COMPRESS_RNG_H
#define GCCL_COMPRESS_RNG_H

#include <stdint.h>

#include "common/hd.h"

/* Stands for "every rank" in rng_key, so shared draws never collide with a rank's. */
#define RNG_SHARED UINT64_C(0xFFFFFFFFFFFFFFFF)

/* SplitMix64's finaliser (Steele et al. 2014): a bijection with full avalanche. */
static inline GCCL_HD uint64_t rng_mix64(uint64_t z) {
  z += UINT64_C(0x9E3779B97F4A7C15);
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* The key of one call: distinct (seed, call, rank) give unrelated streams. */
static inline GCCL_HD uint64_t rng_key(uint64_t seed, uint64_t call, uint64_t rank) {
  return rng_mix64(rng_mix64(rng_mix64(seed) ^ call) ^ rank);
}

/* MurmurHash3's 32-bit finaliser: a bijection on 32 bits. */
static inline GCCL_HD uint32_t rng_fmix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

/* 32 random bits for element `index` under `key`. Two rounds, each keyed by one
 * half of the key; the index's high half (tensors beyond 2^32 elements) is folded
 * into the second round. */
static inline GCCL_HD uint32_t rng_u32(uint64_t key, uint64_t index) {
  uint32_t x = rng_fmix32((uint32_t)index ^ (uint32_t)key);
  x ^= (uint32_t)(key >> 32) + (uint32_t)(index >> 32) * 0x9E3779B1u;
  return rng_fmix32(x);
}

/* A uniform float in [0, 1) with 24 random bits: exactly representable, so
 * CPU and GPU agree. */
static inline GCCL_HD float rng_uniform(uint64_t key, uint64_t index) {
  return (float)(rng_u32(key, index) >> 8) * 0x1p-24f;
}

/* A uniform float in [0, 1) with 16 random bits: half 0 is the low 16 bits of
 * rng_u32(key, index), half 1 the high 16. One draw serves two elements, and the
 * draw (four 32-bit multiplies) was most of uniform's stochastic encode time; for
 * codes of at most 8 bits, 16 bits keep the rounding bias below 2^-16 of a step.
 * Exactly representable, so CPU and GPU agree. */
static inline GCCL_HD float rng_uniform16(uint64_t key, uint64_t index, unsigned half) {
  return (float)((rng_u32(key, index) >> (16 * half)) & 0xFFFFu) * 0x1p-16f;
}

#endif
