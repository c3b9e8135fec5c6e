/* bucket.h — the skeleton the bucket codecs (uniform, qsgd, sign, terngrad) share:
 * their payload sizes and scratch, and the loops that drive them — encode with
 * its running CRC, validate, decode with its exception cursor.
 *
 * A bucket codec cuts the tensor into buckets of h->bucket elements (the last
 * one shorter) and writes, per bucket, meta_bytes of scales and then one code
 * of code_bits per element, packed LSB first and padded to a byte. What is its
 * own — how a bucket's scale is found, how an element is coded, what its meta
 * bytes must satisfy, how codes decode — it gives as a struct bucket_codec of
 * per-bucket (and per-chunk) functions; everything around them is here.
 *
 * The loops are static inline, always inlined into the codec's encode,
 * validate and decode: with the codec's table a constant, its functions are
 * called directly (and inlined where small), once per bucket or chunk of at
 * most BUCKET_DECODE_CHUNK elements. Nothing per element goes through a
 * pointer. */
#ifndef GCCL_COMPRESS_BUCKET_H
#define GCCL_COMPRESS_BUCKET_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/result.h"
#include "compress/codec.h"
#include "compress/codec_math.h"
#include "compress/codec_util.h"
#include "compress/crc32c.h"
#include "compress/frame.h"
#include "compress/spec.h"
#include "gccl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <xmmintrin.h>
#define BUCKET_HAVE_X86 1 /* the AVX2 kernels (bucket_avx2.h) are built */
#endif

/* Elements decoded at a time into a stack buffer: 4 KiB stays in L1 next to the
 * dst block it is added to. A multiple of 8 so chunks start on a code byte. */
#define BUCKET_DECODE_CHUNK 1024

/* The payload CRC is extended every this many bytes, while they are still in L1
 * (a second pass over the payload would read it back from L3). */
#define BUCKET_CRC_SPAN 4096

/* ---- sizes and scratch ------------------------------------------------------------ */

/* A bucket codec's payload: per bucket of `bucket` elements (the last one
 * shorter), meta_bytes of scales, then the codes of code_bits each, packed
 * LSB first and padded to a byte. *out = its size for count elements; returns 0
 * (and leaves *out) when that overflows 64 bits, as a hostile header may ask.
 * bucket >= 1, code_bits <= 9. */
int bucket_payload_size(uint64_t count, uint64_t bucket, unsigned meta_bytes, unsigned code_bits, uint64_t* out);

/* bucket_payload_size for a tensor of n elements, or SIZE_MAX if it overflows. */
size_t bucket_payload_bound(size_t n, uint64_t bucket, unsigned meta_bytes, unsigned code_bits);

/* The payload offset of element `first` (a multiple of h->bucket, <= h->count)
 * of a valid frame: codec_ops.payload_offset. */
uint64_t bucket_payload_offset(const struct frame_header* h, unsigned meta_bytes, unsigned code_bits, uint64_t first);

/* Scratch for one bucket with its non-finite values zeroed (sanitize_block). */
struct bucket_state {
  float* tmp;
  size_t cap; /* elements: min(bucket, n) */
};

/* state_create / state_destroy of every bucket codec (codec_ops). */
gcclResult_t bucket_state_create(const struct codec_spec* s, size_t n, void** state);
void bucket_state_destroy(void* state);

