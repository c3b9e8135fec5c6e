/* topk.h — the magnitude filter behind top-k, shared with randk's non-finite scan (and tests). */
#ifndef GCCL_COMPRESS_TOPK_H
#define GCCL_COMPRESS_TOPK_H

#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"
#include "compress/frame.h"
#include "compress/index_code.h"
#include "compress/spec.h"
#include "compress/topk_sample.h"
#include "gccl.h"

/* The smallest |x| bit pattern (x's fp32 bits with the sign cleared) that
 * values_put(vt) turns into inf: 0x7F800000 (fp32), 0x477FF000 = 65520 (fp16),
 * 0x7F7F8000 (bf16). Sparse codecs send elements at or above it, and non-finite
 * ones, as exceptions: the payload cannot carry them. */
uint32_t topk_exc_key(enum spec_values vt);

/* One pass over x[0, n) in index order, with key(i) = bits of x[i] & 0x7FFFFFFF:
 *  - key >= exc_key: pushes i onto exc (so exc stays increasing);
 *  - thr < key < exc_key, or key == thr for the first tie_quota such i:
 *    appends i to idx and x[i]'s raw bits to bits (a candidate).
 * Requires thr <= exc_key. *count = candidates found; when there are more than
 * cap the pass stops early and *count = cap + 1 (exc then holds a prefix).
 * simd = 1 uses AVX2 where the CPU has it, 0 the portable path; both give the
 * same results. gcclSystemError if exc cannot grow. */
gcclResult_t topk_filter(const float* x, size_t n, uint32_t thr, uint32_t exc_key, size_t tie_quota, uint64_t* idx,
                         uint32_t* bits, size_t cap, struct exc_list* exc, int simd, size_t* count);

/* values_put over m values given as fp32 bits, into p (m * values_size(vt)
 * bytes); decoded[j] = the value the decoder reads back. Every value must be
 * finite and below topk_exc_key(vt) (what sparse codecs send); then the result
 * is values_put's exactly, with AVX2/F16C where the CPU has them. */
void topk_values_put(unsigned char* p, enum spec_values vt, const uint32_t* bits, size_t m, float* decoded);

/* values_get over m values (any bits), with F16C where the CPU has it. */
void topk_values_get(const unsigned char* p, enum spec_values vt, size_t m, float* out);

/* Reads a top-k frame's kept entries (index, decoded value) in index order, for
 * collectives that route them instead of adding them into a dense tensor. The
 * frame is one this process encoded or one that passed validation; h is its
 * header (frame_validate), payload the bytes after it. Exceptions and
 * FRAME_FLAG_RAW frames are the caller's. */
struct topk_reader {
  struct index_reader r;
  const unsigned char* vals;
  size_t vs, done;
  enum spec_values vt;
  unsigned char* plain; /* the inflated index section of a zstd frame */
};
/* gcclCorruptData (a zstd section that does not inflate), gcclSystemError. */
gcclResult_t topk_reader_init(struct topk_reader* rd, const struct frame_header* h, const unsigned char* payload);
/* Writes the next (up to max) entries; returns how many (0 when done). */
size_t topk_reader_next(struct topk_reader* rd, uint64_t* idx, float* val, size_t max);
void topk_reader_free(struct topk_reader* rd);

#endif
