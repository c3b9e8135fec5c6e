/* codec_sign.c — sign: one bit per element plus a mean-|x| scale per bucket (EF-signSGD). */
/*
 * Karimireddy et al., "Error Feedback Fixes SignSGD and other Gradient Compression
 * Schemes", ICML 2019: send sign(x) scaled by mean |x|, keep the error locally.
 * Error feedback is on by default (spec.c) because the codec is biased.
 *
 * Payload (B = h->bucket, h->bits = 0): the tensor is cut into buckets of B
 * elements, the last one m = count % B elements if that is not 0. Per bucket, in
 * order:
 *     scale  f32 LE, 4 bytes
 *     codes  ceil(m / 8) bytes; element j of the bucket is bit j % 8 of byte j / 8
 *            (LSB first); pad bits are zero
 * so payload_bytes = (count / B) * (4 + ceil(B / 8)) + (m ? 4 + ceil(m / 8) : 0).
 *
 * Arithmetic that defines the frame (fp32, round to nearest even, no FMA), bucket
 * elements x[j], j < m:
 *     v[j]   = x[j] if finite, else +0.0f (and base + j becomes an exception)
 *     sum    = canon_sum_abs(v, m)          the canonical 16-lane order
 *     f      = number of finite x[j]
 *     scale  = f ? sum / (float)f : 0.0f
 *     bit[j] = signbit(v[j])                so -0.0 codes 1, non-finite codes 0
 *     dec[j] = bit[j] ? -scale : scale      (-scale is scale with its sign flipped)
 * If scale is not finite (sum overflowed) every element of the bucket is an
 * exception and the bucket is sent as scale 0.0f, all bits 0.
 * Error feedback leaves x[j] - dec[j], and 0 at exception indices.
 * validate: exact size, every scale finite with its sign bit clear, pad bits zero.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "common/result.h"
#include "compress/bucket.h"
#include "compress/codec.h"
#include "compress/codec_math.h"
#include "compress/codec_util.h"
#include "compress/crc32c.h"

/* Elements decoded at a time into a stack buffer: 4 KiB stays in L1 next to the
 * dst block it is added to. A multiple of 8 so chunks start on a code byte. */
#define SIGN_DECODE_CHUNK 1024

/* The payload CRC is extended every this many bytes, while they are still in L1
 * (a second pass over the payload would read it back from L3). */
#define SIGN_CRC_SPAN 4096

/* Both paths with the SIMD choice made by the caller (simd = 0: portable scalar;
 * 1: AVX2 when the CPU has it), so tests can compare their bytes. */
gcclResult_t sign_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h, int simd);
gcclResult_t sign_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                              size_t nexc, void* dst, int simd, int store);

static int have_avx2(void) {
  return __builtin_cpu_supports("avx2");
}

/* Payload bytes for count elements in buckets of `bucket`; 0 if that overflows. */
static int sign_payload_size(uint64_t count, uint64_t bucket, uint64_t* out) {
  return bucket_payload_size(count, bucket, 4, 1, out);
}

static size_t sign_payload_bound(const struct codec_spec* s, size_t n) {
  return bucket_payload_bound(n, s->bucket, 4, 1);
}

/* ---- portable scalar kernels --------------------------------------------------- */

/* Codes of v[0, m) (finite) at codes, and with resid, resid[j] = v[j] - dec[j]. */
static void sign_codes_scalar(const float* v, size_t m, float scale, unsigned char* codes, float* resid) {
  memset(codes, 0, (m + 7) / 8);
  for (size_t j = 0; j < m; j++) {
    uint32_t bit = sign_bit(v[j]);
    codes[j / 8] |= (unsigned char)(bit << (j % 8));
    if (resid) resid[j] = v[j] - sign_dequant(bit, scale);
  }
}

static void sign_expand_scalar(const unsigned char* codes, size_t m, float scale, float* out) {
  for (size_t j = 0; j < m; j++) out[j] = sign_dequant((codes[j / 8] >> (j % 8)) & 1, scale);
}

/* ---- AVX2 kernels (bit-identical to the scalar ones) ----------------------------- */

/* *sum = canon_sum_abs(v, m); returns 0 if some v[j] is not finite (*sum is then
 * meaningless). Lanes 0-7 of canon_sum_abs live in acc0, lanes 8-15 in acc1; the
 * tail adds +0.0 to unused lanes, which leaves them unchanged (they are >= +0). */
__attribute__((target("avx2"))) static int sign_sum_avx2(const float* v, size_t m, float* sum) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i maxfin = _mm256_set1_epi32(0x7F7FFFFF);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= m; i += 16) {
    __m256 a = _mm256_and_ps(_mm256_loadu_ps(v + i), absmask);
    __m256 b = _mm256_and_ps(_mm256_loadu_ps(v + i + 8), absmask);
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(a), maxfin));
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(b), maxfin));
    acc0 = _mm256_add_ps(acc0, a);
    acc1 = _mm256_add_ps(acc1, b);
  }
  if (i < m) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int r = (int)(m - i);
    __m256i k0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(r), iota);
    __m256i k1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(r - 8), iota);
    __m256 a = _mm256_and_ps(_mm256_maskload_ps(v + i, k0), absmask);
    __m256 b = _mm256_and_ps(_mm256_maskload_ps(v + i + 8, k1), absmask);
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(a), maxfin));
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(b), maxfin));
    acc0 = _mm256_add_ps(acc0, a);
    acc1 = _mm256_add_ps(acc1, b);
  }
  /* lane[j] += lane[j + w] for w = 8, 4, 2, 1. */
  __m256 s8 = _mm256_add_ps(acc0, acc1);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  *sum = _mm_cvtss_f32(s1);
  return _mm256_testz_si256(bad, bad);
}

