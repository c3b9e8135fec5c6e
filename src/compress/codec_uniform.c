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
 * The AVX2 paths compute the same bits as the scalar ones (tested; min and max
 * do not depend on the order, and -0/+0 ties vanish with the + 0.0f).
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
#define UQ_HAVE_X86 1
#endif

/* Elements decoded at a time into a stack buffer: 4 KiB stays in L1 next to the
 * dst block it is added to. A multiple of 8 so chunks start on a code byte. */
#define UQ_DECODE_CHUNK 1024

/* The payload CRC is extended every this many bytes, while they are still in L1
 * (a second pass over the payload would read it back from L3). */
#define UQ_CRC_SPAN 4096

static int have_avx2(void) {
#ifdef UQ_HAVE_X86
  return !codec_force_scalar && __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

/* Payload bytes for count elements; 0 if that overflows. */
static int uq_payload_size(uint64_t count, uint64_t bucket, unsigned bits, uint64_t* out) {
  return bucket_payload_size(count, bucket, 8, bits, out);
}

static size_t uq_payload_bound(const struct codec_spec* s, size_t n) {
  return bucket_payload_bound(n, s->bucket, 8, s->bits);
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

/* ---- AVX2 kernels (bit-identical to the scalar ones) ----------------------------- */
#ifdef UQ_HAVE_X86

/* Same as uq_minmax_scalar when it returns 1; returns 0 (outputs meaningless) when
 * some x[j] is not finite. The finite test rides along: max of |x| as integers. */
__attribute__((target("avx2"))) static int uq_minmax_avx2(const float* x, size_t m, float* mn, float* mx) {
  if (m < 16) return uq_minmax_scalar(x, m, mn, mx);
  const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256 lo0 = _mm256_loadu_ps(x), hi0 = lo0, lo1 = lo0, hi1 = lo0;
  __m256i e0 = _mm256_and_si256(_mm256_castps_si256(lo0), absmask), e1 = e0;
  size_t j = 8;
  for (; j + 16 <= m; j += 16) {
    __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + 8);
    lo0 = _mm256_min_ps(lo0, a);
    hi0 = _mm256_max_ps(hi0, a);
    lo1 = _mm256_min_ps(lo1, b);
    hi1 = _mm256_max_ps(hi1, b);
    e0 = _mm256_max_epu32(e0, _mm256_and_si256(_mm256_castps_si256(a), absmask));
    e1 = _mm256_max_epu32(e1, _mm256_and_si256(_mm256_castps_si256(b), absmask));
  }
  if (j < m) { /* the last 8 (overlapping what was seen: min and max do not mind) */
    __m256 a = _mm256_loadu_ps(x + m - 8), b = _mm256_loadu_ps(x + (j + 8 <= m ? j : m - 8));
    lo0 = _mm256_min_ps(lo0, a);
    hi0 = _mm256_max_ps(hi0, a);
    lo1 = _mm256_min_ps(lo1, b);
    hi1 = _mm256_max_ps(hi1, b);
    e0 = _mm256_max_epu32(e0, _mm256_and_si256(_mm256_castps_si256(a), absmask));
    e1 = _mm256_max_epu32(e1, _mm256_and_si256(_mm256_castps_si256(b), absmask));
  }
  __m256 lo = _mm256_min_ps(lo0, lo1), hi = _mm256_max_ps(hi0, hi1);
  __m256i e = _mm256_max_epu32(e0, e1);
  __m128 l4 = _mm_min_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1));
  __m128 h4 = _mm_max_ps(_mm256_castps256_ps128(hi), _mm256_extractf128_ps(hi, 1));
  __m128i e4 = _mm_max_epu32(_mm256_castsi256_si128(e), _mm256_extracti128_si256(e, 1));
  l4 = _mm_min_ps(l4, _mm_movehl_ps(l4, l4));
  h4 = _mm_max_ps(h4, _mm_movehl_ps(h4, h4));
  e4 = _mm_max_epu32(e4, _mm_unpackhi_epi64(e4, e4));
  l4 = _mm_min_ss(l4, _mm_shuffle_ps(l4, l4, 1));
  h4 = _mm_max_ss(h4, _mm_shuffle_ps(h4, h4, 1));
  e4 = _mm_max_epu32(e4, _mm_shuffle_epi32(e4, 1));
  *mn = _mm_cvtss_f32(l4);
  *mx = _mm_cvtss_f32(h4);
  return (uint32_t)_mm_cvtsi128_si32(e4) < 0x7F800000u;
}

