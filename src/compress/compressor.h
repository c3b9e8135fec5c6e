/* compressor.h — a codec bound to one tensor shape, with its error-feedback state. */
#ifndef GCCL_COMPRESS_COMPRESSOR_H
#define GCCL_COMPRESS_COMPRESSOR_H

#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"
#include "compress/spec.h"
#include "gccl.h"

/* What gcclCompressor_t points to. One thread uses a compressor at a time (like
 * a communicator); distinct compressors are independent. */
struct gcclCompressor {
  struct codec_spec spec;
  char spec_text[SPEC_FORMAT_MAX]; /* canonical, for logs and cross-rank checks */
  const struct codec_ops* ops;
  size_t count;
  gcclDataType_t dt;
  size_t bound;   /* gcclEncodeBound for the whole tensor */
  uint64_t calls; /* committed encodes so far = the call number of the next one */
  uint64_t rank;  /* mixed into the stochastic-rounding key; 0 unless a collective sets it */
  /* Error feedback (spec.ef): residual holds e, fp32, count elements. Encodes
   * stage the new residual in work; commit swaps the two, so a failed call
   * leaves residual untouched. work also holds the fp32 copy of a non-fp32
   * input. Both pre-touched, allocated once. */
  float* residual;
  float* work;
  size_t staged; /* elements staged in work since the last commit/abort */
  struct exc_list exc;
  void* state; /* codec scratch */
};

/* Largest frame for n elements of the compressor's spec and dtype. */
size_t compressor_bound(const struct gcclCompressor* c, size_t n);

/* Encodes elements [first, first + n) of the tensor — src points at element
 * `first` — into one frame of count n, in frame[0, cap). With error feedback the
 * residual of those elements is used and the new one staged; nothing becomes
 * current until compressor_commit. The call's random key is the same for every
 * part and mixes in `first`, so parts draw independent numbers.
 * Errors: gcclInvalidArgument (cap below compressor_bound(n), range outside the
 * tensor), gcclSystemError/gcclInternalError from the codec. */
gcclResult_t compressor_encode_part(struct gcclCompressor* c, const void* src, size_t first, size_t n, void* frame,
                                    size_t cap, size_t* frame_bytes);

/* Makes the staged residual current and advances the call number. With error
 * feedback the parts staged since the last commit must cover the tensor exactly
 * once (gcclInternalError otherwise, and nothing changes). */
gcclResult_t compressor_commit(struct gcclCompressor* c);

/* Forgets staged parts: the residual and call number stay as they were. */
void compressor_abort(struct gcclCompressor* c);

/* The codec-agnostic decoder: validates the whole frame (header, CRC, payload,
 * exceptions) and only then adds it into dst (count elements of dt).
 * gcclCorruptData on any inconsistency, dst untouched. */
gcclResult_t frame_decode_accumulate(const void* frame, size_t frame_bytes, void* dst, size_t count,
                                     gcclDataType_t dt);

#endif