__attribute__((target("avx2"))) static void sign_codes_avx2(const float* v, size_t m, float scale, unsigned char* codes,
                                                            float* resid) {
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
  if (j < m) sign_codes_scalar(v + j, m - j, scale, codes + j / 8, resid ? resid + j : NULL);
}

/* out[j] = bit ? -scale : scale, as scale xor (bit << 31). */
__attribute__((target("avx2"))) static void sign_expand_avx2(const unsigned char* codes, size_t m, float scale,
                                                             float* out) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 sc = _mm256_set1_ps(scale);
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    __m256i b = _mm256_and_si256(_mm256_set1_epi32(codes[j / 8]), sel);
    __m256i flip = _mm256_slli_epi32(_mm256_cmpeq_epi32(b, sel), 31);
    _mm256_storeu_ps(out + j, _mm256_xor_ps(sc, _mm256_castsi256_ps(flip)));
  }
  if (j < m) sign_expand_scalar(codes + j / 8, m - j, scale, out + j);
}

/* dst[j] += dec[j] (add = 1, the same float adds as block_accumulate) or
 * dst[j] = 0.0f + dec[j] (add = 0, decode_store_f32) for fp32 dst, without a stack
 * round trip. Stores stream past the cache when dst is 32-byte aligned: a stored
 * output is not read again soon, and a streamed line is not read in first. */
__attribute__((target("avx2"), always_inline)) static inline void sign_expand_f32_avx2_body(const unsigned char* codes,
                                                                                            size_t m, float scale,
                                                                                            float* dst, int add) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 sc = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  int stream = !add && ((uintptr_t)dst & 31) == 0;
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    __m256i b = _mm256_and_si256(_mm256_set1_epi32(codes[j / 8]), sel);
    __m256i flip = _mm256_slli_epi32(_mm256_cmpeq_epi32(b, sel), 31);
    __m256 d = _mm256_xor_ps(sc, _mm256_castsi256_ps(flip));
    d = _mm256_add_ps(add ? _mm256_loadu_ps(dst + j) : zero, d);
    if (stream)
      _mm256_stream_ps(dst + j, d);
    else
      _mm256_storeu_ps(dst + j, d);
  }
  for (; j < m; j++) dst[j] = (add ? dst[j] : 0.0f) + (((codes[j / 8] >> (j % 8)) & 1) ? -scale : scale);
}

__attribute__((target("avx2"))) static void sign_expand_add_f32_avx2(const unsigned char* codes, size_t m, float scale,
                                                                     float* dst) {
  sign_expand_f32_avx2_body(codes, m, scale, dst, 1);
}

__attribute__((target("avx2"))) static void sign_expand_store_f32_avx2(const unsigned char* codes, size_t m,
                                                                       float scale, float* dst) {
  sign_expand_f32_avx2_body(codes, m, scale, dst, 0);
}

/* ---- encode ---------------------------------------------------------------------- */

/* One bucket x[0, m) at global index base: meta and codes at out. */
static gcclResult_t sign_encode_bucket(struct encode_ctx* ctx, struct bucket_state* st, const float* x, float* resid,
                                       size_t m, uint64_t base, unsigned char* out, int simd) {
  struct exc_list* exc = ctx->exc;
  const float* v = x;
  float sum = 0.0f;
  size_t nexc0 = exc->n;
  int finite = simd ? sign_sum_avx2(x, m, &sum) : all_finite(x, m);
  if (!finite) {
    GCCL_CHECK(sanitize_block(x, m, base, st->tmp, exc));
    v = st->tmp;
    if (simd) sign_sum_avx2(v, m, &sum);
  }
  if (!simd) sum = canon_sum_abs(v, m);
  size_t nf = m - (exc->n - nexc0);
  float scale = sign_scale(sum, nf);
  if (!f32_finite(scale)) {
    GCCL_CHECK(exc_push_range(exc, base, m));
    put_f32(out, 0.0f);
    memset(out + 4, 0, (m + 7) / 8);
    if (resid) memset(resid, 0, m * sizeof(float));
    return gcclSuccess;
  }
  put_f32(out, scale);
  if (simd)
    sign_codes_avx2(v, m, scale, out + 4, resid);
  else
    sign_codes_scalar(v, m, scale, out + 4, resid);
  if (resid)
    for (size_t e = nexc0; e < exc->n; e++) resid[exc->idx[e] - base] = 0.0f;
  return gcclSuccess;
}

