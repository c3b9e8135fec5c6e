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
 * with the CUDA kernels; the AVX2 paths compute the same bits as the scalar ones
 * (tested).
 */
#include <stdlib.h>
#include <string.h>

#include "common/result.h"
#include "compress/bucket.h"
#include "compress/codec.h"
#include "compress/codec_math.h"
#include "compress/codec_util.h"
#include "compress/crc32c.h"
#include "compress/rng.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QS_HAVE_X86 1
#endif

/* Elements decoded (or checked) at a time into a stack buffer: 4 KiB stays in L1
 * next to the dst block it is added to. A multiple of 8 so chunks start on a
 * code byte. */
#define QS_DECODE_CHUNK 1024

/* The payload CRC is extended every this many bytes, while they are still in L1
 * (a second pass over the payload would read it back from L3). */
#define QS_CRC_SPAN 4096

static int have_avx2(void) {
#ifdef QS_HAVE_X86
  return !codec_force_scalar && __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

/* Payload bytes for count elements at bits + 1 bits per code; 0 if that overflows. */
static int qs_payload_size(uint64_t count, uint64_t bucket, unsigned bits, uint64_t* out) {
  return bucket_payload_size(count, bucket, 4, bits + 1, out);
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

/* ---- AVX2 kernels (bit-identical to the scalar ones) ----------------------------- */
#ifdef QS_HAVE_X86

/* *sum = canon_sum_sq(v, m); returns 0 if some v[j] is not finite (*sum is then
 * meaningless). Lanes 0-7 of canon_sum_sq live in acc0, lanes 8-15 in acc1; the
 * tail adds +0.0 to unused lanes, which leaves them unchanged (they are >= +0). */
__attribute__((target("avx2"))) static int qs_sumsq_avx2(const float* v, size_t m, float* sum) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i maxfin = _mm256_set1_epi32(0x7F7FFFFF);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= m; i += 16) {
    __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + 8);
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(_mm256_and_ps(a, absmask)), maxfin));
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(_mm256_and_ps(b, absmask)), maxfin));
    acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(a, a));
    acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(b, b));
  }
  if (i < m) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int r = (int)(m - i);
    __m256i k0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(r), iota);
    __m256i k1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(r - 8), iota);
    __m256 a = _mm256_maskload_ps(v + i, k0), b = _mm256_maskload_ps(v + i + 8, k1);
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(_mm256_and_ps(a, absmask)), maxfin));
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(_mm256_and_ps(b, absmask)), maxfin));
    acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(a, a));
    acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(b, b));
  }
  /* lane[j] += lane[j + w] for w = 8, 4, 2, 1. */
  __m256 s8 = _mm256_add_ps(acc0, acc1);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  *sum = _mm_cvtss_f32(s1);
  return _mm256_testz_si256(bad, bad);
}

/* MurmurHash3's fmix32 on 8 lanes (rng_fmix32). */
__attribute__((target("avx2"), always_inline)) static inline __m256i qs_fmix8(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x85EBCA6Bu));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 13));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0xC2B2AE35u));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* The bucket's constants in registers, and the rounding stream: idx holds the
 * low halves of the next 8 global indices; khi is the second round's key term,
 * fixed because the bucket does not cross a multiple of 2^32. */
struct qs_lanes {
  __m256 inv, sf, step;
  __m128i b;
  __m256i idx, klo, khi;
};

/* Codes of v[j, j + 8) as int32 lanes; with resid, stores v - dec at resid + j. */
__attribute__((target("avx2"), always_inline)) static inline __m256i qs_q8(const float* v, size_t j, struct qs_lanes* c,
                                                                           float* resid) {
  __m256 x = _mm256_loadu_ps(v + j);
  __m256i r = qs_fmix8(_mm256_xor_si256(c->idx, c->klo));
  r = qs_fmix8(_mm256_xor_si256(r, c->khi));
  __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(r, 8)), _mm256_set1_ps(0x1p-24f));
  c->idx = _mm256_add_epi32(c->idx, _mm256_set1_epi32(8));
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