/* MurmurHash3's fmix32 on 8 lanes (rng_fmix32). */
__attribute__((target("avx2"), always_inline)) static inline __m256i uq_fmix8(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x85EBCA6Bu));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 13));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0xC2B2AE35u));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* The bucket's constants in registers, and the stochastic rounding stream: idx
 * holds the low halves of the indices of the next 8 draws (elements 0-7 of the
 * next 16); khi is the second round's key term, fixed because the bucket does not
 * cross a multiple of 2^32. */
struct uq_lanes {
  __m256 mn, inv, lf, step;
  __m256i idx, klo, khi;
};

/* The u of the next 16 elements (rng_uniform16): 8 draws, element i < 8 taking
 * the low half of draw i and element i + 8 the high half; elements 0-7 in *lo,
 * 8-15 in *hi. */
__attribute__((target("avx2"), always_inline)) static inline void uq_u16(struct uq_lanes* c, __m256* lo, __m256* hi) {
  __m256i r = uq_fmix8(_mm256_xor_si256(c->idx, c->klo));
  r = uq_fmix8(_mm256_xor_si256(r, c->khi));
  c->idx = _mm256_add_epi32(c->idx, _mm256_set1_epi32(16));
  __m256i a = _mm256_and_si256(r, _mm256_set1_epi32(0xFFFF)), b = _mm256_srli_epi32(r, 16);
  *lo = _mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(0x1p-16f));
  *hi = _mm256_mul_ps(_mm256_cvtepi32_ps(b), _mm256_set1_ps(0x1p-16f));
}

/* Codes of v[j, j + 8) as int32 lanes, rounded with u; with resid, stores
 * v - dec at resid + j. */
__attribute__((target("avx2"), always_inline)) static inline __m256i uq_q8(const float* v, size_t j,
                                                                           const struct uq_lanes* c, __m256 u,
                                                                           float* resid) {
  __m256 x = _mm256_loadu_ps(v + j);
  __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(x, c->mn), c->inv), u);
  /* max_ps(t, 0) is t > 0 ? t : 0 and min_ps(t, L) is t < L ? t : L, as in uq_quant. */
  t = _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), c->lf);
  __m256i q = _mm256_cvttps_epi32(t);
  if (resid)
    _mm256_storeu_ps(resid + j, _mm256_sub_ps(x, _mm256_add_ps(c->mn, _mm256_mul_ps(_mm256_cvtepi32_ps(q), c->step))));
  return q;
}

/* Packs the 8 codes (< 2^bits) in q's lanes LSB first into bits bytes at out:
 * lane k shifted left by k * bits in 64-bit lanes, then all ORed. Stores 8 bytes
 * when the payload has room (the bytes past the group are zero and rewritten by
 * what comes next), else exactly `bits`. */
__attribute__((target("avx2"), always_inline)) static inline void uq_put8_avx2(__m256i q, __m256i sh_lo, __m256i sh_hi,
                                                                               unsigned bits, unsigned char* out,
                                                                               const unsigned char* end) {
  __m256i lo = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(q)), sh_lo);
  __m256i hi = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(q, 1)), sh_hi);
  __m256i v = _mm256_or_si256(lo, hi);
  __m128i x = _mm_or_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  uint64_t r = (uint64_t)_mm_cvtsi128_si64(_mm_or_si128(x, _mm_unpackhi_epi64(x, x)));
  if (end - out >= 8) {
    memcpy(out, &r, 8);
  } else {
    for (unsigned i = 0; i < bits; i++) out[i] = (unsigned char)(r >> (8 * i));
  }
}

/* The body of uq_codes_avx2_*: always inlined so that `stochastic` and whether
 * resid is NULL are constants in each copy. The bucket [g0, g0 + m) must not
 * cross a multiple of 2^32 when stochastic. end: the end of the payload buffer. */
