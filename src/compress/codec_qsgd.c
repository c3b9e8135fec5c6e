/* codec_qsgd.c — qsgd: unbiased stochastic quantization of |x| / norm to b bits plus a sign (Alistarh et al.). */
/*
 * Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient Quantization
 * and Encoding", NeurIPS 2017: per bucket, |x[j]| / ||x|| rounded stochastically
 * to one of s + 1 levels, s = 2^b - 1, so the decoded bucket is unbiased with
 * variance at most min(n / s^2, sqrt(n) / s) ||x||^2 (their Lemma 3.1).
 *
 * Payload (B = h->bucket, b = h->bits, w = b + 1 bits per code): the tensor is
 * cut into buckets of B elements, the last one m = count % B elements if that is
 * not 0. Per bucket, in order:
 *     norm   f32 LE, 4 bytes
 *     codes  ceil(m * w / 8) bytes; element j of the bucket occupies bits
 *            [j * w, (j + 1) * w), bit t being bit t % 8 of byte t / 8 (LSB
 *            first); pad bits are zero. code = l | neg << b.
 * so payload_bytes = (count / B) * (4 + ceil(B * w / 8)) + (m ? 4 + ceil(m * w / 8) : 0),
 * and a bucket's offset is computable (random access for a GPU kernel). Header:
 * bits = b, bucket = B, values = k = rng_key = flags = 0 (decoding needs no key).
 *
 * Arithmetic that defines the frame (fp32, round to nearest even, no FMA; sqrtf
 * correctly rounded), bucket elements x[j], j < m, at global index g = base + j:
 *     v[j]  = x[j] if finite, else +0.0f (and g becomes an exception)
 *     norm  = sqrtf(canon_sum_sq(v, m))       the canonical 16-lane order
 *     s     = (float)(2^b - 1)
 *     step  = norm / s
 *     inv   = norm > 0 ? s / norm : 0;  inv = 0 if that is not finite (norm tiny)
 *     t     = fabsf(v[j]) * inv + rng_uniform(ctx->key, g)
 *     l[j]  = (uint32)min(t, s)               truncation: = min(floor(t), s), t >= 0
 *     neg   = l[j] != 0 && signbit(v[j])
 *     dec   = neg ? -((float)l[j] * step) : (float)l[j] * step
 * If norm or s * step is not finite (the sum of squares overflowed), every element
 * of the bucket is an exception and the bucket is sent as norm 0.0f, all codes 0.
 * So every decoded value is finite.
 * Error feedback leaves x[j] - dec[j], and 0 at exception indices.
 * validate: exact size; every norm finite with its sign bit clear and s * step
 * finite; no code with neg set and l = 0; pad bits zero.
 *
 * The per-element and per-bucket arithmetic is in codec_math.h (qs_*), shared
 * with the CUDA kernels; the loops around a bucket are bucket.h's; the AVX2
 * paths (codec_qsgd_avx2.c) compute the same bits as the scalar ones (tested).
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

static size_t qs_payload_bound(const struct codec_spec* s, size_t n) {
  return bucket_payload_bound(n, s->bucket, 4, s->bits + 1);
}

/* ---- portable scalar kernels --------------------------------------------------- */

/* Codes of v[0, m) (finite) at codes; with resid, resid[j] = v[j] - dec[j]. g0 is
 * the global index of v[0]. */
static void qs_codes_scalar(const float* v, size_t m, uint64_t g0, const struct qs_bucket* p, uint64_t key,
                            unsigned char* codes, float* resid) {
  unsigned w = p->b + 1;
  for (size_t j = 0; j < m; j += 8) {
    size_t r = m - j < 8 ? m - j : 8;
    uint32_t c[8] = {0};
    for (size_t k = 0; k < r; k++) {
      c[k] = qs_quant(v[j + k], p, rng_uniform(key, g0 + j + k));
      if (resid) resid[j + k] = v[j + k] - qs_dequant(c[k], p);
    }
    qs_put_group(c, w, codes + j / 8 * w, r);
  }
}

/* 1 if some code of the c at codes is neg with l = 0 (no encoder writes that). */
static int qs_codes_bad_scalar(const unsigned char* codes, size_t c, unsigned b) {
  int bad = 0;
  for (size_t j = 0; j < c; j++) bad |= packed_code_get(codes, j, b + 1) == 1u << b;
  return bad;
}

/* The same for w = b + 1 in {2, 4, 8}, where codes do not straddle bytes: eight
 * code bytes at a time as one word (pad bits are zero codes, which are legal). */
static int qs_codes_bad_swar(const unsigned char* codes, size_t nbytes, unsigned w) {
  const uint64_t ones = 0x0101010101010101u;
  uint64_t bad = 0;
  for (size_t i = 0; i < nbytes; i += 8) {
    uint64_t v = 0;
    if (nbytes - i >= 8)
      memcpy(&v, codes + i, 8);
    else
      memcpy(&v, codes + i, nbytes - i);
    if (w == 2) { /* bit 0 l, bit 1 neg */
      bad |= (v >> 1) & ~v & 0x55 * ones;
    } else if (w == 4) { /* bits 0-2 l, bit 3 neg; (l + 7) & 8 is l != 0, no carry out */
      bad |= v & ~((v & 0x77 * ones) + 0x77 * ones) & 0x88 * ones;
    } else { /* a byte 0x80: a zero byte of v ^ 0x80.. (exact as a yes/no test) */
      uint64_t x = v ^ 0x80 * ones;
      bad |= (x - ones) & ~x & 0x80 * ones;
    }
  }
  return bad != 0;
}

