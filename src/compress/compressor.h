/* compressor.h — a codec bound to one tensor shape, with its error-feedback state. */
#ifndef GCCL_COMPRESS_COMPRESSOR_H
#define GCCL_COMPRESS_COMPRESSOR_H

#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"
#include "compress/spec.h"
#include "gccl.h"

struct gpu_compressor; /* cuda/gpu_compressor.h */

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
  float* tmp;  /* count fp32, made on the first collective that needs it (encode_f32) */
  /* CUDA builds: the GPU twin that encodes device tensors (core/device.h), made
   * on first use, and whether the current residual is the twin's (on the device). */
  struct gpu_compressor* device;
  int residual_on_device;
};

/* Largest frame for n elements of the compressor's spec and dtype. */
size_t compressor_bound(const struct gcclCompressor* c, size_t n);

/* Largest frame for n elements of which at most nonfinite are inf or NaN. */
size_t compressor_bound_nonfinite(const struct gcclCompressor* c, size_t n, size_t nonfinite);

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

/* ---- for the compressed collectives (src/collectives/) ----------------------
 * Collective frames carry fp32 elements (header dtype float32) whatever the
 * tensor's dtype, so every receiver accumulates frames of every stage into fp32
 * sums. src arguments point at element `first` of a tensor of src_dt (the
 * user's dtype, or fp32 for a sum the collective built). */

/* Largest fp32 frame for n elements. */
size_t compressor_bound_f32(const struct gcclCompressor* c, size_t n);

enum ef_mode {
  EF_OFF,     /* x = src; the residual is neither read nor staged */
  EF_ADD,     /* x = src + e_old[first..]; stages x - decoded(x) for the range */
  EF_RESTAGE, /* x = src; adds x - decoded(x) to what is already staged for the
               * range (an owner's re-encode of a reduced chunk) */
};

/* Encodes elements [first, first + n) as one fp32 frame. Without spec.ef every
 * mode is EF_OFF. `stage` (0, 1, ...) is mixed into the random key so that a
 * re-encode draws numbers independent of the first encode; the key also mixes
 * first and the compressor's rank. Same errors as compressor_encode_part. */
gcclResult_t compressor_encode_f32(struct gcclCompressor* c, const void* src, gcclDataType_t src_dt, size_t first,
                                   size_t n, enum ef_mode mode, uint32_t stage, void* frame, size_t cap,
                                   size_t* frame_bytes);

/* acc[i] += float(src[i]) + e_old[first + i] for i < n — the part of its own
 * input a rank reduces without compressing it — and stages residual 0 there.
 * store = 1: acc is written without being read, as if it held +0.0f (the first
 * term of a sum: no clearing pass). */
gcclResult_t compressor_accumulate_exact(struct gcclCompressor* c, const void* src, gcclDataType_t src_dt, size_t first,
                                         size_t n, float* acc, int store);

/* Stages the current residual unchanged for a range this rank does not encode. */
gcclResult_t compressor_stage_keep(struct gcclCompressor* c, size_t first, size_t n);

/* Validates a whole frame (header, CRC, payload, exceptions list) for a tensor
 * of count elements of dt and fills *h; gcclCorruptData on any inconsistency.
 * What frame_decode_accumulate checks first; the GPU decoder checks with it
 * before it copies a frame to the device. */
gcclResult_t frame_check(const void* frame, size_t frame_bytes, size_t count, gcclDataType_t dt,
                         struct frame_header* h);

/* The codec-agnostic decoder: validates the whole frame (header, CRC, payload,
 * exceptions) and only then adds it into dst (count elements of dt).
 * gcclCorruptData on any inconsistency, dst untouched. */
gcclResult_t frame_decode_accumulate(const void* frame, size_t frame_bytes, void* dst, size_t count, gcclDataType_t dt);

/* The accumulate half of frame_decode_accumulate, for a frame that frame_check
 * accepted (for dt) and whose header it filled in *h. */
gcclResult_t frame_accumulate_checked(const struct frame_header* h, const void* frame, void* dst, gcclDataType_t dt);

/* Ranges of a checked fp32 frame: elements [from, from + len) decoded into
 * dst[0, len), added (store = 0) or written as 0.0f + decoded (store = 1): the
 * bits that decoding the whole frame gives there. from is a multiple of
 * frame_range_granule(h), and so is len unless the range ends the tensor. The
 * granule is 0 for frames that cannot be decoded by ranges (top-k, random-k,
 * qsgd, terngrad, none), 1 for raw frames and fp16/bf16, else the bucket. */
size_t frame_range_granule(const struct frame_header* h);
gcclResult_t frame_decode_range(const struct frame_header* h, const void* frame, size_t from, size_t len, float* dst,
                                int store);

/* Writes an fp32 frame's n decoded elements to out (dtype dt): straight into out
 * when dt is fp32, else decoded into the fp32 area `stage` and rounded once by
 * f32_store, so every collective rounds its outputs alike. */
gcclResult_t frame_decode_f32_to(const void* frame, size_t frame_bytes, void* out, gcclDataType_t dt, size_t n,
                                 float* stage);

#endif
