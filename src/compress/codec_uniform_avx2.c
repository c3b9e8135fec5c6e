/* codec_uniform_avx2.c — uniform's AVX2 kernels (bucket_avx2.h), bit-identical to
 * the scalar paths of codec_uniform.c. */
#include "compress/bucket_avx2.h"

#ifdef BUCKET_HAVE_X86

/* uq_minmax_avx2's running minima, maxima and max |x| bits, in two interleaved runs. */
struct uq_minmax {
  __m256 lo0, hi0, lo1, hi1;
  __m256i e0, e1;
};

/* One step: a into run 0, b into run 1. */
BUCKET_AVX2_INLINE void uq_minmax16(struct uq_minmax* r, __m256 a, __m256 b) {
  const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
  r->lo0 = _mm256_min_ps(r->lo0, a);
  r->hi0 = _mm256_max_ps(r->hi0, a);
  r->lo1 = _mm256_min_ps(r->lo1, b);
  r->hi1 = _mm256_max_ps(r->hi1, b);
  r->e0 = _mm256_max_epu32(r->e0, _mm256_and_si256(_mm256_castps_si256(a), absmask));
  r->e1 = _mm256_max_epu32(r->e1, _mm256_and_si256(_mm256_castps_si256(b), absmask));
}

/* The finite test rides along: max of |x| as integers. */
BUCKET_AVX2 int uq_minmax_avx2(const float* x, size_t m, float* mn, float* mx) {
  __m256 x0 = _mm256_loadu_ps(x);
  __m256i a0 = _mm256_and_si256(_mm256_castps_si256(x0), _mm256_set1_epi32(0x7FFFFFFF));
  struct uq_minmax r = {x0, x0, x0, x0, a0, a0};
  size_t j = 8;
  for (; j + 16 <= m; j += 16) uq_minmax16(&r, _mm256_loadu_ps(x + j), _mm256_loadu_ps(x + j + 8));
  if (j < m) /* the last 8 (overlapping what was seen: min and max do not mind) */
    uq_minmax16(&r, _mm256_loadu_ps(x + m - 8), _mm256_loadu_ps(x + (j + 8 <= m ? j : m - 8)));
  __m256 lo = _mm256_min_ps(r.lo0, r.lo1), hi = _mm256_max_ps(r.hi0, r.hi1);
  __m256i e = _mm256_max_epu32(r.e0, r.e1);
  __m128 l4 = _mm_min_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1));
  __m128 h4 = _mm_max_ps(_mm256_castps256_ps128(hi), _mm256_extractf128_ps(hi, 1));
  __m128i e4 = _mm_max_epu32(_mm256_castsi256_si128(e), _mm256_extracti128_si256(e, 1));
  l4 = _mm_min_ps(l4, _mm_movehl_ps(l4, l4));
  h4 = _mm_max_ps(h4, _mm_movehl_ps(h4, h4));
  e4 = _mm_max_epu32(e4, _mm_unpackhi_epi64(e4, e4));
  l4 = _mm_min_ss(l4, _mm_shuffle_ps(l4, l4, 1));
  h4 = _mm_max_ss(h4, _mm_shuffle_ps(h4, h4, 1));
  e4 = _mm_max_epu32(e4, _mm_shuffle_epi32(e4, 1));
  *mn = _mm_cvtss_f32(l4);
  *mx = _mm_cvtss_f32(h4);
  return (uint32_t)_mm_cvtsi128_si32(e4) < 0x7F800000u;
}

/* ---- encode -------------------------------------------------------------------------- */

/* The bucket's constants in registers, and the stochastic rounding stream (draw
 * d covers elements d % 8 and d % 8 + 8 of a group of 16: uq_uniform). */
struct uq_lanes {
  __m256 mn, inv, lf, step;
  struct bucket_draws r;
};

/* The u of the next 16 elements (rng_uniform16): 8 draws, element i < 8 taking
 * the low half of draw i and element i + 8 the high half; elements 0-7 in *lo,
 * 8-15 in *hi. */
BUCKET_AVX2_INLINE void uq_u16(struct uq_lanes* c, __m256* lo, __m256* hi) {
  __m256i r = bucket_rng8(c->r.idx, &c->r);
  c->r.idx = _mm256_add_epi32(c->r.idx, _mm256_set1_epi32(16));
  __m256i a = _mm256_and_si256(r, _mm256_set1_epi32(0xFFFF)), b = _mm256_srli_epi32(r, 16);
  *lo = _mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(0x1p-16f));
  *hi = _mm256_mul_ps(_mm256_cvtepi32_ps(b), _mm256_set1_ps(0x1p-16f));
}

/* Codes of v[j, j + 8) as int32 lanes, rounded with u; with resid, stores
 * v - dec at resid + j. */
BUCKET_AVX2_INLINE __m256i uq_q8(const float* v, size_t j, const struct uq_lanes* c, __m256 u, float* resid) {
  __m256 x = _mm256_loadu_ps(v + j);
  __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(x, c->mn), c->inv), u);
  /* max_ps(t, 0) is t > 0 ? t : 0 and min_ps(t, L) is t < L ? t : L, as in uq_quant. */
  t = _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), c->lf);
  __m256i q = _mm256_cvttps_epi32(t);
  if (resid)
    _mm256_storeu_ps(resid + j, _mm256_sub_ps(x, _mm256_add_ps(c->mn, _mm256_mul_ps(_mm256_cvtepi32_ps(q), c->step))));
  return q;
}

