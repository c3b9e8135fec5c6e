/* codec_math.h — the arithmetic that defines frame bytes, written once for the
 * CPU codecs (codec_*.c) and the CUDA kernels (src/cuda/), so that a frame
 * encoded on either side decodes to the same bits on the other. Everything here
 * is fp32 with round to nearest even and no FMA contraction (the library builds
 * with -ffp-contract=off, the kernels with --fmad=false). Formulas: the comment
 * at the top of each codec's file. */
#ifndef GCCL_COMPRESS_CODEC_MATH_H
#define GCCL_COMPRESS_CODEC_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/float_bits.h"
#include "common/hd.h"
#include "compress/rng.h"

/* ---- the canonical sums (codec_util.h: canon_sum_abs, canon_sum_sq) ----------- */

/* Lanes of a canonical sum: element i goes to lane i % CANON_LANES. */
#define CANON_LANES 16

/* lane[j] += lane[j + w] for w = 8, 4, 2, 1; returns lane[0]. */
static inline GCCL_HD float canon_lanes_combine(float lane[CANON_LANES]) {
  for (int w = CANON_LANES / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) lane[j] += lane[j + w];
  return lane[0];
}

/* ---- codes packed LSB first (uniform, qsgd) ------------------------------------- */

/* Code j of codes of `bits` bits each (bits <= 9): bits [j * bits, (j + 1) * bits),
 * bit t being bit t % 8 of byte t / 8. */
static inline GCCL_HD uint32_t packed_code_get(const unsigned char* codes, size_t j, unsigned bits) {
  size_t bit = j * bits;
  size_t o = bit / 8;
  unsigned s = (unsigned)(bit % 8);
  uint32_t v = (uint32_t)codes[o] >> s;
  if (s + bits > 8) v |= (uint32_t)codes[o + 1] << (8 - s); /* s + bits <= 16; inside the bucket's codes */
  return v & ((1u << bits) - 1);
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

/* The u of a bucket's element j under stochastic rounding (base: the global index
 * of the bucket's element 0). In each group of 16, elements k and k + 8 take the
 * low and high 16 bits of one draw, so one hash serves two elements and an AVX2
 * lane's 8 draws cover 16 elements without a shuffle. */
static inline GCCL_HD float uq_uniform(uint64_t key, uint64_t base, size_t j) {
  return rng_uniform16(key, base + (j & ~(size_t)15) + (j & 7), (unsigned)(j >> 3) & 1);
}

/* The code of finite v; u is 0.5f (round to nearest) or uq_uniform (stochastic). */
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
  return packed_code_get(codes, j, bits);
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

/* ---- qsgd (codec_qsgd.c) ---------------------------------------------------------- */

/* The quantizer of one bucket: s = 2^b - 1 levels of step norm / s; codes are
 * w = b + 1 bits, the level l and a sign bit above it. */
struct qs_bucket {
  float step, inv, sf;
  unsigned b;
};

/* The norm of a bucket from its canonical sum of squares, correctly rounded on
 * both sides: on the GPU whatever -prec-sqrt says. */
static inline GCCL_HD float qs_norm(float sum_sq) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(sum_sq);
#else
  return sqrtf(sum_sq);
#endif
}

/* Fills *p for a bucket of norm `norm`; returns 0 if norm or s * step is not
 * finite (the bucket cannot be sent). */
static inline GCCL_HD int qs_bucket_make(float norm, unsigned bits, struct qs_bucket* p) {
  float sf = (float)((1u << bits) - 1);
  float step = norm / sf;
  float inv = norm > 0.0f ? sf / norm : 0.0f;
  p->step = step;
  p->inv = fb_finite(inv) ? inv : 0.0f;
  p->sf = sf;
  p->b = bits;
  return fb_finite(norm) && fb_finite(sf * step);
}

/* The code of finite v; u = rng_uniform of its index (QSGD always rounds
 * stochastically). A level 0 never carries the sign, so -0.0 codes as 0. */
static inline GCCL_HD uint32_t qs_quant(float v, const struct qs_bucket* p, float u) {
  float t = fabsf(v) * p->inv + u;
  t = t < p->sf ? t : p->sf; /* t >= 0 and never NaN */
  uint32_t l = (uint32_t)t;
  uint32_t neg = l != 0 && (fb_bits(v) >> 31);
  return l | neg << p->b;
}

static inline GCCL_HD float qs_dequant(uint32_t code, const struct qs_bucket* p) {
  float d = (float)(code & ((1u << p->b) - 1)) * p->step;
  return (code >> p->b) ? -d : d;
}

/* Writes the codes c[0, r) (r <= 8) of w <= 9 bits as ceil(r * w / 8) bytes at out
 * (c[k] = 0 for k >= r, so pad bits are zero). A group of 8 codes is w bytes, so
 * group g of a bucket starts at byte g * w of its codes. */
static inline GCCL_HD void qs_put_group(const uint32_t c[8], unsigned w, unsigned char* out, size_t r) {
  uint64_t lo = 0;
  uint32_t hi = 0;
  for (unsigned k = 0; k < 8; k++) {
    unsigned sh = k * w; /* <= 63 */
    lo |= (uint64_t)c[k] << sh;
    if (sh + w > 64) hi = c[k] >> (64 - sh);
  }
  size_t nb = (r * w + 7) / 8;
  for (size_t i = 0; i < nb; i++) out[i] = (unsigned char)(i < 8 ? lo >> (8 * i) : hi);
}

/* ---- terngrad (codec_terngrad.c) -------------------------------------------------- */

/* Codes of 2 bits: 0 -> +0.0f, 1 -> +scale, 2 -> -scale (3 is illegal). */
enum { TERN_ZERO = 0, TERN_POS = 1, TERN_NEG = 2 };

/* The code of finite v in a bucket of scale max |v|: +-scale with probability
 * |v| / scale, u = rng_uniform of its index. */
static inline GCCL_HD unsigned tern_code(float v, float scale, float u) {
  if (u * scale < fabsf(v)) return (fb_bits(v) >> 31) ? TERN_NEG : TERN_POS;
  return TERN_ZERO;
}

/* The decoded value of a legal code. */
static inline GCCL_HD float tern_value(unsigned c, float scale) {
  return c == TERN_ZERO ? 0.0f : c == TERN_NEG ? -scale : scale;
}

/* Code j of a bucket's codes (four per byte, LSB first). */
static inline GCCL_HD unsigned tern_get_code(const unsigned char* codes, size_t j) {
  return (codes[j / 4] >> (2 * (j % 4))) & 3u;
}

#endif