/* 1 when the CPU runs the AVX2 kernels (codec_*_avx2.c). */
static inline int bucket_have_avx2(void) {
#ifdef BUCKET_HAVE_X86
  return __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

/* ---- what a codec supplies --------------------------------------------------------- */

/* What a codec's scan finds in a bucket, for its quantize: uniform's min (a) and
 * max (b); qsgd's sum of squares, sign's sum of |x|, terngrad's max |x| (a). */
struct bucket_stats {
  float a, b;
};

/* One bucket, as the encode loop hands it to quantize. */
struct bucket_in {
  const float* v; /* the m values to code: the input, or it with non-finite values zeroed */
  float* resid;   /* NULL (no error feedback), or where v[j] - decoded[j] goes */
  size_t m;       /* elements */
  size_t nf;      /* finite elements of the input */
  uint64_t base;  /* global index of element 0 */
};

/* What a bucket's meta bytes say, for the codec's expand. */
union bucket_param {
  struct uq_bucket uq; /* uniform */
  struct qs_bucket qs; /* qsgd */
  float scale;         /* sign, terngrad */
};

/* What an expand does with the c decoded values of a chunk. */
enum bucket_expand {
  BUCKET_SET,       /* out[j] = dec[j] (out: a stack buffer; the only mode without simd) */
  BUCKET_ADD_F32,   /* out[j] += dec[j], out fp32: the same float adds as block_accumulate */
  BUCKET_STORE_F32, /* out[j] = 0.0f + dec[j], out fp32 (decode_store_f32) */
};

/* A bucket codec: constants and per-bucket functions. simd = 1 asks for the
 * AVX2 kernels (only ever 1 where bucket_have_avx2()); both paths must write the
 * same bits. */
struct bucket_codec {
  const char* name;    /* as in error messages: "uniform" */
  unsigned meta_bytes; /* per bucket, before its codes */
  int bits_in_header;  /* 1: h->bits is the spec's bits (and size errors name them); 0: h->bits = 0 */

  /* Encode. Stats of x[0, m) in *s; returns 1 when every x[j] is finite, else 0
   * (*s is then meaningless and rescan follows). */
  int (*scan)(const float* x, size_t m, int simd, struct bucket_stats* s);
  /* The stats over the finite values only: x the input, v it with the
   * non-finite values zeroed. */
  void (*rescan)(const float* x, const float* v, size_t m, int simd, struct bucket_stats* s);
  /* Writes the bucket's meta bytes and codes at out (end: the end of the
   * payload buffer) and, with b->resid, the residual. Returns 0, having written
   * nothing, when the bucket's scale overflows fp32: it is then sent as
   * exceptions. */
  int (*quantize)(const struct encode_ctx* ctx, const struct bucket_stats* s, const struct bucket_in* b,
                  unsigned char* out, const unsigned char* end, int simd);

  /* Validate: gcclCorruptData (with err_set's message) unless the bucket of m
   * elements at `base` is legal: meta bytes at p, then nbytes of codes; end is
   * the end of the payload (never read past it). */
  gcclResult_t (*check)(const struct frame_header* h, const unsigned char* p, uint64_t m, uint64_t base, size_t nbytes,
                        const unsigned char* end, int simd);

  /* Decode. The bucket's parameters from its meta bytes (validated). */
  void (*param)(const unsigned char* meta, unsigned bits, union bucket_param* q);
  /* The c decoded values of the codes at `codes` (c <= BUCKET_DECODE_CHUNK,
   * starting on a code byte) into out, as mode says (not BUCKET_SET: simd is 1). */
  void (*expand)(const union bucket_param* q, const unsigned char* codes, const unsigned char* end, size_t c,
                 unsigned bits, float* out, enum bucket_expand mode, int simd);
};

/* ---- validate helpers ---------------------------------------------------------------- */

/* gcclCorruptData unless the pad bits after the m codes of code_bits (nbytes at
 * codes) are zero. */
static inline gcclResult_t bucket_check_pad(const char* name, const unsigned char* codes, uint64_t m,
                                            unsigned code_bits, size_t nbytes, uint64_t base) {
  unsigned used = (unsigned)((m * code_bits) % 8);
  if (used && (codes[nbytes - 1] >> used))
    return err_set(gcclCorruptData, "%s: bucket at element %llu has nonzero pad bits", name, (unsigned long long)base);
  return gcclSuccess;
}

/* gcclCorruptData unless the f32 scale at p is finite with its sign bit clear. */
static inline gcclResult_t bucket_check_scale(const char* name, const unsigned char* p, uint64_t base) {
  uint32_t u = get_u32le(p);
  if ((u & 0x7F800000u) == 0x7F800000u || (u >> 31))
    return err_set(gcclCorruptData, "%s: bucket at element %llu has scale %g (must be finite and >= +0)", name,
                   (unsigned long long)base, (double)get_f32(p));
  return gcclSuccess;
}

/* The header checks of bucket_validate: bucket >= 1 and the exact payload size. */
gcclResult_t bucket_check_size(const struct bucket_codec* c, const struct frame_header* h, unsigned code_bits);

/* ---- the loops -------------------------------------------------------------------------- */

/* One bucket x[0, m) at global index base: meta and codes at out. Non-finite
 * inputs become exceptions (zeros in their place), a bucket whose scale
 * overflows all exceptions, and the residual is 0 at every exception. */
__attribute__((always_inline)) static inline gcclResult_t bucket_encode_one(
    const struct bucket_codec* c, const struct encode_ctx* ctx, struct bucket_state* st, const float* x, float* resid,
    size_t m, uint64_t base, unsigned char* out, const unsigned char* end, unsigned code_bits, int simd) {
  struct exc_list* exc = ctx->exc;
  size_t nexc0 = exc->n;
  struct bucket_stats s;
  struct bucket_in b = {x, resid, m, m, base};
  if (!c->scan(x, m, simd, &s)) { /* rare: zeros in place of the non-finite values */
    GCCL_CHECK(sanitize_block(x, m, base, st->tmp, exc));
    b.v = st->tmp;
    b.nf = m - (exc->n - nexc0);
    c->rescan(x, b.v, m, simd, &s);
  }
  if (!c->quantize(ctx, &s, &b, out, end, simd)) {
    GCCL_CHECK(exc_push_range(exc, base, m));
    memset(out, 0, c->meta_bytes + (m * code_bits + 7) / 8);
    if (resid) memset(resid, 0, m * sizeof(float));
    return gcclSuccess;
  }
  if (resid)
    for (size_t e = nexc0; e < exc->n; e++) resid[exc->idx[e] - base] = 0.0f;
  return gcclSuccess;
}

/* codec_ops.encode of a bucket codec (code_bits per element), with the payload
 * CRC computed as it is written (ctx->payload_crc). Takes a deferred input
 * (encode_fill) bucket by bucket. */
__attribute__((always_inline)) static inline gcclResult_t bucket_encode(const struct bucket_codec* c,
                                                                        struct encode_ctx* ctx, const float* x,
                                                                        float* resid, size_t n, unsigned char* payload,
                                                                        size_t* payload_bytes, struct frame_header* h,
                                                                        unsigned code_bits, int simd) {
  struct bucket_state* st = ctx->state;
  size_t bucket = ctx->spec->bucket;
  size_t need = n < bucket ? n : bucket;
  if (st == NULL || st->cap < need)
    return err_set(gcclInternalError, "%s: codec state made for fewer than %zu elements", c->name, need);
  unsigned char* out = payload;
  const unsigned char* end = payload + bucket_payload_bound(n, bucket, c->meta_bytes, code_bits);
  const unsigned char* crc_from = payload;
  uint32_t crc = 0;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    encode_fill(ctx, base, m);
    GCCL_CHECK(
        bucket_encode_one(c, ctx, st, x + base, resid ? resid + base : NULL, m, base, out, end, code_bits, simd));
    out += c->meta_bytes + (m * code_bits + 7) / 8;
    if ((size_t)(out - crc_from) >= BUCKET_CRC_SPAN) {
      crc = crc32c(crc, crc_from, (size_t)(out - crc_from));
      crc_from = out;
    }
  }
  ctx->payload_crc = crc32c(crc, crc_from, (size_t)(out - crc_from));
  ctx->payload_crc_valid = 1;
  *payload_bytes = (size_t)(out - payload);
  h->bits = c->bits_in_header ? (uint8_t)ctx->spec->bits : 0;
  h->bucket = ctx->spec->bucket;
  h->values = 0;
  h->k = 0;
  h->rng_key = 0;
  h->flags = 0;
  return gcclSuccess;
}

