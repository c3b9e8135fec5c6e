/* float_bits.h — bit casts and the exact fp16/bf16 <-> fp32 conversions, shared by
 * the CPU code (dtype.c, the codecs) and the CUDA kernels.
 *
 * The conversions are integer-only, so they are exact whatever the FPU's rounding
 * mode or flush-to-zero setting, on a CPU or a GPU. A NaN comes out quiet and
 * keeps the top bits of its payload, as x86 F16C and ARM FCVT do (CUDA's
 * __float2half returns one canonical NaN instead, which is why the kernels do
 * not use it). */
#ifndef GCCL_COMMON_FLOAT_BITS_H
#define GCCL_COMMON_FLOAT_BITS_H

#include <stdint.h>
#include <string.h>

#include "common/hd.h"

/* Bit casts through memcpy: defined behaviour, compiled to a register move. */
static inline GCCL_HD uint32_t fb_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline GCCL_HD float fb_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* 1 when x is neither inf nor NaN (an exponent test: no FP exceptions raised,
 * and it cannot be optimised away the way x == x can under fast-math). */
static inline GCCL_HD int fb_finite(float x) {
  return (fb_bits(x) & 0x7F800000u) != 0x7F800000u;
}

static inline GCCL_HD float fb_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) /* inf, or NaN made quiet */
    return fb_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0));
  if (exp == 0) {
    if (mant == 0) return fb_float(sign);
    /* Subnormal mant * 2^-24: shift the leading one up to the implicit bit. */
    exp = 127 - 14;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      exp--;
    }
    return fb_float(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
  }
  return fb_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

/* Rounds q + rem/2^shift to the nearest integer, ties to even (0 < shift < 32). */
static inline GCCL_HD uint32_t fb_round_shift_rne(uint32_t m, unsigned shift) {
  uint32_t q = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  return q + (rem > half || (rem == half && (q & 1)));
}

static inline GCCL_HD uint16_t fb_float_to_half(float f) {
  uint32_t x = fb_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: quiet, top payload bits kept */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) /* >= 65520 = 65504 + half an ulp: rounds to inf (or is inf) */
    return (uint16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) /* >= 2^-14: normal half; a mantissa carry bumps the exponent */
    return (uint16_t)(sign | fb_round_shift_rne(ax - ((127u - 15u) << 23), 13));
  if (ax <= 0x33000000u) /* <= 2^-25, half the smallest subnormal: ties to even, 0 */
    return sign;
  /* Subnormal half: count units of 2^-24. The value is m * 2^(e-150), so the
   * count is m >> (126 - e), 14 <= 126 - e <= 24. Rounding up to 0x400 gives the
   * smallest normal, which is the right encoding. */
  uint32_t e = ax >> 23;
  uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  return (uint16_t)(sign | fb_round_shift_rne(m, 126 - e));
}

static inline GCCL_HD float fb_bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  if ((x & 0x7fffffffu) > 0x7f800000u) x |= 0x00400000u; /* NaN made quiet */
  return fb_float(x);
}

static inline GCCL_HD uint16_t fb_float_to_bf16(float f) {
  uint32_t x = fb_bits(f);
  /* A NaN whose payload lives in the low 16 bits would truncate to inf. */
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
  /* Round to nearest even on bit 16; a carry into the exponent gives inf correctly. */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

#endif
