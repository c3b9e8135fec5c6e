/* codec_terngrad.c — terngrad: unbiased ternary {-s, 0, +s} codes, 2 bits each, s = max |x| per bucket. */
/*
 * Wen et al., "TernGrad: Ternary Gradients to Reduce Communication in Distributed
 * Deep Learning", NeurIPS 2017: x is sent as s * sign(x) * b with b ~ Bernoulli(|x| / s),
 * s = max |x|, so E[decoded] = x. Buckets bound s per group of elements (the paper
 * scales per layer).
 *
 * Payload (B = h->bucket, h->bits = 0, h->rng_key = 0: only the sender draws):
 * the tensor is cut into buckets of B elements, the last one m = count % B
 * elements if that is not 0. Per bucket, in order:
 *     scale  f32 LE, 4 bytes
 *     codes  ceil(m / 4) bytes; element j of the bucket is bits [2j, 2j + 2) of
 *            the code bytes, bit t being bit t % 8 of byte t / 8 (LSB first);
 *            pad bits are zero
 * so payload_bytes = (count / B) * (4 + ceil(B / 4)) + (m ? 4 + ceil(m / 4) : 0).
 * Codes: 0 -> 0, 1 -> +scale, 2 -> -scale, 3 is illegal.
 *
 * Arithmetic that defines the frame (fp32, round to nearest even, no FMA), bucket
 * elements x[j], j < m, at index g = base + j of the encoded array (0-based; the
 * compressor re-keys each part it encodes), key = ctx->key:
 *     v[j]    = x[j] if finite, else +0.0f (and g becomes an exception)
 *     scale   = max_j |v[j]|                 (0.0f for an all-zero bucket)
 *     u       = (float)(rng_u32(key, g) >> 8) * 0x1p-24f    (rng_uniform)
 *     code[j] = u * scale < |v[j]| ? (signbit(v[j]) ? 2 : 1) : 0
 *     dec[j]  = code 1: scale, code 2: -scale, code 0: +0.0f
 * A scale that is not finite (impossible for a max of finite values; kept so the
 * rule matches the other bucket codecs) would send the bucket as exceptions, with
 * scale 0.0f and codes 0. Error feedback (spec ef=1) leaves x[j] - dec[j], and 0
 * at exception indices.
 * validate: exact size, every scale finite with its sign bit clear, no code 3,
 * pad bits zero.
 * The per-element arithmetic is in codec_math.h (tern_*), shared with the CUDA
 * kernels; the AVX2 paths compute the same bits as the scalar ones (tested).
 */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/result.h"
#include "compress/bucket.h"
#include "compress/codec.h"
#include "compress/codec_math.h"
#include "compress/codec_util.h"
#include "compress/crc32c.h"
#include "compress/rng.h"

/* Elements decoded at a time into a stack buffer (4 KiB, stays in L1); a multiple
 * of 8 so chunks start on a whole code byte in both kernels. */
#define TERN_DECODE_CHUNK 1024

/* The payload CRC is extended every this many bytes, while they are still in L1
 * (a second pass over the payload would read it back from L3). */
#define TERN_CRC_SPAN 4096

/* Both paths with the SIMD choice made by the caller (simd = 0: portable scalar;
 * 1: AVX2 when the CPU has it), so tests can compare their bytes. */
gcclResult_t terngrad_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n,
                                  unsigned char* payload, size_t* payload_bytes, struct frame_header* h, int simd);
gcclResult_t terngrad_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                  size_t nexc, void* dst, int simd);

static int have_avx2(void) {
  return __builtin_cpu_supports("avx2");
}

/* Payload bytes for count elements in buckets of `bucket`; 0 if that overflows. */
static int tern_payload_size(uint64_t count, uint64_t bucket, uint64_t* out) {
  return bucket_payload_size(count, bucket, 4, 2, out);
}

static size_t tern_payload_bound(const struct codec_spec* s, size_t n) {
  return bucket_payload_bound(n, s->bucket, 4, 2);
}

/* Bit j (< 16) of b moved to bit 2j. */
static uint32_t spread16(uint32_t b) {
  b = (b | (b << 8)) & 0x00FF00FFu;
  b = (b | (b << 4)) & 0x0F0F0F0Fu;
  b = (b | (b << 2)) & 0x33333333u;
  b = (b | (b << 1)) & 0x55555555u;
  return b;
}

/* ---- portable scalar kernels --------------------------------------------------- */

/* Codes of v[0, m) (finite) at global index base; with resid, resid[j] = v[j] - dec[j]. */
static void tern_codes_scalar(const float* v, size_t m, uint64_t base, uint64_t key, float scale, unsigned char* codes,
                              float* resid) {
  memset(codes, 0, (m + 3) / 4);
  for (size_t j = 0; j < m; j++) {
    unsigned c = tern_code(v[j], scale, rng_uniform(key, base + j));
    codes[j / 4] |= (unsigned char)(c << (2 * (j % 4)));
    if (resid) resid[j] = v[j] - tern_value(c, scale);
  }
}

