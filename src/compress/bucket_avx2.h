/* bucket_avx2.h — the AVX2 side of the bucket codecs: the pieces their kernels
 * share (static inline, for codec_*_avx2.c: the counter-based draws, the code
 * packing and unpacking, the canonical sums, the stores of a decode) and each
 * codec's kernels, which its codec calls where simd is 1 (bucket.h).
 *
 * Every kernel computes the bits its codec's portable scalar path computes
 * (tested: ScalarAndAvx2AreBitIdentical and the frame golden hashes). Built
 * only on x86-64 (BUCKET_HAVE_X86), with the target attribute: nothing else
 * in the library needs AVX2 to run. */
#ifndef GCCL_COMPRESS_BUCKET_AVX2_H
#define GCCL_COMPRESS_BUCKET_AVX2_H

#include "compress/bucket.h"

#ifdef BUCKET_HAVE_X86
#include <immintrin.h>

#define BUCKET_AVX2 __attribute__((target("avx2")))
#define BUCKET_AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

/* ---- counter-based draws (rng.h) on 8 lanes ------------------------------------------ */

/* MurmurHash3's fmix32 on 8 lanes (rng_fmix32). */
BUCKET_AVX2_INLINE __m256i bucket_fmix8(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x85EBCA6Bu));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 13));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0xC2B2AE35u));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* The draws of a bucket whose indices [g0, g0 + m) share their high half (it
 * does not cross a multiple of 2^32): idx holds the low halves of the next 8
 * indices, klo and khi the two rounds' key terms. */
struct bucket_draws {
  __m256i idx, klo, khi;
};

BUCKET_AVX2_INLINE void bucket_draws_init(struct bucket_draws* d, uint64_t key, uint64_t g0) {
  d->idx = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)g0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  d->klo = _mm256_set1_epi32((int)(uint32_t)key);
  d->khi = _mm256_set1_epi32((int)((uint32_t)(key >> 32) + (uint32_t)(g0 >> 32) * 0x9E3779B1u));
}

/* rng_u32 of the 8 indices whose low halves are in idx. */
BUCKET_AVX2_INLINE __m256i bucket_rng8(__m256i idx, const struct bucket_draws* d) {
  return bucket_fmix8(_mm256_xor_si256(bucket_fmix8(_mm256_xor_si256(idx, d->klo)), d->khi));
}

/* rng_uniform of 8 draws r: (r >> 8) * 2^-24. */
BUCKET_AVX2_INLINE __m256 bucket_uniform8(__m256i r) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(r, 8)), _mm256_set1_ps(0x1p-24f));
}

/* ---- codes packed LSB first (uniform, qsgd) ------------------------------------------- */

/* Writes 32 codes of w bits, w in {1, 2, 4, 8}, given as int32 lanes of q0..q3
 * (elements 0-7, 8-15, ...), as 4 * w bytes at out. */
BUCKET_AVX2_INLINE void bucket_pack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3, unsigned w, unsigned char* out) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  /* 32 codes as bytes, in element order. */
  __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(q0, q1), _mm256_packus_epi32(q2, q3));
  b = _mm256_permutevar8x32_epi32(b, order);
  if (w == 8) {
    _mm256_storeu_si256((__m256i*)out, b);
  } else if (w == 1) {
    put_u32le(out, (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(b, 7)));
  } else {
    /* Pairs of w-bit codes to 2w-bit codes: b[2i] + b[2i+1] << w. */
    __m256i p2 = _mm256_maddubs_epi16(b, _mm256_set1_epi16((short)(1 | (1 << (8 + w)))));
    __m128i w8 = _mm_packus_epi16(_mm256_castsi256_si128(p2), _mm256_extracti128_si256(p2, 1));
    if (w == 4) {
      _mm_storeu_si128((__m128i*)out, w8);
    } else { /* w == 2: once more, 4-bit pairs to bytes */
      __m128i b8 = _mm_maddubs_epi16(w8, _mm_set1_epi16(1 | (16 << 8)));
      _mm_storel_epi64((__m128i*)out, _mm_packus_epi16(b8, b8));
    }
  }
}

/* The 64-bit lane shifts of bucket_put8 for codes of w bits. */
BUCKET_AVX2_INLINE void bucket_put8_shifts(unsigned w, __m256i* sh_lo, __m256i* sh_hi) {
  *sh_lo = _mm256_mullo_epi32(_mm256_setr_epi64x(0, 1, 2, 3), _mm256_set1_epi64x(w));
  *sh_hi = _mm256_add_epi64(*sh_lo, _mm256_set1_epi64x(4 * w));
}

/* Packs the 8 codes (< 2^w, w <= max_w <= 9) in q's lanes LSB first into w
 * bytes at out: lane k shifted left by k * w (<= 63) in 64-bit lanes, then all
 * ORed; for w = 9 the top 8 bits of code 7 make byte 8. Stores 8 bytes when the
 * payload has room (the bytes past the group are zero and rewritten by what
 * comes next), else exactly w. max_w, a constant, drops the w = 9 test where
 * codes are at most 8 bits. */