/* Packs the 8 codes (< 2^w, w <= 9) in q's lanes LSB first into w bytes at out:
 * lane k shifted left by k * w (<= 63) in 64-bit lanes, then all ORed; for w = 9
 * the top 8 bits of code 7 make byte 8. Stores 8 bytes when the payload has room
 * (the bytes past the group are zero and rewritten by what comes next). */
__attribute__((target("avx2"), always_inline)) static inline void qs_put8_avx2(__m256i q, __m256i sh_lo, __m256i sh_hi,
                                                                               unsigned w, unsigned char* out,
                                                                               const unsigned char* end) {
  __m256i lo = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(q)), sh_lo);
  __m256i hi = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(q, 1)), sh_hi);
  __m256i v = _mm256_or_si256(lo, hi);
  __m128i x = _mm_or_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  uint64_t r = (uint64_t)_mm_cvtsi128_si64(_mm_or_si128(x, _mm_unpackhi_epi64(x, x)));
  if (w == 9) {
    memcpy(out, &r, 8);
    out[8] = (unsigned char)((uint32_t)_mm256_extract_epi32(q, 7) >> 1);
  } else if (end - out >= 8) {
    memcpy(out, &r, 8);
  } else {
    for (unsigned i = 0; i < w; i++) out[i] = (unsigned char)(r >> (8 * i));
  }
}

/* The body of qs_codes_avx2*: always inlined so that whether resid is NULL is a
 * constant in each copy. The bucket [g0, g0 + m) must not cross a multiple of
 * 2^32. end: the end of the payload buffer. */
__attribute__((target("avx2"), always_inline)) static inline void qs_codes_avx2_body(
    const float* v, size_t m, uint64_t g0, const struct qs_bucket* p, uint64_t key, unsigned char* codes,
    const unsigned char* end, float* resid) {
  unsigned w = p->b + 1;
  struct qs_lanes c;
  c.inv = _mm256_set1_ps(p->inv);
  c.sf = _mm256_set1_ps(p->sf);
  c.step = _mm256_set1_ps(p->step);
  c.b = _mm_cvtsi32_si128((int)p->b);
  c.idx = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)g0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  c.klo = _mm256_set1_epi32((int)(uint32_t)key);
  c.khi = _mm256_set1_epi32((int)((uint32_t)(key >> 32) + (uint32_t)(g0 >> 32) * 0x9E3779B1u));
  size_t j = 0;
  if (w == 8 || w == 4 || w == 2) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; j + 32 <= m; j += 32) {
      __m256i q0 = qs_q8(v, j, &c, resid), q1 = qs_q8(v, j + 8, &c, resid);
      __m256i q2 = qs_q8(v, j + 16, &c, resid), q3 = qs_q8(v, j + 24, &c, resid);
      /* 32 codes (< 256) as bytes, in element order. */
      __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(q0, q1), _mm256_packus_epi32(q2, q3));
      b = _mm256_permutevar8x32_epi32(b, order);
      unsigned char* out = codes + j / 8 * w;
      if (w == 8) {
        _mm256_storeu_si256((__m256i*)out, b);
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
  }
  const __m256i sh_lo = _mm256_mullo_epi32(_mm256_setr_epi64x(0, 1, 2, 3), _mm256_set1_epi64x(w));
  const __m256i sh_hi = _mm256_add_epi64(sh_lo, _mm256_set1_epi64x(4 * w));
  for (; j + 8 <= m; j += 8) qs_put8_avx2(qs_q8(v, j, &c, resid), sh_lo, sh_hi, w, codes + j / 8 * w, end);
  if (j < m) qs_codes_scalar(v + j, m - j, g0 + j, p, key, codes + j / 8 * w, resid ? resid + j : NULL);
}

__attribute__((target("avx2"))) static void qs_codes_avx2(const float* v, size_t m, uint64_t g0,
                                                          const struct qs_bucket* p, uint64_t key, unsigned char* codes,
                                                          const unsigned char* end) {
  qs_codes_avx2_body(v, m, g0, p, key, codes, end, NULL);
}