static void tern_expand_scalar(const unsigned char* codes, size_t m, float scale, float* out) {
  for (size_t j = 0; j < m; j++) out[j] = tern_value(tern_get_code(codes, j), scale);
}

/* ---- AVX2 kernels (bit-identical to the scalar ones) ----------------------------- */

/* *scale = max_abs(v, m); returns 0 if some v[j] is not finite. */
__attribute__((target("avx2"))) static int tern_max_avx2(const float* v, size_t m, float* scale) {
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

__attribute__((target("avx2"))) static inline __m256i fmix32_avx2(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x85EBCA6Bu));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 13));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0xC2B2AE35u));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* rng_u32(key, g) for the 8 indices g whose low halves are in glo, all with the
 * same high half: hi = (uint32_t)(key >> 32) + (uint32_t)(g >> 32) * 0x9E3779B1. */
__attribute__((target("avx2"))) static inline __m256i rng_u32_avx2(__m256i glo, __m256i klo, __m256i hi) {
  return fmix32_avx2(_mm256_xor_si256(fmix32_avx2(_mm256_xor_si256(glo, klo)), hi));
}

/* Nonzero (bit j of *nz) and negative (bit j of *neg) codes of 8 elements at v
 * (their indices' low halves in glo); with resid, their residuals. */
__attribute__((target("avx2"))) static inline void tern_codes8_avx2(const float* v, __m256i glo, __m256i klo,
                                                                    __m256i hi, __m256 pos, __m256 neg, float* resid,
                                                                    uint32_t* nzbits, uint32_t* negbits) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 a = _mm256_loadu_ps(v);
  __m256i r = rng_u32_avx2(glo, klo, hi);
  __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(r, 8)), _mm256_set1_ps(0x1p-24f));
  __m256 nz = _mm256_cmp_ps(_mm256_mul_ps(u, pos), _mm256_and_ps(a, absmask), _CMP_LT_OQ);
  if (resid) {
    __m256 d = _mm256_and_ps(nz, _mm256_blendv_ps(pos, neg, a));
    _mm256_storeu_ps(resid, _mm256_sub_ps(a, d));
  }
  *nzbits = (uint32_t)_mm256_movemask_ps(nz);
  *negbits = (uint32_t)_mm256_movemask_ps(a);
}

/* The AVX2 kernel assumes the bucket's indices share their high half; a bucket
 * that crosses a multiple of 2^32 (one per 2^32 elements) takes the scalar one. */
__attribute__((target("avx2"))) static void tern_codes_avx2(const float* v, size_t m, uint64_t base, uint64_t key,
                                                            float scale, unsigned char* codes, float* resid) {
  if ((base >> 32) != ((base + m - 1) >> 32)) {
    tern_codes_scalar(v, m, base, key, scale, codes, resid);
    return;
  }
  const __m256 pos = _mm256_set1_ps(scale), neg = _mm256_set1_ps(-scale);
  const __m256i klo = _mm256_set1_epi32((int)(uint32_t)key);
  const __m256i hi = _mm256_set1_epi32((int)((uint32_t)(key >> 32) + (uint32_t)(base >> 32) * 0x9E3779B1u));
  const __m256i eight = _mm256_set1_epi32(8), sixteen = _mm256_set1_epi32(16);
  __m256i glo = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  size_t j = 0;
  uint32_t n0, s0, n1, s1;
  for (; j + 16 <= m; j += 16) { /* two independent chains hide the multiply latency */
    tern_codes8_avx2(v + j, glo, klo, hi, pos, neg, resid ? resid + j : NULL, &n0, &s0);
    tern_codes8_avx2(v + j + 8, _mm256_add_epi32(glo, eight), klo, hi, pos, neg, resid ? resid + j + 8 : NULL, &n1,
                     &s1);
    uint32_t n = n0 | n1 << 8, s = s0 | s1 << 8;
    put_u32le(codes + j / 4, spread16(n & ~s) | spread16(n & s) << 1);
    glo = _mm256_add_epi32(glo, sixteen);
  }
  for (; j + 8 <= m; j += 8) {
    tern_codes8_avx2(v + j, glo, klo, hi, pos, neg, resid ? resid + j : NULL, &n0, &s0);
    uint32_t w = spread16(n0 & ~s0) | spread16(n0 & s0) << 1;
    codes[j / 4] = (unsigned char)w;
    codes[j / 4 + 1] = (unsigned char)(w >> 8);
    glo = _mm256_add_epi32(glo, eight);
  }
  if (j < m) tern_codes_scalar(v + j, m - j, base + j, key, scale, codes + j / 4, resid ? resid + j : NULL);
}