BUCKET_AVX2_INLINE void bucket_put8(__m256i q, __m256i sh_lo, __m256i sh_hi, unsigned w, unsigned max_w,
                                    unsigned char* out, const unsigned char* end) {
  __m256i lo = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(q)), sh_lo);
  __m256i hi = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(q, 1)), sh_hi);
  __m256i v = _mm256_or_si256(lo, hi);
  __m128i x = _mm_or_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  uint64_t r = (uint64_t)_mm_cvtsi128_si64(_mm_or_si128(x, _mm_unpackhi_epi64(x, x)));
  if (max_w > 8 && w == 9) {
    memcpy(out, &r, 8);
    out[8] = (unsigned char)((uint32_t)_mm256_extract_epi32(q, 7) >> 1);
  } else if (end - out >= 8) {
    memcpy(out, &r, 8);
  } else {
    for (unsigned i = 0; i < w; i++) out[i] = (unsigned char)(r >> (8 * i));
  }
}

/* Per-lane byte picks and shifts that unpack 8 codes of w bits (w <= 9) from a
 * group of w bytes: lane k takes bytes k*w/8 and the next, shifted right by
 * k*w%8. */
struct bucket_unpack {
  __m256i pick, shift, mask;
};

BUCKET_AVX2_INLINE void bucket_unpack_make(unsigned w, struct bucket_unpack* u) {
  unsigned char pick[32];
  int shift[8];
  for (unsigned k = 0; k < 8; k++) {
    unsigned bit = k * w;
    unsigned char* pk = pick + 16 * (k / 4) + 4 * (k % 4); /* pshufb picks within each 128-bit half */
    pk[0] = (unsigned char)(bit / 8);
    pk[1] = (unsigned char)(bit / 8 + 1);
    pk[2] = pk[3] = 0x80; /* pshufb writes 0 */
    shift[k] = (int)(bit % 8);
  }
  u->pick = _mm256_loadu_si256((const __m256i*)pick);
  u->shift = _mm256_loadu_si256((const __m256i*)shift);
  u->mask = _mm256_set1_epi32((int)((1u << w) - 1));
}

/* Codes k < 8 of the group at g (w bytes, inside the payload; never reads past
 * end) as int32 lanes. Bytes a lane picks beyond the group's are masked off. */
BUCKET_AVX2_INLINE __m256i bucket_unpack8(const unsigned char* g, const unsigned char* end, unsigned w,
                                          const struct bucket_unpack* u) {
  if (w == 8 && end - g >= 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)g));
  __m128i raw;
  if (end - g >= 16) {
    raw = _mm_loadu_si128((const __m128i*)g);
  } else if (w <= 8 && end - g >= 8) {
    raw = _mm_loadl_epi64((const __m128i*)g);
  } else {
    unsigned char buf[16] = {0};
    memcpy(buf, g, w);
    raw = _mm_loadu_si128((const __m128i*)buf);
  }
  __m256i x = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(raw), u->pick);
  return _mm256_and_si256(_mm256_srlv_epi32(x, u->shift), u->mask);
}

/* The same for a group with 16 readable bytes at g: no bounds to test, for
 * loops that take the groups far from the payload's end first (bucket_groups16). */
BUCKET_AVX2_INLINE __m256i bucket_unpack8_wide(const unsigned char* g, const struct bucket_unpack* u) {
  __m128i raw = _mm_loadu_si128((const __m128i*)g);
  __m256i x = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(raw), u->pick);
  return _mm256_and_si256(_mm256_srlv_epi32(x, u->shift), u->mask);
}

/* How many of the c / 8 groups of w bytes from codes have 16 readable bytes
 * before end. */
static inline size_t bucket_groups16(const unsigned char* codes, const unsigned char* end, size_t c, unsigned w) {
  size_t room = (size_t)(end - codes), groups = c / 8;
  if (room < 16) return 0;
  size_t fit = (room - 16) / w + 1;
  return fit < groups ? fit : groups;
}

/* ---- the canonical sums (codec_util.h) with the finite test ------------------------------ */

/* One step of bucket_canon_sum: elements a (lanes 0-7) and b (lanes 8-15). */
BUCKET_AVX2_INLINE void bucket_sum16(__m256 a, __m256 b, int square, __m256* acc0, __m256* acc1, __m256i* bad) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i maxfin = _mm256_set1_epi32(0x7F7FFFFF);
  __m256 aa = _mm256_and_ps(a, absmask), ab = _mm256_and_ps(b, absmask);
  *bad = _mm256_or_si256(*bad, _mm256_cmpgt_epi32(_mm256_castps_si256(aa), maxfin));
  *bad = _mm256_or_si256(*bad, _mm256_cmpgt_epi32(_mm256_castps_si256(ab), maxfin));
  *acc0 = _mm256_add_ps(*acc0, square ? _mm256_mul_ps(a, a) : aa);
  *acc1 = _mm256_add_ps(*acc1, square ? _mm256_mul_ps(b, b) : ab);
}