__attribute__((target("avx2"), always_inline)) static inline void uq_codes_avx2_body(
    const float* v, size_t m, uint64_t g0, const struct uq_bucket* p, unsigned bits, uint64_t key, int stochastic,
    unsigned char* codes, const unsigned char* end, float* resid) {
  struct uq_lanes c;
  c.mn = _mm256_set1_ps(p->mn);
  c.inv = _mm256_set1_ps(p->inv);
  c.lf = _mm256_set1_ps(p->lf);
  c.step = _mm256_set1_ps(p->step);
  c.idx = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)g0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  c.klo = _mm256_set1_epi32((int)(uint32_t)key);
  c.khi = _mm256_set1_epi32((int)((uint32_t)(key >> 32) + (uint32_t)(g0 >> 32) * 0x9E3779B1u));
  const __m256 half = _mm256_set1_ps(0.5f);
  size_t j = 0;
  if (bits == 8 || bits == 4 || bits == 2 || bits == 1) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; j + 32 <= m; j += 32) {
      __m256 u0 = half, u1 = half, u2 = half, u3 = half;
      if (stochastic) {
        uq_u16(&c, &u0, &u1);
        uq_u16(&c, &u2, &u3);
      }
      __m256i q0 = uq_q8(v, j, &c, u0, resid), q1 = uq_q8(v, j + 8, &c, u1, resid);
      __m256i q2 = uq_q8(v, j + 16, &c, u2, resid), q3 = uq_q8(v, j + 24, &c, u3, resid);
      /* 32 codes as bytes, in element order. */
      __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(q0, q1), _mm256_packus_epi32(q2, q3));
      b = _mm256_permutevar8x32_epi32(b, order);
      unsigned char* out = codes + j / 8 * bits;
      if (bits == 8) {
        _mm256_storeu_si256((__m256i*)out, b);
      } else if (bits == 1) {
        put_u32le(out, (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(b, 7)));
      } else {
        /* Pairs of b-bit codes to 2b-bit codes: b[2i] + b[2i+1] << bits. */
        __m256i w = _mm256_maddubs_epi16(b, _mm256_set1_epi16((short)(1 | (1 << (8 + bits)))));
        __m128i w8 = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        if (bits == 4) {
          _mm_storeu_si128((__m128i*)out, w8);
        } else { /* bits == 2: once more, 4-bit pairs to bytes */
          __m128i b8 = _mm_maddubs_epi16(w8, _mm_set1_epi16(1 | (16 << 8)));
          _mm_storel_epi64((__m128i*)out, _mm_packus_epi16(b8, b8));
        }
      }
    }
  }
  const __m256i sh_lo = _mm256_mullo_epi32(_mm256_setr_epi64x(0, 1, 2, 3), _mm256_set1_epi64x(bits));
  const __m256i sh_hi = _mm256_add_epi64(sh_lo, _mm256_set1_epi64x(4 * bits));
  __m256 u[2] = {half, half}; /* j is a multiple of 16 when a draw is due */
  for (; j + 8 <= m; j += 8) {
    if (stochastic && j % 16 == 0) uq_u16(&c, &u[0], &u[1]);
    uq_put8_avx2(uq_q8(v, j, &c, u[j / 8 % 2], resid), sh_lo, sh_hi, bits, codes + j / 8 * bits, end);
  }
  if (j < m) uq_codes_scalar(v, j, m, g0, p, bits, stochastic ? &key : NULL, codes, resid);
}

/* The four copies: rounding x error feedback. */
#define UQ_CODES_AVX2(name, stochastic, with_resid)                                                                  \
  __attribute__((target("avx2"))) static void name(const float* v, size_t m, uint64_t g0, const struct uq_bucket* p, \
                                                   unsigned bits, uint64_t key, unsigned char* codes,                \
                                                   const unsigned char* end, float* resid) {                         \
    uq_codes_avx2_body(v, m, g0, p, bits, key, stochastic, codes, end, with_resid ? resid : NULL);                   \
  }
UQ_CODES_AVX2(uq_codes_avx2_nearest, 0, 0)
UQ_CODES_AVX2(uq_codes_avx2_nearest_ef, 0, 1)
UQ_CODES_AVX2(uq_codes_avx2_stochastic, 1, 0)
UQ_CODES_AVX2(uq_codes_avx2_stochastic_ef, 1, 1)

/* Per-lane byte picks and shifts that unpack 8 codes of `bits` bits from a group
 * of `bits` bytes: lane k takes bytes k*bits/8 and the next, shifted by k*bits%8. */