__attribute__((target("avx2"))) static void qs_codes_avx2_ef(const float* v, size_t m, uint64_t g0,
                                                             const struct qs_bucket* p, uint64_t key,
                                                             unsigned char* codes, const unsigned char* end,
                                                             float* resid) {
  qs_codes_avx2_body(v, m, g0, p, key, codes, end, resid);
}

/* Per-lane byte picks and shifts that unpack 8 codes of w bits from a group of w
 * bytes: lane k takes bytes k*w/8 and the next, shifted right by k*w%8. */
struct qs_unpack {
  __m256i pick, shift, mask;
};

__attribute__((target("avx2"))) static void qs_unpack_make(unsigned w, struct qs_unpack* u) {
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

/* Codes k < 8 of the group at g (w bytes, never read past end) as int32 lanes. */
__attribute__((target("avx2"))) static inline __m256i qs_unpack8(const unsigned char* g, const unsigned char* end,
                                                                 unsigned w, const struct qs_unpack* u) {
  if (w == 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)g)); /* the group is 8 bytes */
  __m128i raw;
  if (end - g >= 16) {
    raw = _mm_loadu_si128((const __m128i*)g);
  } else {
    unsigned char buf[16] = {0};
    memcpy(buf, g, w); /* the group is inside the payload */
    raw = _mm_loadu_si128((const __m128i*)buf);
  }
  __m256i x = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(raw), u->pick);
  return _mm256_and_si256(_mm256_srlv_epi32(x, u->shift), u->mask);
}

__attribute__((target("avx2"))) static int qs_codes_bad_avx2(const unsigned char* codes, const unsigned char* end,
                                                             size_t c, unsigned b) {
  struct qs_unpack u;
  qs_unpack_make(b + 1, &u);
  const __m256i zero_neg = _mm256_set1_epi32((int)(1u << b));
  __m256i bad = _mm256_setzero_si256();
  size_t j = 0;
  for (; j + 8 <= c; j += 8)
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(qs_unpack8(codes + j / 8 * (b + 1), end, b + 1, &u), zero_neg));
  return !_mm256_testz_si256(bad, bad) || (j < c && qs_codes_bad_scalar(codes + j / 8 * (b + 1), c - j, b));
}

/* out[j] = dec[j] (add = 0) or out[j] += dec[j] (add = 1) for the c codes at codes. */
__attribute__((target("avx2"), always_inline)) static inline void qs_expand_avx2_body(
    const unsigned char* codes, const unsigned char* end, size_t c, const struct qs_bucket* p, float* out, int add) {
  unsigned w = p->b + 1;
  struct qs_unpack u;
  qs_unpack_make(w, &u);
  const __m256i lmask = _mm256_set1_epi32((int)((1u << p->b) - 1));
  const __m128i sh = _mm_cvtsi32_si128((int)(31 - p->b)); /* moves neg to the sign bit */
  const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
  const __m256 step = _mm256_set1_ps(p->step);
  size_t j = 0;
  for (; j + 8 <= c; j += 8) {
    __m256i q = qs_unpack8(codes + j / 8 * w, end, w, &u);
    __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q, lmask)), step);
    d = _mm256_xor_ps(d, _mm256_castsi256_ps(_mm256_and_si256(_mm256_sll_epi32(q, sh), sign)));
    if (add) d = _mm256_add_ps(_mm256_loadu_ps(out + j), d);
    _mm256_storeu_ps(out + j, d);
  }
  for (; j < c; j++) {
    float d = qs_dequant(packed_code_get(codes, j, w), p);
    if (add)
      out[j] += d;
    else
      out[j] = d;
  }
}

__attribute__((target("avx2"))) static void qs_expand_avx2(const unsigned char* codes, const unsigned char* end,
                                                           size_t c, const struct qs_bucket* p, float* out) {
  qs_expand_avx2_body(codes, end, c, p, out, 0);
}

/* dst[j] += dec[j] for fp32 dst without a stack round trip (the same float adds
 * as block_accumulate). */
__attribute__((target("avx2"))) static void qs_expand_add_f32_avx2(const unsigned char* codes, const unsigned char* end,
                                                                   size_t c, const struct qs_bucket* p, float* dst) {
  qs_expand_avx2_body(codes, end, c, p, dst, 1);
}