/* out[j] = dec of code j: +0.0 for 0, else scale with its sign flipped for 2. */
__attribute__((target("avx2"))) static inline __m256 tern_expand8_avx2(const unsigned char* c2, __m256 sc) {
  const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i three = _mm256_set1_epi32(3), two = _mm256_set1_epi32(2);
  __m256i w = _mm256_set1_epi32((int)((uint32_t)c2[0] | (uint32_t)c2[1] << 8));
  __m256i c = _mm256_and_si256(_mm256_srlv_epi32(w, shifts), three);
  __m256i zero = _mm256_cmpeq_epi32(c, _mm256_setzero_si256());
  __m256i flip = _mm256_slli_epi32(_mm256_cmpeq_epi32(c, two), 31);
  return _mm256_andnot_ps(_mm256_castsi256_ps(zero), _mm256_xor_ps(sc, _mm256_castsi256_ps(flip)));
}

__attribute__((target("avx2"))) static void tern_expand_avx2(const unsigned char* codes, size_t m, float scale,
                                                             float* out) {
  const __m256 sc = _mm256_set1_ps(scale);
  size_t j = 0;
  for (; j + 8 <= m; j += 8) _mm256_storeu_ps(out + j, tern_expand8_avx2(codes + j / 4, sc));
  if (j < m) tern_expand_scalar(codes + j / 4, m - j, scale, out + j);
}

/* dst[j] += dec[j] for fp32 dst without a stack round trip (same adds as block_accumulate). */
__attribute__((target("avx2"))) static void tern_expand_add_f32_avx2(const unsigned char* codes, size_t m, float scale,
                                                                     float* dst) {
  const __m256 sc = _mm256_set1_ps(scale);
  size_t j = 0;
  for (; j + 8 <= m; j += 8)
    _mm256_storeu_ps(dst + j, _mm256_add_ps(_mm256_loadu_ps(dst + j), tern_expand8_avx2(codes + j / 4, sc)));
  for (; j < m; j++) dst[j] += tern_value(tern_get_code(codes, j), scale);
}

/* ---- encode ---------------------------------------------------------------------- */

static gcclResult_t tern_encode_bucket(struct encode_ctx* ctx, struct bucket_state* st, const float* x, float* resid,
                                       size_t m, uint64_t base, unsigned char* out, int simd) {
  struct exc_list* exc = ctx->exc;
  const float* v = x;
  float scale = 0.0f;
  size_t nexc0 = exc->n;
  int finite = simd ? tern_max_avx2(x, m, &scale) : all_finite(x, m);
  if (!finite) {
    GCCL_CHECK(sanitize_block(x, m, base, st->tmp, exc));
    v = st->tmp;
    if (simd) tern_max_avx2(v, m, &scale);
  }
  if (!simd) scale = max_abs(v, m);
  if (!f32_finite(scale)) {
    GCCL_CHECK(exc_push_range(exc, base, m));
    put_f32(out, 0.0f);
    memset(out + 4, 0, (m + 3) / 4);
    if (resid) memset(resid, 0, m * sizeof(float));
    return gcclSuccess;
  }
  put_f32(out, scale);
  if (simd)
    tern_codes_avx2(v, m, base, ctx->key, scale, out + 4, resid);
  else
    tern_codes_scalar(v, m, base, ctx->key, scale, out + 4, resid);
  if (resid)
    for (size_t e = nexc0; e < exc->n; e++) resid[exc->idx[e] - base] = 0.0f;
  return gcclSuccess;
}

gcclResult_t terngrad_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n,
                                  unsigned char* payload, size_t* payload_bytes, struct frame_header* h, int simd) {
  struct bucket_state* st = ctx->state;
  size_t bucket = ctx->spec->bucket;
  size_t need = n < bucket ? n : bucket;
  if (st == NULL || st->cap < need)
    return err_set(gcclInternalError, "terngrad: codec state made for fewer than %zu elements", need);
  simd = simd && have_avx2();
  unsigned char* out = payload;
  const unsigned char* crc_from = payload;
  uint32_t crc = 0;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    GCCL_CHECK(tern_encode_bucket(ctx, st, x + base, resid ? resid + base : NULL, m, base, out, simd));
    out += 4 + (m + 3) / 4;
    if ((size_t)(out - crc_from) >= TERN_CRC_SPAN) {
      crc = crc32c(crc, crc_from, (size_t)(out - crc_from));
      crc_from = out;
    }
  }
  ctx->payload_crc = crc32c(crc, crc_from, (size_t)(out - crc_from));
  ctx->payload_crc_valid = 1;
  *payload_bytes = (size_t)(out - payload);
  h->bits = 0;
  h->bucket = ctx->spec->bucket;
  h->values = 0;
  h->k = 0;
  h->rng_key = 0;
  h->flags = 0;
  return gcclSuccess;
}