struct uq_unpack {
  __m256i pick, shift, mask;
};

__attribute__((target("avx2"))) static void uq_unpack_make(unsigned bits, struct uq_unpack* u) {
  unsigned char pick[32];
  int shift[8];
  for (unsigned k = 0; k < 8; k++) {
    unsigned bit = k * bits;
    unsigned char* pk = pick + 16 * (k / 4) + 4 * (k % 4); /* pshufb picks within each 128-bit half */
    pk[0] = (unsigned char)(bit / 8);
    pk[1] = (unsigned char)(bit / 8 + 1);
    pk[2] = pk[3] = 0x80; /* pshufb writes 0 */
    shift[k] = (int)(bit % 8);
  }
  u->pick = _mm256_loadu_si256((const __m256i*)pick);
  u->shift = _mm256_loadu_si256((const __m256i*)shift);
  u->mask = _mm256_set1_epi32((int)((1u << bits) - 1));
}

/* Codes k < 8 of the group at g (bits bytes, never read past end) as int32 lanes. */
__attribute__((target("avx2"))) static inline __m256i uq_unpack8(const unsigned char* g, const unsigned char* end,
                                                                 unsigned bits, const struct uq_unpack* u) {
  if (bits == 8) {
    if (end - g >= 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)g));
  }
  __m128i raw;
  if (end - g >= 8) {
    raw = _mm_loadl_epi64((const __m128i*)g);
  } else {
    unsigned char buf[16] = {0};
    memcpy(buf, g, bits); /* the group is inside the payload */
    raw = _mm_loadu_si128((const __m128i*)buf);
  }
  __m256i w = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(raw), u->pick);
  return _mm256_and_si256(_mm256_srlv_epi32(w, u->shift), u->mask);
}

/* What an expand does with the decoded values. */
enum uq_expand_mode {
  UQ_SET,   /* out[j] = dec[j], out a stack buffer */
  UQ_ADD,   /* out[j] += dec[j], the same float adds as block_accumulate */
  UQ_STORE, /* out[j] = 0.0f + dec[j] (decode_store_f32), streamed past the cache when
               out is 32-byte aligned: a stored output is not read again soon */
};

/* The c codes at codes into out, as mode says. */
__attribute__((target("avx2"), always_inline)) static inline void uq_expand_avx2_body(
    const unsigned char* codes, const unsigned char* end, size_t c, unsigned bits, const struct uq_bucket* p,
    float* out, enum uq_expand_mode mode) {
  struct uq_unpack u;
  uq_unpack_make(bits, &u);
  const __m256 mn = _mm256_set1_ps(p->mn), step = _mm256_set1_ps(p->step);
  int stream = mode == UQ_STORE && ((uintptr_t)out & 31) == 0;
  size_t j = 0;
  for (; j + 8 <= c; j += 8) {
    __m256i q = uq_unpack8(codes + j / 8 * bits, end, bits, &u);
    __m256 d = _mm256_add_ps(mn, _mm256_mul_ps(_mm256_cvtepi32_ps(q), step));
    if (mode == UQ_ADD) d = _mm256_add_ps(_mm256_loadu_ps(out + j), d);
    if (mode == UQ_STORE) d = _mm256_add_ps(_mm256_setzero_ps(), d);
    if (stream)
      _mm256_stream_ps(out + j, d);
    else
      _mm256_storeu_ps(out + j, d);
  }
  for (; j < c; j++) {
    float d = uq_dequant(uq_get_code(codes, j, bits), p);
    if (mode == UQ_ADD)
      out[j] += d;
    else
      out[j] = mode == UQ_STORE ? 0.0f + d : d;
  }
}

__attribute__((target("avx2"))) static void uq_expand_avx2(const unsigned char* codes, const unsigned char* end,
                                                           size_t c, unsigned bits, const struct uq_bucket* p,
                                                           float* out) {
  uq_expand_avx2_body(codes, end, c, bits, p, out, UQ_SET);
}

/* dst[j] += dec[j] for fp32 dst without a stack round trip. */
__attribute__((target("avx2"))) static void uq_expand_add_f32_avx2(const unsigned char* codes, const unsigned char* end,
                                                                   size_t c, unsigned bits, const struct uq_bucket* p,
                                                                   float* dst) {
  uq_expand_avx2_body(codes, end, c, bits, p, dst, UQ_ADD);
}

