/* codec_sign_avx2.c — sign's AVX2 kernels (bucket_avx2.h), bit-identical to the
 * scalar paths of codec_sign.c. */
#include "compress/bucket_avx2.h"

#ifdef BUCKET_HAVE_X86

BUCKET_AVX2 int sign_sum_avx2(const float* v, size_t m, float* sum) {
  return bucket_canon_sum(v, m, 0, sum);
}

BUCKET_AVX2 size_t sign_codes_avx2(const float* v, size_t m, float scale, unsigned char* codes, float* resid) {
  size_t j = 0;
  if (resid) {
    const __m256 pos = _mm256_set1_ps(scale), neg = _mm256_set1_ps(-scale);
    for (; j + 8 <= m; j += 8) {
      __m256 a = _mm256_loadu_ps(v + j);
      codes[j / 8] = (unsigned char)_mm256_movemask_ps(a);
      /* blendv picks by the sign bit, exactly signbit(v[j]). */
      _mm256_storeu_ps(resid + j, _mm256_sub_ps(a, _mm256_blendv_ps(pos, neg, a)));
    }
  } else {
    for (; j + 32 <= m; j += 32) {
      uint32_t w = (uint32_t)_mm256_movemask_ps(_mm256_loadu_ps(v + j)) |
                   (uint32_t)_mm256_movemask_ps(_mm256_loadu_ps(v + j + 8)) << 8 |
                   (uint32_t)_mm256_movemask_ps(_mm256_loadu_ps(v + j + 16)) << 16 |
                   (uint32_t)_mm256_movemask_ps(_mm256_loadu_ps(v + j + 24)) << 24;
      put_u32le(codes + j / 8, w);
    }
    for (; j + 8 <= m; j += 8) codes[j / 8] = (unsigned char)_mm256_movemask_ps(_mm256_loadu_ps(v + j));
  }
  return j;
}

/* The m codes at codes into out, as mode says: bit ? -scale : scale, as scale
 * xor (bit << 31). */
BUCKET_AVX2_INLINE void sign_expand_body(const unsigned char* codes, size_t m, float scale, float* out,
                                         enum bucket_expand mode) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 sc = _mm256_set1_ps(scale);
  int stream = bucket_streams(out, mode);
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    __m256i b = _mm256_and_si256(_mm256_set1_epi32(codes[j / 8]), sel);
    __m256i flip = _mm256_slli_epi32(_mm256_cmpeq_epi32(b, sel), 31);
    bucket_store8(out + j, _mm256_xor_ps(sc, _mm256_castsi256_ps(flip)), mode, stream);
  }
  for (; j < m; j++) bucket_store1(out + j, sign_dequant((codes[j / 8] >> (j % 8)) & 1, scale), mode);
}

BUCKET_AVX2 void sign_expand_avx2(const unsigned char* codes, size_t m, float scale, float* out,
                                  enum bucket_expand mode) {
  if (mode == BUCKET_ADD_F32)
    sign_expand_body(codes, m, scale, out, BUCKET_ADD_F32);
  else if (mode == BUCKET_STORE_F32)
    sign_expand_body(codes, m, scale, out, BUCKET_STORE_F32);
  else
    sign_expand_body(codes, m, scale, out, BUCKET_SET);
}

#endif /* BUCKET_HAVE_X86 */