static gcclResult_t tern_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                                size_t* payload_bytes, struct frame_header* h) {
  return terngrad_encode_path(ctx, x, resid, n, payload, payload_bytes, h, 1);
}

/* ---- validate and decode ------------------------------------------------------------ */

/* 1 if some 2-bit code in p[0, nbytes) is 3: a word-at-a-time test of both bits
 * of each pair (pairs never straddle a byte). */
static int tern_has_code3(const unsigned char* p, size_t nbytes) {
  const uint64_t even = UINT64_C(0x5555555555555555);
  uint64_t acc = 0;
  size_t i = 0;
  for (; i + 8 <= nbytes; i += 8) {
    uint64_t w = get_u64le(p + i);
    acc |= w & (w >> 1) & even;
  }
  for (; i < nbytes; i++) acc |= (uint64_t)(p[i] & (p[i] >> 1) & 0x55u);
  return acc != 0;
}

static gcclResult_t tern_validate(const struct frame_header* h, const unsigned char* payload) {
  uint64_t expect;
  if (h->bucket == 0) return err_set(gcclCorruptData, "terngrad: bucket 0"); /* frame_validate excludes it too */
  if (!tern_payload_size(h->count, h->bucket, &expect))
    return err_set(gcclCorruptData, "terngrad: payload size for %llu elements overflows", (unsigned long long)h->count);
  if (h->payload_bytes != expect)
    return err_set(gcclCorruptData, "terngrad: payload is %llu bytes, %llu elements in buckets of %u need %llu",
                   (unsigned long long)h->payload_bytes, (unsigned long long)h->count, (unsigned)h->bucket,
                   (unsigned long long)expect);
  const unsigned char* p = payload;
  for (uint64_t base = 0; base < h->count; base += h->bucket) {
    uint64_t m = h->count - base < h->bucket ? h->count - base : h->bucket;
    uint32_t u = get_u32le(p);
    if ((u & 0x7F800000u) == 0x7F800000u || (u >> 31))
      return err_set(gcclCorruptData, "terngrad: bucket at element %llu has scale %g (must be finite and >= +0)",
                     (unsigned long long)base, (double)get_f32(p));
    size_t nbytes = (size_t)((m + 3) / 4);
    if (tern_has_code3(p + 4, nbytes))
      return err_set(gcclCorruptData, "terngrad: bucket at element %llu holds the illegal code 3",
                     (unsigned long long)base);
    if (m % 4 && (p[4 + nbytes - 1] >> (2 * (m % 4))))
      return err_set(gcclCorruptData, "terngrad: bucket at element %llu has nonzero pad bits",
                     (unsigned long long)base);
    p += 4 + nbytes;
  }
  return gcclSuccess;
}

gcclResult_t terngrad_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                  size_t nexc, void* dst, int simd) {
  float v[TERN_DECODE_CHUNK];
  size_t n = (size_t)h->count, bucket = h->bucket, cursor = 0;
  simd = simd && have_avx2();
  const unsigned char* p = payload;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    float scale = get_f32(p);
    const unsigned char* codes = p + 4;
    for (size_t j = 0; j < m; j += TERN_DECODE_CHUNK) {
      size_t c = m - j < TERN_DECODE_CHUNK ? m - j : TERN_DECODE_CHUNK;
      size_t at = base + j;
      /* An fp32 chunk without exceptions adds in registers: 2.5x faster than the
       * stack buffer + block_accumulate when dst is in cache. */
      int clean = cursor >= nexc || exc[cursor] >= at + c;
      if (simd && clean && h->dtype == gcclFloat32) {
        tern_expand_add_f32_avx2(codes + j / 4, c, scale, (float*)dst + at);
        continue;
      }
      if (simd)
        tern_expand_avx2(codes + j / 4, c, scale, v);
      else
        tern_expand_scalar(codes + j / 4, c, scale, v);
      block_accumulate(dst, h->dtype, at, v, c, exc, nexc, &cursor);
    }
    p += 4 + (m + 3) / 4;
  }
  return gcclSuccess;
}

static gcclResult_t tern_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                           const uint64_t* exc, size_t nexc, void* dst) {
  return terngrad_decode_path(h, payload, exc, nexc, dst, 1);
}

const struct codec_ops codec_terngrad_ops = {
    .payload_bound = tern_payload_bound,
    .state_create = bucket_state_create,
    .state_destroy = bucket_state_destroy,
    .encode = tern_encode,
    .validate = tern_validate,
    .decode_accumulate = tern_decode_accumulate,
};