/* dst[j] = 0.0f + dec[j] for fp32 dst. */
__attribute__((target("avx2"))) static void uq_expand_store_f32_avx2(const unsigned char* codes,
                                                                     const unsigned char* end, size_t c, unsigned bits,
                                                                     const struct uq_bucket* p, float* dst) {
  uq_expand_avx2_body(codes, end, c, bits, p, dst, UQ_STORE);
}

#endif /* UQ_HAVE_X86 */

/* ---- encode ---------------------------------------------------------------------- */

/* One bucket x[0, m) at global index base: meta and codes at out; end is the end
 * of the payload buffer. */
static gcclResult_t uq_encode_bucket(struct encode_ctx* ctx, struct bucket_state* st, const float* x, float* resid,
                                     size_t m, uint64_t base, unsigned char* out, const unsigned char* end, int simd) {
  struct exc_list* exc = ctx->exc;
  unsigned bits = ctx->spec->bits;
  const float* v = x;
  float mn, mx;
  size_t nexc0 = exc->n;
  int finite;
#ifdef UQ_HAVE_X86
  finite = simd ? uq_minmax_avx2(x, m, &mn, &mx) : uq_minmax_scalar(x, m, &mn, &mx);
#else
  (void)simd;
  (void)end;
  finite = uq_minmax_scalar(x, m, &mn, &mx);
#endif
  if (!finite) { /* rare: min and max over the finite values, quantize zeros in their place */
    uq_minmax_scalar(x, m, &mn, &mx);
    GCCL_CHECK(sanitize_block(x, m, base, st->tmp, exc));
    v = st->tmp;
  }
  mn += 0.0f;
  mx += 0.0f;
  struct uq_bucket p;
  size_t code_bytes = (m * bits + 7) / 8;
  if (!uq_bucket_make(mn, mx, bits, &p)) {
    GCCL_CHECK(exc_push_range(exc, base, m));
    memset(out, 0, 8 + code_bytes);
    if (resid) memset(resid, 0, m * sizeof(float));
    return gcclSuccess;
  }
  put_f32(out, mn);
  put_f32(out + 4, mx);
  int stochastic = ctx->spec->round == SPEC_ROUND_STOCHASTIC;
#ifdef UQ_HAVE_X86
  /* The AVX2 stream keeps the index's high half fixed: a bucket that crosses a
   * multiple of 2^32 elements (at most one per 4 Gi elements) takes the scalar path. */
  if (simd && stochastic && (base >> 32) != ((base + m - 1) >> 32)) simd = 0;
  if (simd) {
    if (stochastic)
      (resid ? uq_codes_avx2_stochastic_ef : uq_codes_avx2_stochastic)(v, m, base, &p, bits, ctx->key, out + 8, end,
                                                                       resid);
    else
      (resid ? uq_codes_avx2_nearest_ef : uq_codes_avx2_nearest)(v, m, base, &p, bits, 0, out + 8, end, resid);
  } else {
    uq_codes_scalar(v, 0, m, base, &p, bits, stochastic ? &ctx->key : NULL, out + 8, resid);
  }
#else
  uq_codes_scalar(v, 0, m, base, &p, bits, stochastic ? &ctx->key : NULL, out + 8, resid);
#endif
  if (resid)
    for (size_t e = nexc0; e < exc->n; e++) resid[exc->idx[e] - base] = 0.0f;
  return gcclSuccess;
}