/* *sum = canon_sum_sq(v, m) (square = 1) or canon_sum_abs(v, m) (square = 0, a
 * constant); returns 0 if some v[j] is not finite (*sum is then meaningless).
 * Lanes 0-7 of the canonical sum live in acc0, lanes 8-15 in acc1; the tail
 * adds +0.0 to unused lanes, which leaves them unchanged (they are >= +0). */
BUCKET_AVX2_INLINE int bucket_canon_sum(const float* v, size_t m, int square, float* sum) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= m; i += 16)
    bucket_sum16(_mm256_loadu_ps(v + i), _mm256_loadu_ps(v + i + 8), square, &acc0, &acc1, &bad);
  if (i < m) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int r = (int)(m - i);
    __m256i k0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(r), iota);
    __m256i k1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(r - 8), iota);
    bucket_sum16(_mm256_maskload_ps(v + i, k0), _mm256_maskload_ps(v + i + 8, k1), square, &acc0, &acc1, &bad);
  }
  /* lane[j] += lane[j + w] for w = 8, 4, 2, 1. */
  __m256 s8 = _mm256_add_ps(acc0, acc1);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  *sum = _mm_cvtss_f32(s1);
  return _mm256_testz_si256(bad, bad);
}

/* ---- the stores of a decode ------------------------------------------------------------- */

/* 1 when an expand in this mode streams its stores past the cache: a stored
 * output (decode_store_f32) that is 32-byte aligned is not read again soon, and
 * a streamed line is not read in first. */
static inline int bucket_streams(const float* out, enum bucket_expand mode) {
  return mode == BUCKET_STORE_F32 && ((uintptr_t)out & 31) == 0;
}

/* out[0, 8) from the 8 decoded values d, as mode says (bucket.h). */
BUCKET_AVX2_INLINE void bucket_store8(float* out, __m256 d, enum bucket_expand mode, int stream) {
  if (mode == BUCKET_ADD_F32) d = _mm256_add_ps(_mm256_loadu_ps(out), d);
  if (mode == BUCKET_STORE_F32) d = _mm256_add_ps(_mm256_setzero_ps(), d);
  if (stream)
    _mm256_stream_ps(out, d);
  else
    _mm256_storeu_ps(out, d);
}

/* *out from one decoded value d, as mode says. */
static inline void bucket_store1(float* out, float d, enum bucket_expand mode) {
  if (mode == BUCKET_ADD_F32)
    *out += d;
  else
    *out = mode == BUCKET_STORE_F32 ? 0.0f + d : d;
}

/* ---- each codec's kernels ----------------------------------------------------------------
 * An encode kernel codes the leading elements of a bucket, a multiple of 8 of
 * them, and returns how many; the codec's scalar path codes the rest. A kernel
 * that draws needs a bucket that does not cross a multiple of 2^32 elements. */

/* codec_uniform_avx2.c. minmax: as uq_minmax_scalar when every x[j] is finite
 * (m >= 16); returns 0 (outputs meaningless) when some is not. */
int uq_minmax_avx2(const float* x, size_t m, float* mn, float* mx);
size_t uq_codes_avx2(const float* v, size_t m, uint64_t g0, const struct uq_bucket* p, unsigned bits, uint64_t key,
                     int stochastic, unsigned char* codes, const unsigned char* end, float* resid);
void uq_expand_avx2(const struct uq_bucket* p, const unsigned char* codes, const unsigned char* end, size_t c,
                    unsigned bits, float* out, enum bucket_expand mode);

/* codec_qsgd_avx2.c. codes_bad: 1 if one of the first c / 8 * 8 codes is neg
 * with level 0 (b + 1 bits each). */
int qs_sumsq_avx2(const float* v, size_t m, float* sum);
size_t qs_codes_avx2(const float* v, size_t m, uint64_t g0, const struct qs_bucket* p, uint64_t key,
                     unsigned char* codes, const unsigned char* end, float* resid);
int qs_codes_bad_avx2(const unsigned char* codes, const unsigned char* end, size_t c, unsigned b);
void qs_expand_avx2(const struct qs_bucket* p, const unsigned char* codes, const unsigned char* end, size_t c,
                    float* out, enum bucket_expand mode);

/* codec_sign_avx2.c */
int sign_sum_avx2(const float* v, size_t m, float* sum);
size_t sign_codes_avx2(const float* v, size_t m, float scale, unsigned char* codes, float* resid);
void sign_expand_avx2(const unsigned char* codes, size_t m, float scale, float* out, enum bucket_expand mode);

/* codec_terngrad_avx2.c */
int tern_max_avx2(const float* v, size_t m, float* scale);
size_t tern_codes_avx2(const float* v, size_t m, uint64_t base, uint64_t key, float scale, unsigned char* codes,
                       float* resid);
void tern_expand_avx2(const unsigned char* codes, size_t m, float scale, float* out, enum bucket_expand mode);

#endif /* BUCKET_HAVE_X86 */
#endif
