/* bucket.h — what the bucket codecs (uniform, qsgd, sign, terngrad) share: the
 * size of their payloads and their per-compressor scratch. */
#ifndef GCCL_COMPRESS_BUCKET_H
#define GCCL_COMPRESS_BUCKET_H

#include <stddef.h>
#include <stdint.h>

#include "compress/spec.h"
#include "gccl.h"

/* A bucket codec's payload: per bucket of `bucket` elements (the last one
 * shorter), meta_bytes of scales, then the codes of code_bits each, packed
 * LSB first and padded to a byte. *out = its size for count elements; returns 0
 * (and leaves *out) when that overflows 64 bits, as a hostile header may ask.
 * bucket >= 1, code_bits <= 9. */
int bucket_payload_size(uint64_t count, uint64_t bucket, unsigned meta_bytes, unsigned code_bits, uint64_t* out);

/* bucket_payload_size for a tensor of n elements, or SIZE_MAX if it overflows. */
size_t bucket_payload_bound(size_t n, uint64_t bucket, unsigned meta_bytes, unsigned code_bits);

/* Scratch for one bucket with its non-finite values zeroed (sanitize_block). */
struct bucket_state {
  float* tmp;
  size_t cap; /* elements: min(bucket, n) */
};

/* state_create / state_destroy of every bucket codec (codec_ops). */
gcclResult_t bucket_state_create(const struct codec_spec* s, size_t n, void** state);
void bucket_state_destroy(void* state);

#endif