#endif /* QS_HAVE_X86 */

/* ---- encode ---------------------------------------------------------------------- */

/* One bucket x[0, m) at global index base: meta and codes at out; end is the end
 * of the payload buffer. */
static gcclResult_t qs_encode_bucket(struct encode_ctx* ctx, struct bucket_state* st, const float* x, float* resid,
                                     size_t m, uint64_t base, unsigned char* out, const unsigned char* end, int simd) {
  struct exc_list* exc = ctx->exc;
  unsigned bits = ctx->spec->bits;
  const float* v = x;
  float sum = 0.0f;
  size_t nexc0 = exc->n;
  int finite;
#ifdef QS_HAVE_X86
  finite = simd ? qs_sumsq_avx2(x, m, &sum) : all_finite(x, m);
#else
  (void)end;
  finite = all_finite(x, m);
#endif
  if (!finite) { /* rare: zeros in place of the non-finite values */
    GCCL_CHECK(sanitize_block(x, m, base, st->tmp, exc));
    v = st->tmp;
#ifdef QS_HAVE_X86
    if (simd) qs_sumsq_avx2(v, m, &sum);
#endif
  }
  if (!simd) sum = canon_sum_sq(v, m);
  float norm = qs_norm(sum);
  struct qs_bucket p;
  size_t code_bytes = (m * (bits + 1) + 7) / 8;
  if (!qs_bucket_make(norm, bits, &p)) {
    GCCL_CHECK(exc_push_range(exc, base, m));
    memset(out, 0, 4 + code_bytes);
    if (resid) memset(resid, 0, m * sizeof(float));
    return gcclSuccess;
  }
  put_f32(out, norm);
#ifdef QS_HAVE_X86
  /* The AVX2 stream keeps the index's high half fixed: a bucket that crosses a
   * multiple of 2^32 elements (at most one per 4 Gi elements) takes the scalar path. */
  if (simd && (base >> 32) != ((base + m - 1) >> 32)) simd = 0;
  if (simd && resid)
    qs_codes_avx2_ef(v, m, base, &p, ctx->key, out + 4, end, resid);
  else if (simd)
    qs_codes_avx2(v, m, base, &p, ctx->key, out + 4, end);
  else
    qs_codes_scalar(v, m, base, &p, ctx->key, out + 4, resid);
#else
  qs_codes_scalar(v, m, base, &p, ctx->key, out + 4, resid);
#endif
  if (resid)
    for (size_t e = nexc0; e < exc->n; e++) resid[exc->idx[e] - base] = 0.0f;
  return gcclSuccess;
}

static gcclResult_t qs_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h) {
  struct bucket_state* st = ctx->state;
  size_t bucket = ctx->spec->bucket;
  unsigned bits = ctx->spec->bits;
  size_t need = n < bucket ? n : bucket;
  if (st == NULL || st->cap < need)
    return err_set(gcclInternalError, "qsgd: codec state made for fewer than %zu elements", need);
  int simd = have_avx2();
  unsigned char* out = payload;
  const unsigned char* end = payload + qs_payload_bound(ctx->spec, n);
  const unsigned char* crc_from = payload;
  uint32_t crc = 0;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    GCCL_CHECK(qs_encode_bucket(ctx, st, x + base, resid ? resid + base : NULL, m, base, out, end, simd));
    out += 4 + (m * (bits + 1) + 7) / 8;
    if ((size_t)(out - crc_from) >= QS_CRC_SPAN) {
      crc = crc32c(crc, crc_from, (size_t)(out - crc_from));
      crc_from = out;
    }
  }
  ctx->payload_crc = crc32c(crc, crc_from, (size_t)(out - crc_from));
  ctx->payload_crc_valid = 1;
  *payload_bytes = (size_t)(out - payload);
  h->bits = (uint8_t)bits;
  h->bucket = ctx->spec->bucket;
  h->values = 0;
  h->k = 0;
  h->rng_key = 0;
  h->flags = 0;
  return gcclSuccess;
}

/* ---- validate and decode ------------------------------------------------------------ */

