/* codec_math.h — the arithmetic that defines frame bytes, written once for the
 * CPU codecs (codec_*.c) and the CUDA kernels (src/cuda/), so that a frame
 * encoded on either side decodes to the same bits on the other. Everything here
 * is fp32 with round to nearest even and no FMA contraction (the library builds
 * with -ffp-contract=off, the kernels with --fmad=false). Formulas: the comment
 * at the top of each codec's file. */
#ifndef GCCL_COMPRESS_CODEC_MATH_H
#define GCCL_COMPRESS_CODEC_MATH_H

#include <stddef.h>
#include <stdint.h>

#include "common/float_bits.h"
#include "common/hd.h"

/* ---- the canonical sums (codec_util.h: canon_sum_abs, canon_sum_sq) ----------- */

/* Lanes of a canonical sum: element i goes to lane i % CANON_LANES. */
#define CANON_LANES 16

/* lane[j] += lane[j + w] for w = 8, 4, 2, 1; returns lane[0]. */
static inline GCCL_HD float canon_lanes_combine(float lane[CANON_LANES]) {
  for (int w = CANON_LANES / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) lane[j] += lane[j + w];
  return lane[0];
}

/* ---- uniform (codec_uniform.c) -------------------------------------------------- */

/* The quantizer of one bucket. */
struct uq_bucket {
  float mn, step, inv, lf;
};

/* Fills *p for a bucket with finite min <= max; returns 0 if its range overflows
 * (r or min + L * step not finite: the bucket cannot be sent). */
static inline GCCL_HD int uq_bucket_make(float mn, float mx, unsigned bits, struct uq_bucket* p) {
  float lf = (float)((1u << bits) - 1);
  float r = mx - mn;
  float step = r / lf;
  float inv = r > 0.0f ? lf / r : 0.0f;
  p->mn = mn;
  p->step = step;
  p->inv = fb_finite(inv) ? inv : 0.0f;
  p->lf = lf;
  return fb_finite(r) && fb_finite(mn + lf * step);
}

/* The code of finite v; u is 0.5f (round to nearest) or rng_uniform (stochastic). */
static inline GCCL_HD uint32_t uq_quant(float v, const struct uq_bucket* p, float u) {
  float t = (v - p->mn) * p->inv + u;
  t = t > 0.0f ? t : 0.0f; /* t is never NaN: v - mn finite, inv finite */
  t = t < p->lf ? t : p->lf;
  return (uint32_t)t;
}

static inline GCCL_HD float uq_dequant(uint32_t q, const struct uq_bucket* p) {
  return p->mn + (float)q * p->step;
}

/* Code j of a bucket's codes (bits per code, LSB first). */
static inline GCCL_HD uint32_t uq_get_code(const unsigned char* codes, size_t j, unsigned bits) {
  size_t bit = j * bits;
  size_t o = bit / 8;
  unsigned s = (unsigned)(bit % 8);
  uint32_t v = (uint32_t)codes[o] >> s;
  if (s + bits > 8) v |= (uint32_t)codes[o + 1] << (8 - s); /* stays inside the bucket's codes */
  return v & ((1u << bits) - 1);
}

/* ---- sign (codec_sign.c) ---------------------------------------------------------- */

/* The bucket's scale: mean |v| over its nf finite elements, sum their canonical sum. */
static inline GCCL_HD float sign_scale(float sum, size_t nf) {
  return nf ? sum / (float)nf : 0.0f;
}

/* The code of finite v (its sign bit: -0.0 codes 1) and its decoded value. */
static inline GCCL_HD uint32_t sign_bit(float v) {
  return fb_bits(v) >> 31;
}
static inline GCCL_HD float sign_dequant(uint32_t bit, float scale) {
  return bit ? -scale : scale;
}

#endif