static void qs_expand_scalar(const unsigned char* codes, size_t c, const struct qs_bucket* p, float* out) {
  for (size_t j = 0; j < c; j++) out[j] = qs_dequant(packed_code_get(codes, j, p->b + 1), p);
}

/* ---- the bucket codec (bucket.h) ------------------------------------------------------ */

/* Stats: the canonical sum of squares (a). */
static int qs_scan(const float* x, size_t m, int simd, struct bucket_stats* s) {
#ifdef BUCKET_HAVE_X86
  if (simd) return qs_sumsq_avx2(x, m, &s->a);
#else
  (void)simd;
#endif
  if (!all_finite(x, m)) return 0;
  s->a = canon_sum_sq(x, m);
  return 1;
}

static void qs_rescan(const float* x, const float* v, size_t m, int simd, struct bucket_stats* s) {
  (void)x;
#ifdef BUCKET_HAVE_X86
  if (simd) {
    qs_sumsq_avx2(v, m, &s->a);
    return;
  }
#else
  (void)simd;
#endif
  s->a = canon_sum_sq(v, m);
}

static int qs_quantize(const struct encode_ctx* ctx, const struct bucket_stats* s, const struct bucket_in* b,
                       unsigned char* out, const unsigned char* end, int simd) {
  float norm = qs_norm(s->a);
  struct qs_bucket p;
  if (!qs_bucket_make(norm, ctx->spec->bits, &p)) return 0;
  put_f32(out, norm);
  unsigned w = p.b + 1;
  size_t done = 0;
#ifdef BUCKET_HAVE_X86
  /* The AVX2 stream keeps the index's high half fixed: a bucket that crosses a
   * multiple of 2^32 elements (at most one per 4 Gi elements) takes the scalar path. */
  if (simd && (b->base >> 32) == ((b->base + b->m - 1) >> 32))
    done = qs_codes_avx2(b->v, b->m, b->base, &p, ctx->key, out + 4, end, b->resid);
#else
  (void)simd, (void)end;
#endif
  if (done < b->m)
    qs_codes_scalar(b->v + done, b->m - done, b->base + done, &p, ctx->key, out + 4 + done / 8 * w,
                    b->resid ? b->resid + done : NULL);
  return 1;
}

static gcclResult_t qs_check(const struct frame_header* h, const unsigned char* p, uint64_t m, uint64_t base,
                             size_t nbytes, const unsigned char* end, int simd) {
  unsigned bits = h->bits, w = bits + 1;
  float norm = get_f32(p);
  struct qs_bucket q;
  if ((fb_bits(norm) >> 31) || !qs_bucket_make(norm, bits, &q))
    return err_set(gcclCorruptData, "qsgd: bucket at element %llu has norm %g (must be finite and >= +0)",
                   (unsigned long long)base, (double)norm);
  GCCL_CHECK(bucket_check_pad("qsgd", p + 4, m, w, nbytes, base));
  int bad;
  if (w == 2 || w == 4 || w == 8) {
    bad = qs_codes_bad_swar(p + 4, nbytes, w);
  } else {
    size_t full = (size_t)m / 8 * 8;
#ifdef BUCKET_HAVE_X86
    bad = simd ? qs_codes_bad_avx2(p + 4, end, (size_t)m, bits) ||
                     (full < m && qs_codes_bad_scalar(p + 4 + full / 8 * w, (size_t)m - full, bits))
               : qs_codes_bad_scalar(p + 4, (size_t)m, bits);
#else
    (void)simd, (void)end, (void)full;
    bad = qs_codes_bad_scalar(p + 4, (size_t)m, bits);
#endif
  }
  if (bad)
    return err_set(gcclCorruptData, "qsgd: bucket at element %llu has a code with sign set and level 0",
                   (unsigned long long)base);
  return gcclSuccess;
}

static void qs_param(const unsigned char* meta, unsigned bits, union bucket_param* q) {
  qs_bucket_make(get_f32(meta), bits, &q->qs); /* validate checked it succeeds */
}

static void qs_expand(const union bucket_param* q, const unsigned char* codes, const unsigned char* end, size_t c,
                      unsigned bits, float* out, enum bucket_expand mode, int simd) {
  (void)bits;
#ifdef BUCKET_HAVE_X86
  if (simd) {
    qs_expand_avx2(&q->qs, codes, end, c, out, mode);
    return;
  }
#else
  (void)simd, (void)end, (void)mode;
#endif
  qs_expand_scalar(codes, c, &q->qs, out);
}

static const struct bucket_codec qs_codec = {
    .name = "qsgd",
    .meta_bytes = 4,
    .bits_in_header = 1,
    .scan = qs_scan,
    .rescan = qs_rescan,
    .quantize = qs_quantize,
    .check = qs_check,
    .param = qs_param,
    .expand = qs_expand,
};

/* ---- codec_ops ------------------------------------------------------------------------ */

static gcclResult_t qs_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h) {
  return bucket_encode(&qs_codec, ctx, x, resid, n, payload, payload_bytes, h, ctx->spec->bits + 1, have_avx2());
}

static gcclResult_t qs_validate(const struct frame_header* h, const unsigned char* payload) {
  return bucket_validate(&qs_codec, h, payload, h->bits + 1u, have_avx2());
}

static gcclResult_t qs_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                         const uint64_t* exc, size_t nexc, void* dst) {
  return bucket_decode(&qs_codec, h, payload, exc, nexc, dst, h->bits + 1u, have_avx2(), 0);
}

const struct codec_ops codec_qsgd_ops = {
    .payload_bound = qs_payload_bound,
    .state_create = bucket_state_create,
    .state_destroy = bucket_state_destroy,
    .encode = qs_encode,
    .validate = qs_validate,
    .decode_accumulate = qs_decode_accumulate,
};
