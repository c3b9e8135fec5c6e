/* codec_terngrad_avx2.c — terngrad's AVX2 kernels (bucket_avx2.h), bit-identical
 * to the scalar paths of codec_terngrad.c. */
#include <math.h>

#include "compress/bucket_avx2.h"

#ifdef BUCKET_HAVE_X86

BUCKET_AVX2 int tern_max_avx2(const float* v, size_t m, float* scale) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i maxfin = _mm256_set1_epi32(0x7F7FFFFF);
  __m256 mx0 = _mm256_setzero_ps(), mx1 = _mm256_setzero_ps();
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= m; i += 16) {
    __m256 a = _mm256_and_ps(_mm256_loadu_ps(v + i), absmask);
    __m256 b = _mm256_and_ps(_mm256_loadu_ps(v + i + 8), absmask);
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(a), maxfin));
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(b), maxfin));
    mx0 = _mm256_max_ps(mx0, a);
    mx1 = _mm256_max_ps(mx1, b);
  }
  float mx = 0.0f;
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_max_ps(mx0, mx1));
  for (int j = 0; j < 8; j++) mx = lanes[j] > mx ? lanes[j] : mx;
  uint32_t tailbad = 0;
  for (; i < m; i++) {
    float a = fabsf(v[i]);
    uint32_t u;
    memcpy(&u, &a, 4);
    tailbad |= u > 0x7F7FFFFFu;
    mx = a > mx ? a : mx;
  }
  *scale = mx;
  return _mm256_testz_si256(bad, bad) && !tailbad;
}

/* Bit j (< 16) of b moved to bit 2j. */
static uint32_t spread16(uint32_t b) {
  b = (b | (b << 8)) & 0x00FF00FFu;
  b = (b | (b << 4)) & 0x0F0F0F0Fu;
  b = (b | (b << 2)) & 0x33333333u;
  b = (b | (b << 1)) & 0x55555555u;
  return b;
}

/* Nonzero (bit j of *nz) and negative (bit j of *neg) codes of 8 elements at v
 * (their indices' low halves in glo); with resid, their residuals. */
BUCKET_AVX2 static inline void tern_codes8(const float* v, __m256i glo, const struct bucket_draws* r, __m256 pos,
                                           __m256 neg, float* resid, uint32_t* nzbits, uint32_t* negbits) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 a = _mm256_loadu_ps(v);
  __m256 u = bucket_uniform8(bucket_rng8(glo, r));
  __m256 nz = _mm256_cmp_ps(_mm256_mul_ps(u, pos), _mm256_and_ps(a, absmask), _CMP_LT_OQ);
  if (resid) {
    __m256 d = _mm256_and_ps(nz, _mm256_blendv_ps(pos, neg, a));
    _mm256_storeu_ps(resid, _mm256_sub_ps(a, d));
  }
  *nzbits = (uint32_t)_mm256_movemask_ps(nz);
  *negbits = (uint32_t)_mm256_movemask_ps(a);
}

BUCKET_AVX2 size_t tern_codes_avx2(const float* v, size_t m, uint64_t base, uint64_t key, float scale,
                                   unsigned char* codes, float* resid) {
  const __m256 pos = _mm256_set1_ps(scale), neg = _mm256_set1_ps(-scale);
  const __m256i eight = _mm256_set1_epi32(8), sixteen = _mm256_set1_epi32(16);
  struct bucket_draws r;
  bucket_draws_init(&r, key, base);
  __m256i glo = r.idx;
  size_t j = 0;
  uint32_t n0, s0, n1, s1;
  for (; j + 16 <= m; j += 16) { /* two independent chains hide the multiply latency */
    tern_codes8(v + j, glo, &r, pos, neg, resid ? resid + j : NULL, &n0, &s0);
    tern_codes8(v + j + 8, _mm256_add_epi32(glo, eight), &r, pos, neg, resid ? resid + j + 8 : NULL, &n1, &s1);
    uint32_t n = n0 | n1 << 8, s = s0 | s1 << 8;
    put_u32le(codes + j / 4, spread16(n & ~s) | spread16(n & s) << 1);
    glo = _mm256_add_epi32(glo, sixteen);
  }
  for (; j + 8 <= m; j += 8) {
    tern_codes8(v + j, glo, &r, pos, neg, resid ? resid + j : NULL, &n0, &s0);
    uint32_t w = spread16(n0 & ~s0) | spread16(n0 & s0) << 1;
    codes[j / 4] = (unsigned char)w;
    codes[j / 4 + 1] = (unsigned char)(w >> 8);
    glo = _mm256_add_epi32(glo, eight);
  }
  return j;
}

/* out[j] = dec of code j: +0.0 for 0, else scale with its sign flipped for 2. */
BUCKET_AVX2 static inline __m256 tern_expand8(const unsigned char* c2, __m256 sc) {
  const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i three = _mm256_set1_epi32(3), two = _mm256_set1_epi32(2);
  __m256i w = _mm256_set1_epi32((int)((uint32_t)c2[0] | (uint32_t)c2[1] << 8));
  __m256i c = _mm256_and_si256(_mm256_srlv_epi32(w, shifts), three);
  __m256i zero = _mm256_cmpeq_epi32(c, _mm256_setzero_si256());
  __m256i flip = _mm256_slli_epi32(_mm256_cmpeq_epi32(c, two), 31);
  return _mm256_andnot_ps(_mm256_castsi256_ps(zero), _mm256_xor_ps(sc, _mm256_castsi256_ps(flip)));
}

/* out[j] = dec[j] (BUCKET_SET) or out[j] += dec[j] (BUCKET_ADD_F32). */
BUCKET_AVX2_INLINE void tern_expand_body(const unsigned char* codes, size_t m, float scale, float* out,
                                         enum bucket_expand mode) {
  const __m256 sc = _mm256_set1_ps(scale);
  size_t j = 0;
  for (; j + 8 <= m; j += 8) bucket_store8(out + j, tern_expand8(codes + j / 4, sc), mode, 0);
  for (; j < m; j++) bucket_store1(out + j, tern_value(tern_get_code(codes, j), scale), mode);
}

BUCKET_AVX2 void tern_expand_avx2(const unsigned char* codes, size_t m, float scale, float* out,
                                  enum bucket_expand mode) {
  if (mode == BUCKET_ADD_F32)
    tern_expand_body(codes, m, scale, out, BUCKET_ADD_F32);
  else
    tern_expand_body(codes, m, scale, out, BUCKET_SET);
}

#endif /* BUCKET_HAVE_X86 */
