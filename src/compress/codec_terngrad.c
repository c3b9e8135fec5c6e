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
 * kernels; the loops around a bucket are bucket.h's; the AVX2 paths
 * (codec_terngrad_avx2.c) compute the same bits as the scalar ones (tested).
 */
#include <string.h>

#include "common/result.h"
#include "compress/bucket.h"
#include "compress/bucket_avx2.h"
#include "compress/codec.h"
#include "compress/codec_math.h"
#include "compress/codec_util.h"
#include "compress/rng.h"

/* Both paths with the SIMD choice made by the caller (simd = 0: portable scalar;
 * 1: AVX2 when the CPU has it), so tests can compare their bytes. */
gcclResult_t terngrad_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n,
                                  unsigned char* payload, size_t* payload_bytes, struct frame_header* h, int simd);
gcclResult_t terngrad_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                  size_t nexc, void* dst, int simd);

static size_t tern_payload_bound(const struct codec_spec* s, size_t n) {
  return bucket_payload_bound(n, s->bucket, 4, 2);
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

/* ---- the bucket codec (bucket.h) ------------------------------------------------------ */

/* Stats: max |x| (a). */
static int tern_scan(const float* x, size_t m, int simd, struct bucket_stats* s) {
#ifdef BUCKET_HAVE_X86
  if (simd) return tern_max_avx2(x, m, &s->a);
#else
  (void)simd;
#endif
  if (!all_finite(x, m)) return 0;
  s->a = max_abs(x, m);
  return 1;
}

static void tern_rescan(const float* x, const float* v, size_t m, int simd, struct bucket_stats* s) {
  (void)x;
#ifdef BUCKET_HAVE_X86
  if (simd) {
    tern_max_avx2(v, m, &s->a);
    return;
  }
#else
  (void)simd;
#endif
  s->a = max_abs(v, m);
}

static int tern_quantize(const struct encode_ctx* ctx, const struct bucket_stats* s, const struct bucket_in* b,
                         unsigned char* out, const unsigned char* end, int simd) {
  (void)end;
  float scale = s->a;
  if (!f32_finite(scale)) return 0;
  put_f32(out, scale);
  size_t done = 0;
#ifdef BUCKET_HAVE_X86
  /* The AVX2 kernel assumes the bucket's indices share their high half; a bucket
   * that crosses a multiple of 2^32 (one per 2^32 elements) takes the scalar one. */
  if (simd && (b->base >> 32) == ((b->base + b->m - 1) >> 32))
    done = tern_codes_avx2(b->v, b->m, b->base, ctx->key, scale, out + 4, b->resid);
#else
  (void)simd;
#endif
  if (done < b->m)
    tern_codes_scalar(b->v + done, b->m - done, b->base + done, ctx->key, scale, out + 4 + done / 4,
                      b->resid ? b->resid + done : NULL);
  return 1;
}

static gcclResult_t tern_check(const struct frame_header* h, const unsigned char* p, uint64_t m, uint64_t base,
                               size_t nbytes, const unsigned char* end, int simd) {
  (void)h, (void)end, (void)simd;
  GCCL_CHECK(bucket_check_scale("terngrad", p, base));
  if (tern_has_code3(p + 4, nbytes))
    return err_set(gcclCorruptData, "terngrad: bucket at element %llu holds the illegal code 3",
                   (unsigned long long)base);
  return bucket_check_pad("terngrad", p + 4, m, 2, nbytes, base);
}

static void tern_param(const unsigned char* meta, unsigned bits, union bucket_param* q) {
  (void)bits;
  q->scale = get_f32(meta);
}

static void tern_expand(const union bucket_param* q, const unsigned char* codes, const unsigned char* end, size_t c,
                        unsigned bits, float* out, enum bucket_expand mode, int simd) {
  (void)end, (void)bits;
#ifdef BUCKET_HAVE_X86
  if (simd) {
    tern_expand_avx2(codes, c, q->scale, out, mode);
    return;
  }
#else
  (void)simd, (void)mode;
#endif
  tern_expand_scalar(codes, c, q->scale, out);
}

static const struct bucket_codec tern_codec = {
    .name = "terngrad",
    .meta_bytes = 4,
    .bits_in_header = 0,
    .scan = tern_scan,
    .rescan = tern_rescan,
    .quantize = tern_quantize,
    .check = tern_check,
    .param = tern_param,
    .expand = tern_expand,
};

/* ---- codec_ops ------------------------------------------------------------------------ */

gcclResult_t terngrad_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n,
                                  unsigned char* payload, size_t* payload_bytes, struct frame_header* h, int simd) {
  return bucket_encode(&tern_codec, ctx, x, resid, n, payload, payload_bytes, h, 2, simd && bucket_have_avx2());
}

static gcclResult_t tern_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                                size_t* payload_bytes, struct frame_header* h) {
  return terngrad_encode_path(ctx, x, resid, n, payload, payload_bytes, h, 1);
}

static gcclResult_t tern_validate(const struct frame_header* h, const unsigned char* payload) {
  return bucket_validate(&tern_codec, h, payload, 2, 0);
}

gcclResult_t terngrad_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                  size_t nexc, void* dst, int simd) {
  return bucket_decode(&tern_codec, h, payload, exc, nexc, dst, 2, simd && bucket_have_avx2(), 0);
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
