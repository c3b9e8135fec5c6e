/* codec_uniform.c — uniform: min-max affine quantization to 1..8 bits per bucket (CGX-style). */
/*
 * Payload (B = h->bucket, b = h->bits, L = 2^b - 1): the tensor is cut into
 * buckets of B elements, the last one m = count % B elements if that is not 0.
 * Per bucket, in order:
 *     min    f32 LE, 4 bytes
 *     max    f32 LE, 4 bytes
 *     codes  ceil(m * b / 8) bytes; element j of the bucket occupies bits
 *            [j * b, (j + 1) * b), bit t being bit t % 8 of byte t / 8 (LSB
 *            first); pad bits are zero
 * so payload_bytes = (count / B) * (8 + ceil(B * b / 8)) + (m ? 8 + ceil(m * b / 8) : 0),
 * and a bucket's offset is computable (random access for a GPU kernel). Header:
 * bits = b, bucket = B, values = k = rng_key = flags = 0 (decoding needs no key).
 *
 * Arithmetic that defines the frame (fp32, round to nearest even, no FMA), bucket
 * elements x[j], j < m, at global index g = base + j:
 *     v[j]  = x[j] if finite, else +0.0f (and g becomes an exception)
 *     min   = (smallest finite x[j]) + 0.0f, max = (largest finite x[j]) + 0.0f
 *             (the + 0.0f turns -0 into +0); both +0.0f if no x[j] is finite
 *     r     = max - min
 *     step  = r / (float)L
 *     inv   = r > 0 ? (float)L / r : 0;  inv = 0 if that is not finite (r tiny)
 *     u[j]  = 0.5f (round=nearest), or (stochastic) uq_uniform(ctx->key, base, j)
 *             = rng_uniform16(ctx->key, base + (j & ~15) + (j & 7), (j >> 3) & 1):
 *             in each group of 16 elements of a bucket, elements i and i + 8
 *             (i < 8) split one draw, keyed by the index of the first
 *     t     = (v[j] - min) * inv + u[j]
 *     q[j]  = (uint32)min(max(t, 0.0f), (float)L)   truncation: = clamp(floor(t), 0, L)
 *     dec   = min + (float)q[j] * step
 * If r or min + (float)L * step is not finite (the bucket's range overflows fp32),
 * every element of the bucket is an exception and the bucket is sent as min = max
 * = 0.0f, all codes 0. So every decoded value is finite.
 * Error feedback leaves x[j] - dec[j], and 0 at exception indices.
 * validate: exact size; per bucket min and max finite, min <= max, r and
 * min + L * step finite; pad bits zero.
 *
 * The loops around a bucket are bucket.h's; the AVX2 paths (codec_uniform_avx2.c)
 * compute the same bits as the scalar ones here (tested; min and max do not
 * depend on the order, and -0/+0 ties vanish with the + 0.0f).
 */
#include <string.h>

#include "common/result.h"
#include "compress/bucket.h"
#include "compress/bucket_avx2.h"
#include "compress/codec.h"
#include "compress/codec_math.h"
#include "compress/codec_util.h"
#include "compress/rng.h"

static int have_avx2(void) {
  return !codec_force_scalar && bucket_have_avx2();
}

static size_t uq_payload_bound(const struct codec_spec* s, size_t n) {
  return bucket_payload_bound(n, s->bucket, 8, s->bits);
}

static uint64_t uq_payload_offset(const struct frame_header* h, uint64_t first) {
  return bucket_payload_offset(h, 8, h->bits, first);
}

/* ---- portable scalar kernels --------------------------------------------------- */

/* min and max of the finite x[j] (both +0 if none); returns 1 if all are finite. */
static int uq_minmax_scalar(const float* x, size_t m, float* mn, float* mx) {
  float lo = 0.0f, hi = 0.0f;
  int any = 0, all = 1;
  for (size_t j = 0; j < m; j++) {
    if (!f32_finite(x[j])) {
      all = 0;
    } else if (!any) {
      lo = hi = x[j];
      any = 1;
    } else {
      lo = x[j] < lo ? x[j] : lo;
      hi = x[j] > hi ? x[j] : hi;
    }
  }
  *mn = lo;
  *mx = hi;
  return all;
}

/* Writes the codes of one group of up to 8 elements: w holds code k in byte k
 * (0 beyond r), packed to r * bits bits = ceil(r * bits / 8) bytes at out. */
static inline void uq_put_group(uint64_t w, unsigned bits, unsigned char* out, size_t r) {
  uint64_t acc = w;
  if (bits != 8) {
    acc = 0;
    for (unsigned k = 0; k < 8; k++) acc |= ((w >> (8 * k)) & 0xFF) << (k * bits);
  }
  size_t nb = (r * bits + 7) / 8;
  for (size_t i = 0; i < nb; i++) out[i] = (unsigned char)(acc >> (8 * i));
}

/* Codes of elements [from, m) of a bucket v (finite) at codes, the bucket's
 * codes; with resid, resid[j] = v[j] - dec[j]. from is a multiple of 8, base the
 * global index of v[0]; key is NULL for round=nearest. */
static void uq_codes_scalar(const float* v, size_t from, size_t m, uint64_t base, const struct uq_bucket* p,
                            unsigned bits, const uint64_t* key, unsigned char* codes, float* resid) {
  for (size_t j = from; j < m; j += 8) {
    size_t r = m - j < 8 ? m - j : 8;
    uint64_t w = 0;
    for (size_t k = 0; k < r; k++) {
      float u = key ? uq_uniform(*key, base, j + k) : 0.5f;
      uint32_t q = uq_quant(v[j + k], p, u);
      w |= (uint64_t)q << (8 * k);
      if (resid) resid[j + k] = v[j + k] - uq_dequant(q, p);
    }
    uq_put_group(w, bits, codes + j / 8 * bits, r);
  }
}

