/* codec_util.h — small pieces every codec shares: little-endian access, finite
 * checks, the canonical summation order, and accumulation into any float dtype. */
#ifndef GCCL_COMPRESS_CODEC_UTIL_H
#define GCCL_COMPRESS_CODEC_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/float_bits.h"
#include "compress/codec.h"
#include "compress/spec.h"
#include "gccl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gccl frames are little-endian and the codecs store host floats directly"
#endif

/* put_<name> / get_<name>: a value's bytes at any address (host order, which
 * is little-endian here). */
#define CODEC_BYTES_ACCESSORS(name, type)                   \
  static inline void put_##name(unsigned char* p, type v) { \
    memcpy(p, &v, sizeof v);                                \
  }                                                         \
  static inline type get_##name(const unsigned char* p) {   \
    type v;                                                 \
    memcpy(&v, p, sizeof v);                                \
    return v;                                               \
  }
CODEC_BYTES_ACCESSORS(f32, float)
CODEC_BYTES_ACCESSORS(u16, uint16_t)
CODEC_BYTES_ACCESSORS(u32le, uint32_t)
CODEC_BYTES_ACCESSORS(u64le, uint64_t)

/* 1 when x is neither inf nor NaN (an exponent test: no FP exceptions raised,
 * and it cannot be optimised away the way x == x can under fast-math). */
static inline int f32_finite(float x) {
  return fb_finite(x);
}

/* Sparse decoders add into dst at sorted random indices ~1/ratio apart: every
 * add misses the cache and no hardware prefetcher follows random gaps, so they
 * prefetch element idx[j + SCATTER_AHEAD] (esize bytes each) before adding at
 * idx[j]; 26M elements at 1%: 11 -> 6-8 ms (codec-bench, top-k decode). */
#define SCATTER_AHEAD 16
static inline void scatter_prefetch(void* dst, size_t esize, uint64_t i) {
  __builtin_prefetch((unsigned char*)dst + i * esize, 1);
}

/* Tests set this to 1 to make codecs take their portable scalar paths, which
 * must produce the same bits as the SIMD ones. 0 otherwise; never set by the
 * library. */
extern int codec_force_scalar;

/* 1 when every x[i], i < m, is finite. Vectorises. */
int all_finite(const float* x, size_t m);

/* The canonical fp32 sums that define codec scales. Element i goes to lane
 * i % 16 (lanes summed in index order), then lanes combine as a tree:
 * lane[j] += lane[j + w] for w = 8, 4, 2, 1. Every implementation (AVX2, CUDA)
 * must use exactly this order so that scales, and so frames, are bit-identical.
 * canon_sum_abs sums |v[i]|, canon_sum_sq sums v[i] * v[i]. */
float canon_sum_abs(const float* v, size_t m);
float canon_sum_sq(const float* v, size_t m);

/* max |v[i]| (order does not matter for max); 0 for m == 0. NaN-free input. */
float max_abs(const float* v, size_t m);

/* Copies x[0, m) into tmp with every non-finite value replaced by 0 and pushes
 * base + i for each of them onto exc (increasing). */
gcclResult_t sanitize_block(const float* x, size_t m, uint64_t base, float* tmp, struct exc_list* exc);

/* Pushes base .. base + m - 1 onto exc, skipping any already there (the tail of
 * exc may already hold some of them from sanitize_block). */
gcclResult_t exc_push_range(struct exc_list* exc, uint64_t base, size_t m);

/* dst[base + i] += v[i] in dst's dtype dt (fp32, fp64, fp16 or bf16; halves add
 * in fp32 and round once, to nearest even), for i < m, except at exception
 * indices: exc[*cursor ...] is the increasing exception list, *cursor the first
 * entry not below base; it is advanced past this block. v is scratch (exception
 * slots are zeroed in it). */
void block_accumulate(void* dst, gcclDataType_t dt, size_t base, float* v, size_t m, const uint64_t* exc, size_t nexc,
                      size_t* cursor);

/* dst[i] += v in dtype dt. */
void elem_accumulate(void* dst, gcclDataType_t dt, size_t i, float v);

/* dst[i] += payload[i] for i < n, both of dtype dt (any dtype; halves add in
 * fp32 and round once); payload may be unaligned. The none codec's decoder and
 * the raw-frame fallback. */
void raw_accumulate(void* dst, const unsigned char* payload, size_t n, gcclDataType_t dt);

/* Sparse values on the wire (topk, randk): 4 bytes for fp32, 2 for fp16/bf16. */
size_t values_size(enum spec_values vt);
/* Stores x as vt at p and returns the value the decoder will read back. */
float values_put(unsigned char* p, enum spec_values vt, float x);
float values_get(const unsigned char* p, enum spec_values vt);

/* k for a sparse codec keeping ratio of n elements: round(ratio * n), at least
 * 1 when n > 0, at most n. */
size_t sparse_k(double ratio, size_t n);

#endif