static gcclResult_t qs_validate(const struct frame_header* h, const unsigned char* payload) {
  uint64_t expect;
  unsigned bits = h->bits, w = bits + 1;
  if (!qs_payload_size(h->count, h->bucket, bits, &expect))
    return err_set(gcclCorruptData, "qsgd: payload size for %llu elements overflows", (unsigned long long)h->count);
  if (h->payload_bytes != expect)
    return err_set(gcclCorruptData, "qsgd: payload is %llu bytes, %llu elements in buckets of %u at %u bits need %llu",
                   (unsigned long long)h->payload_bytes, (unsigned long long)h->count, (unsigned)h->bucket, bits,
                   (unsigned long long)expect);
  int simd = have_avx2();
  const unsigned char* p = payload;
  const unsigned char* end = payload + h->payload_bytes;
  for (uint64_t base = 0; base < h->count; base += h->bucket) {
    uint64_t m = h->count - base < h->bucket ? h->count - base : h->bucket;
    float norm = get_f32(p);
    struct qs_bucket q;
    if ((fb_bits(norm) >> 31) || !qs_bucket_make(norm, bits, &q))
      return err_set(gcclCorruptData, "qsgd: bucket at element %llu has norm %g (must be finite and >= +0)",
                     (unsigned long long)base, (double)norm);
    size_t nbytes = (size_t)((m * w + 7) / 8);
    unsigned used = (unsigned)((m * w) % 8);
    if (used && (p[4 + nbytes - 1] >> used))
      return err_set(gcclCorruptData, "qsgd: bucket at element %llu has nonzero pad bits", (unsigned long long)base);
    int bad;
    if (w == 2 || w == 4 || w == 8) {
      bad = qs_codes_bad_swar(p + 4, nbytes, w);
    } else {
#ifdef QS_HAVE_X86
      bad = simd ? qs_codes_bad_avx2(p + 4, end, (size_t)m, bits) : qs_codes_bad_scalar(p + 4, (size_t)m, bits);
#else
      (void)simd;
      (void)end;
      bad = qs_codes_bad_scalar(p + 4, (size_t)m, bits);
#endif
    }
    if (bad)
      return err_set(gcclCorruptData, "qsgd: bucket at element %llu has a code with sign set and level 0",
                     (unsigned long long)base);
    p += 4 + nbytes;
  }
  return gcclSuccess;
}

static gcclResult_t qs_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                         const uint64_t* exc, size_t nexc, void* dst) {
  float v[QS_DECODE_CHUNK];
  size_t n = (size_t)h->count, bucket = h->bucket, cursor = 0;
  unsigned bits = h->bits, w = bits + 1;
  int simd = have_avx2();
  const unsigned char* p = payload;
  const unsigned char* end = payload + h->payload_bytes;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    struct qs_bucket q;
    qs_bucket_make(get_f32(p), bits, &q); /* validate checked it succeeds */
    const unsigned char* codes = p + 4;
    for (size_t j = 0; j < m; j += QS_DECODE_CHUNK) {
      size_t c = m - j < QS_DECODE_CHUNK ? m - j : QS_DECODE_CHUNK;
      size_t at = base + j;
      const unsigned char* cc = codes + j / 8 * w;
#ifdef QS_HAVE_X86
      if (simd) {
        int clean = cursor >= nexc || exc[cursor] >= at + c;
        if (clean && h->dtype == gcclFloat32) {
          qs_expand_add_f32_avx2(cc, end, c, &q, (float*)dst + at);
          continue;
        }
        qs_expand_avx2(cc, end, c, &q, v);
      } else {
        qs_expand_scalar(cc, c, &q, v);
      }
#else
      (void)simd;
      (void)end;
      qs_expand_scalar(cc, c, &q, v);
#endif
      block_accumulate(dst, h->dtype, at, v, c, exc, nexc, &cursor);
    }
    p += 4 + (m * w + 7) / 8;
  }
  return gcclSuccess;
}

const struct codec_ops codec_qsgd_ops = {
    .payload_bound = qs_payload_bound,
    .state_create = bucket_state_create,
    .state_destroy = bucket_state_destroy,
    .encode = qs_encode,
    .validate = qs_validate,
    .decode_accumulate = qs_decode_accumulate,
};