/* The body of uq_codes_avx2: always inlined so that `stochastic` and whether
 * resid is NULL are constants in each copy. */
BUCKET_AVX2_INLINE size_t uq_codes_body(const float* v, size_t m, uint64_t g0, const struct uq_bucket* p, unsigned bits,
                                        uint64_t key, int stochastic, unsigned char* codes, const unsigned char* end,
                                        float* resid) {
  struct uq_lanes c;
  c.mn = _mm256_set1_ps(p->mn);
  c.inv = _mm256_set1_ps(p->inv);
  c.lf = _mm256_set1_ps(p->lf);
  c.step = _mm256_set1_ps(p->step);
  bucket_draws_init(&c.r, key, g0);
  const __m256 half = _mm256_set1_ps(0.5f);
  size_t j = 0;
  if (bits == 8 || bits == 4 || bits == 2 || bits == 1) {
    for (; j + 32 <= m; j += 32) {
      __m256 u0 = half, u1 = half, u2 = half, u3 = half;
      if (stochastic) {
        uq_u16(&c, &u0, &u1);
        uq_u16(&c, &u2, &u3);
      }
      __m256i q0 = uq_q8(v, j, &c, u0, resid), q1 = uq_q8(v, j + 8, &c, u1, resid);
      __m256i q2 = uq_q8(v, j + 16, &c, u2, resid), q3 = uq_q8(v, j + 24, &c, u3, resid);
      bucket_pack32(q0, q1, q2, q3, bits, codes + j / 8 * bits);
    }
  }
  __m256i sh_lo, sh_hi;
  bucket_put8_shifts(bits, &sh_lo, &sh_hi);
  __m256 u[2] = {half, half}; /* j is a multiple of 16 when a draw is due */
  for (; j + 8 <= m; j += 8) {
    if (stochastic && j % 16 == 0) uq_u16(&c, &u[0], &u[1]);
    bucket_put8(uq_q8(v, j, &c, u[j / 8 % 2], resid), sh_lo, sh_hi, bits, 8, codes + j / 8 * bits, end);
  }
  return j;
}

/* The four copies: rounding x error feedback. */
#define UQ_CODES_AVX2(name, stochastic, with_resid)                                                               \
  BUCKET_AVX2 static size_t name(const float* v, size_t m, uint64_t g0, const struct uq_bucket* p, unsigned bits, \
                                 uint64_t key, unsigned char* codes, const unsigned char* end, float* resid) {    \
    return uq_codes_body(v, m, g0, p, bits, key, stochastic, codes, end, with_resid ? resid : NULL);              \
  }
UQ_CODES_AVX2(uq_codes_nearest, 0, 0)
UQ_CODES_AVX2(uq_codes_nearest_ef, 0, 1)
UQ_CODES_AVX2(uq_codes_stochastic, 1, 0)
UQ_CODES_AVX2(uq_codes_stochastic_ef, 1, 1)

size_t uq_codes_avx2(const float* v, size_t m, uint64_t g0, const struct uq_bucket* p, unsigned bits, uint64_t key,
                     int stochastic, unsigned char* codes, const unsigned char* end, float* resid) {
  if (stochastic)
    return (resid ? uq_codes_stochastic_ef : uq_codes_stochastic)(v, m, g0, p, bits, key, codes, end, resid);
  return (resid ? uq_codes_nearest_ef : uq_codes_nearest)(v, m, g0, p, bits, 0, codes, end, resid);
}

/* ---- decode -------------------------------------------------------------------------- */

/* The c codes at codes into out, as mode says. */
BUCKET_AVX2_INLINE void uq_expand_body(const unsigned char* codes, const unsigned char* end, size_t c, unsigned bits,
                                       const struct uq_bucket* p, float* out, enum bucket_expand mode) {
  struct bucket_unpack u;
  bucket_unpack_make(bits, &u);
  const __m256 mn = _mm256_set1_ps(p->mn), step = _mm256_set1_ps(p->step);
  int stream = bucket_streams(out, mode);
  size_t j = 0;
  for (; j + 8 <= c; j += 8) {
    __m256i q = bucket_unpack8(codes + j / 8 * bits, end, bits, &u);
    bucket_store8(out + j, _mm256_add_ps(mn, _mm256_mul_ps(_mm256_cvtepi32_ps(q), step)), mode, stream);
  }
  for (; j < c; j++) bucket_store1(out + j, uq_dequant(uq_get_code(codes, j, bits), p), mode);
}

BUCKET_AVX2 void uq_expand_avx2(const struct uq_bucket* p, const unsigned char* codes, const unsigned char* end,
                                size_t c, unsigned bits, float* out, enum bucket_expand mode) {
  if (mode == BUCKET_ADD_F32)
    uq_expand_body(codes, end, c, bits, p, out, BUCKET_ADD_F32);
  else if (mode == BUCKET_STORE_F32)
    uq_expand_body(codes, end, c, bits, p, out, BUCKET_STORE_F32);
  else
    uq_expand_body(codes, end, c, bits, p, out, BUCKET_SET);
}

#endif /* BUCKET_HAVE_X86 */
