/* codec_qsgd_avx2.c — qsgd's AVX2 kernels (bucket_avx2.h), bit-identical to the
 * scalar paths of codec_qsgd.c. */
#include "compress/bucket_avx2.h"

#ifdef BUCKET_HAVE_X86

BUCKET_AVX2 int qs_sumsq_avx2(const float* v, size_t m, float* sum) {
  return bucket_canon_sum(v, m, 1, sum);
}

/* ---- encode -------------------------------------------------------------------------- */

/* The bucket's constants in registers, and the rounding stream (one draw per
 * element: rng_uniform of its global index). */
struct qs_lanes {
  __m256 inv, sf, step;
  __m128i b;
  struct bucket_draws r;
};

/* Codes of v[j, j + 8) as int32 lanes; with resid, stores v - dec at resid + j. */
BUCKET_AVX2_INLINE __m256i qs_q8(const float* v, size_t j, struct qs_lanes* c, float* resid) {
  __m256 x = _mm256_loadu_ps(v + j);
  __m256 u = bucket_uniform8(bucket_rng8(c->r.idx, &c->r));
  c->r.idx = _mm256_add_epi32(c->r.idx, _mm256_set1_epi32(8));
  __m256 a = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
  __m256 t = _mm256_add_ps(_mm256_mul_ps(a, c->inv), u);
  __m256i l = _mm256_cvttps_epi32(_mm256_min_ps(t, c->sf)); /* min_ps(t, s) = t < s ? t : s */
  __m256i nz = _mm256_cmpgt_epi32(l, _mm256_setzero_si256());
  __m256i neg = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 31), nz); /* 0 or 1 */
  if (resid) {
    __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(l), c->step);
    d = _mm256_xor_ps(d, _mm256_castsi256_ps(_mm256_slli_epi32(neg, 31)));
    _mm256_storeu_ps(resid + j, _mm256_sub_ps(x, d));
  }
  return _mm256_or_si256(l, _mm256_sll_epi32(neg, c->b));
}

/* The body of qs_codes_avx2: always inlined so that whether resid is NULL is a
 * constant in each copy. */
BUCKET_AVX2_INLINE size_t qs_codes_body(const float* v, size_t m, uint64_t g0, const struct qs_bucket* p, uint64_t key,
                                        unsigned char* codes, const unsigned char* end, float* resid) {
  unsigned w = p->b + 1;
  struct qs_lanes c;
  c.inv = _mm256_set1_ps(p->inv);
  c.sf = _mm256_set1_ps(p->sf);
  c.step = _mm256_set1_ps(p->step);
  c.b = _mm_cvtsi32_si128((int)p->b);
  bucket_draws_init(&c.r, key, g0);
  size_t j = 0;
  if (w == 8 || w == 4 || w == 2) {
    for (; j + 32 <= m; j += 32) { /* in element order: each call draws the next 8 */
      __m256i q0 = qs_q8(v, j, &c, resid), q1 = qs_q8(v, j + 8, &c, resid);
      __m256i q2 = qs_q8(v, j + 16, &c, resid), q3 = qs_q8(v, j + 24, &c, resid);
      bucket_pack32(q0, q1, q2, q3, w, codes + j / 8 * w);
    }
  }
  __m256i sh_lo, sh_hi;
  bucket_put8_shifts(w, &sh_lo, &sh_hi);
  for (; j + 8 <= m; j += 8) bucket_put8(qs_q8(v, j, &c, resid), sh_lo, sh_hi, w, 9, codes + j / 8 * w, end);
  return j;
}

BUCKET_AVX2 static size_t qs_codes_plain(const float* v, size_t m, uint64_t g0, const struct qs_bucket* p, uint64_t key,
                                         unsigned char* codes, const unsigned char* end) {
  return qs_codes_body(v, m, g0, p, key, codes, end, NULL);
}

BUCKET_AVX2 static size_t qs_codes_ef(const float* v, size_t m, uint64_t g0, const struct qs_bucket* p, uint64_t key,
                                      unsigned char* codes, const unsigned char* end, float* resid) {
  return qs_codes_body(v, m, g0, p, key, codes, end, resid);
}

size_t qs_codes_avx2(const float* v, size_t m, uint64_t g0, const struct qs_bucket* p, uint64_t key,
                     unsigned char* codes, const unsigned char* end, float* resid) {
  if (resid) return qs_codes_ef(v, m, g0, p, key, codes, end, resid);
  return qs_codes_plain(v, m, g0, p, key, codes, end);
}

/* ---- validate and decode ------------------------------------------------------------- */

BUCKET_AVX2 int qs_codes_bad_avx2(const unsigned char* codes, const unsigned char* end, size_t c, unsigned b) {
  struct bucket_unpack u;
  bucket_unpack_make(b + 1, &u);
  const __m256i zero_neg = _mm256_set1_epi32((int)(1u << b));
  __m256i bad = _mm256_setzero_si256();
  unsigned w = b + 1;
  size_t wide = bucket_groups16(codes, end, c, w), g = 0;
  for (; g < wide; g++) /* a tight loop: this check is a fifth of a decode */
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(bucket_unpack8_wide(codes + g * w, &u), zero_neg));
  for (; g < c / 8; g++)
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(bucket_unpack8(codes + g * w, end, w, &u), zero_neg));
  return !_mm256_testz_si256(bad, bad);
}

/* out[j] = dec[j] (BUCKET_SET) or out[j] += dec[j] (BUCKET_ADD_F32) for the c
 * codes at codes. */
BUCKET_AVX2_INLINE void qs_expand_body(const unsigned char* codes, const unsigned char* end, size_t c,
                                       const struct qs_bucket* p, float* out, enum bucket_expand mode) {
  unsigned w = p->b + 1;
  struct bucket_unpack u;
  bucket_unpack_make(w, &u);
  const __m256i lmask = _mm256_set1_epi32((int)((1u << p->b) - 1));
  const __m128i sh = _mm_cvtsi32_si128((int)(31 - p->b)); /* moves neg to the sign bit */
  const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
  const __m256 step = _mm256_set1_ps(p->step);
  size_t j = 0;
  for (; j + 8 <= c; j += 8) {
    __m256i q = bucket_unpack8(codes + j / 8 * w, end, w, &u);
    __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q, lmask)), step);
    d = _mm256_xor_ps(d, _mm256_castsi256_ps(_mm256_and_si256(_mm256_sll_epi32(q, sh), sign)));
    bucket_store8(out + j, d, mode, 0);
  }
  for (; j < c; j++) bucket_store1(out + j, qs_dequant(packed_code_get(codes, j, w), p), mode);
}

BUCKET_AVX2 void qs_expand_avx2(const struct qs_bucket* p, const unsigned char* codes, const unsigned char* end,
                                size_t c, float* out, enum bucket_expand mode) {
  if (mode == BUCKET_ADD_F32)
    qs_expand_body(codes, end, c, p, out, BUCKET_ADD_F32);
  else
    qs_expand_body(codes, end, c, p, out, BUCKET_SET);
}

#endif /* BUCKET_HAVE_X86 */