static void uq_expand_scalar(const unsigned char* codes, size_t c, unsigned bits, const struct uq_bucket* p,
                             float* out) {
  for (size_t j = 0; j < c; j++) out[j] = uq_dequant(uq_get_code(codes, j, bits), p);
}

/* ---- the bucket codec (bucket.h) ------------------------------------------------------ */

/* Stats: min (a) and max (b) of the finite values. */
static int uq_scan(const float* x, size_t m, int simd, struct bucket_stats* s) {
#ifdef BUCKET_HAVE_X86
  if (simd && m >= 16) return uq_minmax_avx2(x, m, &s->a, &s->b);
#else
  (void)simd;
#endif
  return uq_minmax_scalar(x, m, &s->a, &s->b);
}

static void uq_rescan(const float* x, const float* v, size_t m, int simd, struct bucket_stats* s) {
  (void)v, (void)simd;
  uq_minmax_scalar(x, m, &s->a, &s->b);
}

static int uq_quantize(const struct encode_ctx* ctx, const struct bucket_stats* s, const struct bucket_in* b,
                       unsigned char* out, const unsigned char* end, int simd) {
  unsigned bits = ctx->spec->bits;
  float mn = s->a + 0.0f, mx = s->b + 0.0f;
  struct uq_bucket p;
  if (!uq_bucket_make(mn, mx, bits, &p)) return 0;
  put_f32(out, mn);
  put_f32(out + 4, mx);
  int stochastic = ctx->spec->round == SPEC_ROUND_STOCHASTIC;
  size_t done = 0;
#ifdef BUCKET_HAVE_X86
  /* The AVX2 stream keeps the index's high half fixed: a bucket that crosses a
   * multiple of 2^32 elements (at most one per 4 Gi elements) takes the scalar path. */
  if (simd && stochastic && (b->base >> 32) != ((b->base + b->m - 1) >> 32)) simd = 0;
  if (simd) done = uq_codes_avx2(b->v, b->m, b->base, &p, bits, ctx->key, stochastic, out + 8, end, b->resid);
#else
  (void)simd, (void)end;
#endif
  uq_codes_scalar(b->v, done, b->m, b->base, &p, bits, stochastic ? &ctx->key : NULL, out + 8, b->resid);
  return 1;
}

static gcclResult_t uq_check(const struct frame_header* h, const unsigned char* p, uint64_t m, uint64_t base,
                             size_t nbytes, const unsigned char* end, int simd) {
  (void)end, (void)simd;
  float mn = get_f32(p), mx = get_f32(p + 4);
  struct uq_bucket q;
  if (!f32_finite(mn) || !f32_finite(mx) || !(mn <= mx) || !uq_bucket_make(mn, mx, h->bits, &q))
    return err_set(gcclCorruptData, "uniform: bucket at element %llu has min %g, max %g (need finite min <= max)",
                   (unsigned long long)base, (double)mn, (double)mx);
  return bucket_check_pad("uniform", p + 8, m, h->bits, nbytes, base);
}

static void uq_param(const unsigned char* meta, unsigned bits, union bucket_param* q) {
  uq_bucket_make(get_f32(meta), get_f32(meta + 4), bits, &q->uq); /* validate checked it succeeds */
}

static void uq_expand(const union bucket_param* q, const unsigned char* codes, const unsigned char* end, size_t c,
                      unsigned bits, float* out, enum bucket_expand mode, int simd) {
#ifdef BUCKET_HAVE_X86
  if (simd) {
    uq_expand_avx2(&q->uq, codes, end, c, bits, out, mode);
    return;
  }
#else
  (void)simd, (void)end, (void)mode;
#endif
  uq_expand_scalar(codes, c, bits, &q->uq, out);
}

static const struct bucket_codec uq_codec = {
    .name = "uniform",
    .meta_bytes = 8,
    .bits_in_header = 1,
    .scan = uq_scan,
    .rescan = uq_rescan,
    .quantize = uq_quantize,
    .check = uq_check,
    .param = uq_param,
    .expand = uq_expand,
};

/* ---- codec_ops ------------------------------------------------------------------------ */

static gcclResult_t uq_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h) {
  return bucket_encode(&uq_codec, ctx, x, resid, n, payload, payload_bytes, h, ctx->spec->bits, have_avx2());
}

static gcclResult_t uq_validate(const struct frame_header* h, const unsigned char* payload) {
  return bucket_validate(&uq_codec, h, payload, h->bits, 0);
}

static gcclResult_t uq_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                         const uint64_t* exc, size_t nexc, void* dst) {
  return bucket_decode(&uq_codec, h, payload, exc, nexc, dst, h->bits, have_avx2(), 0);
}

static gcclResult_t uq_decode_store_f32(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                        size_t nexc, float* dst) {
  return bucket_decode(&uq_codec, h, payload, exc, nexc, dst, h->bits, have_avx2(), 1);
}

const struct codec_ops codec_uniform_ops = {
    .payload_bound = uq_payload_bound,
    .state_create = bucket_state_create,
    .state_destroy = bucket_state_destroy,
    .encode = uq_encode,
    .fills_input = 1,
    .validate = uq_validate,
    .decode_accumulate = uq_decode_accumulate,
    .decode_store_f32 = uq_decode_store_f32,
    .payload_offset = uq_payload_offset,
};