static gcclResult_t uq_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h) {
  struct bucket_state* st = ctx->state;
  size_t bucket = ctx->spec->bucket;
  unsigned bits = ctx->spec->bits;
  size_t need = n < bucket ? n : bucket;
  if (st == NULL || st->cap < need)
    return err_set(gcclInternalError, "uniform: codec state made for fewer than %zu elements", need);
  int simd = have_avx2();
  unsigned char* out = payload;
  const unsigned char* end = payload + uq_payload_bound(ctx->spec, n);
  const unsigned char* crc_from = payload;
  uint32_t crc = 0;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    encode_fill(ctx, base, m);
    GCCL_CHECK(uq_encode_bucket(ctx, st, x + base, resid ? resid + base : NULL, m, base, out, end, simd));
    out += 8 + (m * bits + 7) / 8;
    if ((size_t)(out - crc_from) >= UQ_CRC_SPAN) {
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

static uint64_t uq_payload_offset(const struct frame_header* h, uint64_t first) {
  uint64_t off = 0;
  uq_payload_size(first, h->bucket, h->bits, &off); /* first <= count: no overflow in a valid frame */
  return off;
}

static gcclResult_t uq_validate(const struct frame_header* h, const unsigned char* payload) {
  uint64_t expect;
  unsigned bits = h->bits;
  if (!uq_payload_size(h->count, h->bucket, bits, &expect))
    return err_set(gcclCorruptData, "uniform: payload size for %llu elements overflows", (unsigned long long)h->count);
  if (h->payload_bytes != expect)
    return err_set(gcclCorruptData,
                   "uniform: payload is %llu bytes, %llu elements in buckets of %u at %u bits need %llu",
                   (unsigned long long)h->payload_bytes, (unsigned long long)h->count, (unsigned)h->bucket, bits,
                   (unsigned long long)expect);
  const unsigned char* p = payload;
  for (uint64_t base = 0; base < h->count; base += h->bucket) {
    uint64_t m = h->count - base < h->bucket ? h->count - base : h->bucket;
    float mn = get_f32(p), mx = get_f32(p + 4);
    struct uq_bucket q;
    if (!f32_finite(mn) || !f32_finite(mx) || !(mn <= mx) || !uq_bucket_make(mn, mx, bits, &q))
      return err_set(gcclCorruptData, "uniform: bucket at element %llu has min %g, max %g (need finite min <= max)",
                     (unsigned long long)base, (double)mn, (double)mx);
    size_t nbytes = (size_t)((m * bits + 7) / 8);
    unsigned used = (unsigned)((m * bits) % 8);
    if (used && (p[8 + nbytes - 1] >> used))
      return err_set(gcclCorruptData, "uniform: bucket at element %llu has nonzero pad bits", (unsigned long long)base);
    p += 8 + nbytes;
  }
  return gcclSuccess;
}

/* decode_accumulate (store = 0) and decode_store_f32 (store = 1). */
static gcclResult_t uq_decode(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                              size_t nexc, void* dst, int store) {
  float v[UQ_DECODE_CHUNK];
  size_t n = (size_t)h->count, bucket = h->bucket, cursor = 0;
  unsigned bits = h->bits;
  int simd = have_avx2();
  const unsigned char* p = payload;
  const unsigned char* end = payload + h->payload_bytes;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    struct uq_bucket q;
    uq_bucket_make(get_f32(p), get_f32(p + 4), bits, &q); /* validate checked it succeeds */
    const unsigned char* codes = p + 8;
    for (size_t j = 0; j < m; j += UQ_DECODE_CHUNK) {
      size_t c = m - j < UQ_DECODE_CHUNK ? m - j : UQ_DECODE_CHUNK;
      size_t at = base + j;
      const unsigned char* cc = codes + j / 8 * bits;
#ifdef UQ_HAVE_X86
      if (simd) {
        int clean = cursor >= nexc || exc[cursor] >= at + c;
        if (clean && h->dtype == gcclFloat32) {
          (store ? uq_expand_store_f32_avx2 : uq_expand_add_f32_avx2)(cc, end, c, bits, &q, (float*)dst + at);
          continue;
        }
        uq_expand_avx2(cc, end, c, bits, &q, v);
      } else {
        uq_expand_scalar(cc, c, bits, &q, v);
      }
#else
      (void)simd;
      (void)end;
      uq_expand_scalar(cc, c, bits, &q, v);
#endif
      if (store) memset((float*)dst + at, 0, c * sizeof(float)); /* in L1 for the add that follows */
      block_accumulate(dst, h->dtype, at, v, c, exc, nexc, &cursor);
    }
    p += 8 + (m * bits + 7) / 8;
  }
#ifdef UQ_HAVE_X86
  if (store && simd) _mm_sfence(); /* streamed stores are ordered before what follows */
#endif
  return gcclSuccess;
}

static gcclResult_t uq_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                         const uint64_t* exc, size_t nexc, void* dst) {
  return uq_decode(h, payload, exc, nexc, dst, 0);
}

static gcclResult_t uq_decode_store_f32(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                        size_t nexc, float* dst) {
  return uq_decode(h, payload, exc, nexc, dst, 1);
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