/* codec_ops.validate of a bucket codec: the header's sizes, then check on every
 * bucket. */
__attribute__((always_inline)) static inline gcclResult_t bucket_validate(const struct bucket_codec* c,
                                                                          const struct frame_header* h,
                                                                          const unsigned char* payload,
                                                                          unsigned code_bits, int simd) {
  GCCL_CHECK(bucket_check_size(c, h, code_bits));
  const unsigned char* p = payload;
  const unsigned char* end = payload + h->payload_bytes;
  for (uint64_t base = 0; base < h->count; base += h->bucket) {
    uint64_t m = h->count - base < h->bucket ? h->count - base : h->bucket;
    size_t nbytes = (size_t)((m * code_bits + 7) / 8);
    GCCL_CHECK(c->check(h, p, m, base, nbytes, end, simd));
    p += c->meta_bytes + nbytes;
  }
  return gcclSuccess;
}

/* codec_ops.decode_accumulate (store = 0) and decode_store_f32 (store = 1) of a
 * bucket codec. A chunk of an fp32 dst with no exception in it goes straight
 * from the codes to dst (2.5x faster than the stack buffer + block_accumulate
 * when dst is in cache); every other chunk through the stack buffer. */
__attribute__((always_inline)) static inline gcclResult_t bucket_decode(const struct bucket_codec* c,
                                                                        const struct frame_header* h,
                                                                        const unsigned char* payload,
                                                                        const uint64_t* exc, size_t nexc, void* dst,
                                                                        unsigned code_bits, int simd, int store) {
  float v[BUCKET_DECODE_CHUNK];
  size_t n = (size_t)h->count, bucket = h->bucket, cursor = 0;
  const unsigned char* p = payload;
  const unsigned char* end = payload + h->payload_bytes;
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = n - base < bucket ? n - base : bucket;
    union bucket_param q;
    c->param(p, h->bits, &q);
    const unsigned char* codes = p + c->meta_bytes;
    for (size_t j = 0; j < m; j += BUCKET_DECODE_CHUNK) {
      size_t cnt = m - j < BUCKET_DECODE_CHUNK ? m - j : BUCKET_DECODE_CHUNK;
      size_t at = base + j;
      const unsigned char* cc = codes + j / 8 * code_bits;
      int clean = cursor >= nexc || exc[cursor] >= at + cnt;
      if (simd && clean && h->dtype == gcclFloat32) {
        c->expand(&q, cc, end, cnt, h->bits, (float*)dst + at, store ? BUCKET_STORE_F32 : BUCKET_ADD_F32, simd);
        continue;
      }
      c->expand(&q, cc, end, cnt, h->bits, v, BUCKET_SET, simd);
      if (store) memset((float*)dst + at, 0, cnt * sizeof(float)); /* in L1 for the add that follows */
      block_accumulate(dst, h->dtype, at, v, cnt, exc, nexc, &cursor);
    }
    p += c->meta_bytes + (m * code_bits + 7) / 8;
  }
#ifdef BUCKET_HAVE_X86
  if (store && simd) _mm_sfence(); /* streamed stores are ordered before what follows */
#endif
  return gcclSuccess;
}

#endif