gcclResult_t sign_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h, int simd) {
  struct bucket_state* st = ctx->state;
  size_t bucket = ctx->spec->bucket;
  size_t need = n < bucket ? n : bucket;
  if (st == NULL || st->cap < need)
    return err_set(gcclInternalError, "sign: codec state made for fewer than %zu elements", need);
  simd = simd && have_avx2();
  unsigned char* out = payload;
  const unsigned char* crc_from = payload;
  uint32_t crc = 0;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    encode_fill(ctx, base, m);
    GCCL_CHECK(sign_encode_bucket(ctx, st, x + base, resid ? resid + base : NULL, m, base, out, simd));
    out += 4 + (m + 7) / 8;
    if ((size_t)(out - crc_from) >= SIGN_CRC_SPAN) {
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

static gcclResult_t sign_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                                size_t* payload_bytes, struct frame_header* h) {
  return sign_encode_path(ctx, x, resid, n, payload, payload_bytes, h, 1);
}

/* ---- validate and decode ------------------------------------------------------------ */

static uint64_t sign_payload_offset(const struct frame_header* h, uint64_t first) {
  uint64_t off = 0;
  sign_payload_size(first, h->bucket, &off); /* first <= count: no overflow in a valid frame */
  return off;
}

static gcclResult_t sign_validate(const struct frame_header* h, const unsigned char* payload) {
  uint64_t expect;
  if (h->bucket == 0) return err_set(gcclCorruptData, "sign: bucket 0"); /* frame_validate excludes it too */
  if (!sign_payload_size(h->count, h->bucket, &expect))
    return err_set(gcclCorruptData, "sign: payload size for %llu elements overflows", (unsigned long long)h->count);
  if (h->payload_bytes != expect)
    return err_set(gcclCorruptData, "sign: payload is %llu bytes, %llu elements in buckets of %u need %llu",
                   (unsigned long long)h->payload_bytes, (unsigned long long)h->count, (unsigned)h->bucket,
                   (unsigned long long)expect);
  const unsigned char* p = payload;
  for (uint64_t base = 0; base < h->count; base += h->bucket) {
    uint64_t m = h->count - base < h->bucket ? h->count - base : h->bucket;
    uint32_t u = get_u32le(p);
    if ((u & 0x7F800000u) == 0x7F800000u || (u >> 31))
      return err_set(gcclCorruptData, "sign: bucket at element %llu has scale %g (must be finite and >= +0)",
                     (unsigned long long)base, (double)get_f32(p));
    size_t nbytes = (size_t)((m + 7) / 8);
    if (m % 8 && (p[4 + nbytes - 1] >> (m % 8)))
      return err_set(gcclCorruptData, "sign: bucket at element %llu has nonzero pad bits", (unsigned long long)base);
    p += 4 + nbytes;
  }
  return gcclSuccess;
}

gcclResult_t sign_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                              size_t nexc, void* dst, int simd, int store) {
  float v[SIGN_DECODE_CHUNK];
  size_t n = (size_t)h->count, bucket = h->bucket, cursor = 0;
  simd = simd && have_avx2();
  const unsigned char* p = payload;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    float scale = get_f32(p);
    const unsigned char* codes = p + 4;
    for (size_t j = 0; j < m; j += SIGN_DECODE_CHUNK) {
      size_t c = m - j < SIGN_DECODE_CHUNK ? m - j : SIGN_DECODE_CHUNK;
      size_t at = base + j;
      /* An fp32 chunk without exceptions adds in registers: 2.5x faster than the
       * stack buffer + block_accumulate when dst is in cache. */
      int clean = cursor >= nexc || exc[cursor] >= at + c;
      if (simd && clean && h->dtype == gcclFloat32) {
        (store ? sign_expand_store_f32_avx2 : sign_expand_add_f32_avx2)(codes + j / 8, c, scale, (float*)dst + at);
        continue;
      }
      if (simd)
        sign_expand_avx2(codes + j / 8, c, scale, v);
      else
        sign_expand_scalar(codes + j / 8, c, scale, v);
      if (store) memset((float*)dst + at, 0, c * sizeof(float)); /* in L1 for the add that follows */
      block_accumulate(dst, h->dtype, at, v, c, exc, nexc, &cursor);
    }
    p += 4 + (m + 7) / 8;
  }
  if (store && simd) _mm_sfence(); /* streamed stores are ordered before what follows */
  return gcclSuccess;
}

static gcclResult_t sign_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                           const uint64_t* exc, size_t nexc, void* dst) {
  return sign_decode_path(h, payload, exc, nexc, dst, 1, 0);
}

static gcclResult_t sign_decode_store_f32(const struct frame_header* h, const unsigned char* payload,
                                          const uint64_t* exc, size_t nexc, float* dst) {
  return sign_decode_path(h, payload, exc, nexc, dst, 1, 1);
}

const struct codec_ops codec_sign_ops = {
    .payload_bound = sign_payload_bound,
    .state_create = bucket_state_create,
    .state_destroy = bucket_state_destroy,
    .encode = sign_encode,
    .fills_input = 1,
    .validate = sign_validate,
    .decode_accumulate = sign_decode_accumulate,
    .decode_store_f32 = sign_decode_store_f32,
    .payload_offset = sign_payload_offset,
};
