/* codec_half.c — fp16 and bf16: every element rounded to 16 bits, to nearest even.
 *
 * Frame: payload = count little-endian 16-bit values, nothing else; h->bits,
 * bucket, k, values all 0. decoded = float(half). Non-finite inputs need no
 * exceptions: inf stays inf, NaN stays a (quiet) NaN, as float_to_half and
 * float_to_bf16 define; finite values beyond the format's range round to inf
 * (fp16 above 65504), as a cast does. With error feedback the residual is
 * x - decoded, and 0 where x is not finite (so one inf does not poison it).
 * The AVX2/F16C paths compute the same bits as the scalar ones (tested).
 */
#include <stdint.h>
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec_util.h"
#include "compress/crc32c.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "common/cpu.h"
#define HALF_HAVE_X86 1
#endif

/* Elements per block: the payload of a block (8 KiB) is checksummed while it
 * is still in L1. */
#define HALF_BLOCK 4096

/* Payload pointers are bytes: a frame may sit at any address. */
typedef void (*half_encode_fn)(const float* x, float* resid, size_t n, unsigned char* out);
typedef void (*half_decode_fn)(float* dst, const unsigned char* in, size_t n);

static void fp16_encode_scalar(const float* x, float* resid, size_t n, unsigned char* out) {
  for (size_t i = 0; i < n; i++) {
    uint16_t h = float_to_half(x[i]);
    put_u16(out + 2 * i, h);
    if (resid) resid[i] = f32_finite(x[i]) ? x[i] - half_to_float(h) : 0.0f;
  }
}

static void bf16_encode_scalar(const float* x, float* resid, size_t n, unsigned char* out) {
  for (size_t i = 0; i < n; i++) {
    uint16_t b = float_to_bf16(x[i]);
    put_u16(out + 2 * i, b);
    if (resid) resid[i] = f32_finite(x[i]) ? x[i] - bf16_to_float(b) : 0.0f;
  }
}

static void fp16_decode_scalar(float* dst, const unsigned char* in, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] += half_to_float(get_u16(in + 2 * i));
}

static void bf16_decode_scalar(float* dst, const unsigned char* in, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] += bf16_to_float(get_u16(in + 2 * i));
}

#ifdef HALF_HAVE_X86
/* Lanes where x is finite, as an all-ones mask. */
__attribute__((target("avx2"))) static inline __m256 finite_mask(__m256 x) {
  __m256i exp = _mm256_set1_epi32(0x7F800000);
  __m256i e = _mm256_and_si256(_mm256_castps_si256(x), exp);
  return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(e, exp), _mm256_set1_epi32(-1)));
}

__attribute__((target("avx2,f16c"))) static void fp16_encode_avx2(const float* x, float* resid, size_t n,
                                                                  unsigned char* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i*)(void*)(out + 2 * i), h);
    if (resid) {
      __m256 r = _mm256_sub_ps(v, _mm256_cvtph_ps(h));
      _mm256_storeu_ps(resid + i, _mm256_and_ps(r, finite_mask(v)));
    }
  }
  fp16_encode_scalar(x + i, resid ? resid + i : NULL, n - i, out + 2 * i);
}

__attribute__((target("avx2"))) static void bf16_encode_avx2(const float* x, float* resid, size_t n,
                                                             unsigned char* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x0040);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i w[2];
    for (int half = 0; half < 2; half++) {
      __m256i u = _mm256_loadu_si256((const __m256i*)(x + i + 8 * half));
      __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
      __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
      __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
      w[half] = _mm256_blendv_epi8(_mm256_srli_epi32(rounded, 16), quiet_nan, nan);
      if (resid) {
        __m256 v = _mm256_castsi256_ps(u);
        __m256 back = _mm256_castsi256_ps(_mm256_slli_epi32(w[half], 16));
        /* back of a NaN is some NaN; the finite mask zeroes that lane anyway. */
        _mm256_storeu_ps(resid + i + 8 * half, _mm256_and_ps(_mm256_sub_ps(v, back), finite_mask(v)));
      }
    }
    /* packus works within 128-bit lanes: restore element order afterwards. */
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(w[0], w[1]), 0xD8);
    _mm256_storeu_si256((__m256i*)(void*)(out + 2 * i), packed);
  }
  bf16_encode_scalar(x + i, resid ? resid + i : NULL, n - i, out + 2 * i);
}

__attribute__((target("avx2,f16c"))) static void fp16_decode_avx2(float* dst, const unsigned char* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(const void*)(in + 2 * i)));
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), v));
  }
  fp16_decode_scalar(dst + i, in + 2 * i, n - i);
}

