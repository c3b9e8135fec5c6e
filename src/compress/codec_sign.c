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
 * The loops around a bucket are bucket.h's; the AVX2 paths (codec_sign_avx2.c)
 * compute the same bits as the scalar ones (tested).
 */
#include <string.h>

#include "common/result.h"
#include "compress/bucket.h"
#include "compress/bucket_avx2.h"
#include "compress/codec.h"
#include "compress/codec_math.h"
#include "compress/codec_util.h"

/* Both paths with the SIMD choice made by the caller (simd = 0: portable scalar;
 * 1: AVX2 when the CPU has it), so tests can compare their bytes. */
gcclResult_t sign_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h, int simd);
gcclResult_t sign_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                              size_t nexc, void* dst, int simd, int store);

static size_t sign_payload_bound(const struct codec_spec* s, size_t n) {
  return bucket_payload_bound(n, s->bucket, 4, 1);
}

static uint64_t sign_payload_offset(const struct frame_header* h, uint64_t first) {
  return bucket_payload_offset(h, 4, 1, first);
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

/* ---- the bucket codec (bucket.h) ------------------------------------------------------ */

/* Stats: the canonical sum of |x| (a). */
static int sign_scan(const float* x, size_t m, int simd, struct bucket_stats* s) {
#ifdef BUCKET_HAVE_X86
  if (simd) return sign_sum_avx2(x, m, &s->a);
#else
  (void)simd;
#endif
  if (!all_finite(x, m)) return 0;
  s->a = canon_sum_abs(x, m);
  return 1;
}

static void sign_rescan(const float* x, const float* v, size_t m, int simd, struct bucket_stats* s) {
  (void)x;
#ifdef BUCKET_HAVE_X86
  if (simd) {
    sign_sum_avx2(v, m, &s->a);
    return;
  }
#else
  (void)simd;
#endif
  s->a = canon_sum_abs(v, m);
}

static int sign_quantize(const struct encode_ctx* ctx, const struct bucket_stats* s, const struct bucket_in* b,
                         unsigned char* out, const unsigned char* end, int simd) {
  (void)ctx, (void)end;
  float scale = sign_scale(s->a, b->nf);
  if (!f32_finite(scale)) return 0;
  put_f32(out, scale);
  size_t done = 0;
#ifdef BUCKET_HAVE_X86
  if (simd) done = sign_codes_avx2(b->v, b->m, scale, out + 4, b->resid);
#else
  (void)simd;
#endif
  if (done < b->m)
    sign_codes_scalar(b->v + done, b->m - done, scale, out + 4 + done / 8, b->resid ? b->resid + done : NULL);
  return 1;
}

static gcclResult_t sign_check(const struct frame_header* h, const unsigned char* p, uint64_t m, uint64_t base,
                               size_t nbytes, const unsigned char* end, int simd) {
  (void)h, (void)end, (void)simd;
  GCCL_CHECK(bucket_check_scale("sign", p, base));
  return bucket_check_pad("sign", p + 4, m, 1, nbytes, base);
}

static void sign_param(const unsigned char* meta, unsigned bits, union bucket_param* q) {
  (void)bits;
  q->scale = get_f32(meta);
}

static void sign_expand(const union bucket_param* q, const unsigned char* codes, const unsigned char* end, size_t c,
                        unsigned bits, float* out, enum bucket_expand mode, int simd) {
  (void)end, (void)bits;
#ifdef BUCKET_HAVE_X86
  if (simd) {
    sign_expand_avx2(codes, c, q->scale, out, mode);
    return;
  }
#else
  (void)simd, (void)mode;
#endif
  sign_expand_scalar(codes, c, q->scale, out);
}

static const struct bucket_codec sign_codec = {
    .name = "sign",
    .meta_bytes = 4,
    .bits_in_header = 0,
    .scan = sign_scan,
    .rescan = sign_rescan,
    .quantize = sign_quantize,
    .check = sign_check,
    .param = sign_param,
    .expand = sign_expand,
};

/* ---- codec_ops ------------------------------------------------------------------------ */

gcclResult_t sign_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h, int simd) {
  return bucket_encode(&sign_codec, ctx, x, resid, n, payload, payload_bytes, h, 1, simd && bucket_have_avx2());
}

static gcclResult_t sign_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                                size_t* payload_bytes, struct frame_header* h) {
  return sign_encode_path(ctx, x, resid, n, payload, payload_bytes, h, 1);
}

static gcclResult_t sign_validate(const struct frame_header* h, const unsigned char* payload) {
  return bucket_validate(&sign_codec, h, payload, 1, 0);
}

gcclResult_t sign_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                              size_t nexc, void* dst, int simd, int store) {
  return bucket_decode(&sign_codec, h, payload, exc, nexc, dst, 1, simd && bucket_have_avx2(), store);
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