__attribute__((target("avx2"))) static void bf16_decode_avx2(float* dst, const unsigned char* in, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i u =
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(const void*)(in + 2 * i))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    u = _mm256_or_si256(u, _mm256_and_si256(nan, quiet)); /* NaN made quiet, as bf16_to_float */
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_castsi256_ps(u)));
  }
  bf16_decode_scalar(dst + i, in + 2 * i, n - i);
}
#endif

/* The kernels for a codec on this CPU. Tests call with force_scalar to compare. */
static void half_kernels(enum codec_id codec, int force_scalar, half_encode_fn* enc, half_decode_fn* dec) {
  int fp16 = codec == CODEC_FP16;
  *enc = fp16 ? fp16_encode_scalar : bf16_encode_scalar;
  *dec = fp16 ? fp16_decode_scalar : bf16_decode_scalar;
#ifdef HALF_HAVE_X86
  if (!force_scalar && __builtin_cpu_supports("avx2") && (!fp16 || cpu_has_f16c())) {
    *enc = fp16 ? fp16_encode_avx2 : bf16_encode_avx2;
    *dec = fp16 ? fp16_decode_avx2 : bf16_decode_avx2;
  }
#else
  (void)force_scalar;
#endif
}

static size_t half_payload_bound(const struct codec_spec* s, size_t n) {
  (void)s;
  return n * 2;
}

static gcclResult_t half_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                                size_t* payload_bytes, struct frame_header* h) {
  (void)h; /* no codec parameters */
  half_encode_fn enc;
  half_decode_fn dec;
  half_kernels(ctx->spec->codec, codec_force_scalar, &enc, &dec);
  uint32_t crc = 0;
  for (size_t i = 0; i < n; i += HALF_BLOCK) {
    size_t m = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
    unsigned char* out = payload + 2 * i;
    encode_fill(ctx, i, m);
    enc(x + i, resid ? resid + i : NULL, m, out);
    crc = crc32c(crc, out, 2 * m);
  }
  ctx->payload_crc = crc;
  ctx->payload_crc_valid = 1;
  *payload_bytes = 2 * n;
  return gcclSuccess;
}

static uint64_t half_payload_offset(const struct frame_header* h, uint64_t first) {
  (void)h;
  return 2 * first;
}

static gcclResult_t half_validate(const struct frame_header* h, const unsigned char* payload) {
  (void)payload;
  if (h->count > UINT64_MAX / 2 || h->payload_bytes != 2 * h->count)
    return err_set(gcclCorruptData, "corrupt frame: %s payload of %llu bytes for %llu elements",
                   spec_codec_name(h->codec), (unsigned long long)h->payload_bytes, (unsigned long long)h->count);
  return gcclSuccess;
}

/* decode_accumulate (store = 0), and decode_store_f32 (store = 1: each block of
 * dst cleared while it is in L1, then added to). */
static gcclResult_t half_decode(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                size_t nexc, void* dst, int store) {
  half_encode_fn enc;
  half_decode_fn dec;
  half_kernels(h->codec, codec_force_scalar, &enc, &dec);
  size_t n = (size_t)h->count;
  int direct = h->dtype == gcclFloat32 && nexc == 0;
  if (direct && !store) {
    dec(dst, payload, n);
    return gcclSuccess;
  }
  /* Other destinations (or exceptions to skip): decode a block into fp32, then add. */
  float tmp[1024];
  size_t cursor = 0;
  for (size_t i = 0; i < n; i += 1024) {
    size_t m = n - i < 1024 ? n - i : 1024;
    if (store) memset((float*)dst + i, 0, m * sizeof(float));
    if (direct) {
      dec((float*)dst + i, payload + 2 * i, m);
      continue;
    }
    memset(tmp, 0, m * sizeof *tmp);
    dec(tmp, payload + 2 * i, m);
    block_accumulate(dst, h->dtype, i, tmp, m, exc, nexc, &cursor);
  }
  return gcclSuccess;
}

static gcclResult_t half_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                           const uint64_t* exc, size_t nexc, void* dst) {
  return half_decode(h, payload, exc, nexc, dst, 0);
}

static gcclResult_t half_decode_store_f32(const struct frame_header* h, const unsigned char* payload,
                                          const uint64_t* exc, size_t nexc, float* dst) {
  return half_decode(h, payload, exc, nexc, dst, 1);
}

/* fp16 and bf16 share one table: the frame header's codec says which. */
const struct codec_ops codec_half_ops = {
    .payload_bound = half_payload_bound,
    .encode = half_encode,
    .fills_input = 1,
    .validate = half_validate,
    .decode_accumulate = half_decode_accumulate,
    .decode_store_f32 = half_decode_store_f32,
    .payload_offset = half_payload_offset,
};
