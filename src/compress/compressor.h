/* compressor.h — a codec bound to one tensor shape, with its error-feedback state:
 * the compressor's whole life, from create to destroy. The public gcclCompressor*
 * functions (core/compress_api.c) check their arguments and call these; inside
 * the library, compressors are made and driven here directly. */
#ifndef GCCL_COMPRESS_COMPRESSOR_H
#define GCCL_COMPRESS_COMPRESSOR_H

#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"
#include "compress/spec.h"
#include "gccl.h"

/* Counts beyond this are refused (gcclCompressorCreate checks): it keeps every
 * size computed from a count (residual, frames, index sections) far from
 * overflowing size_t. */
#define COMPRESSOR_MAX_COUNT (SIZE_MAX / 64)

struct gpu_compressor; /* cuda/gpu_compressor.h */

/* What a compressor does with its GPU twin. src/device makes the twin and hands
 * these over with it, so that commit, abort and destroy below reach the twin
 * without compress knowing CUDA. */
struct compressor_twin_ops {
  void (*commit)(struct gpu_compressor* twin); /* the twin's staged residual becomes current */
  void (*abort)(struct gpu_compressor* twin);  /* the twin forgets it */
  void (*destroy)(struct gpu_compressor* twin);
};

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
  /* CUDA builds: the GPU twin that encodes device tensors (device/device.h), made
   * on first use with its twin_ops, and whether the current residual is the
   * twin's (on the device). encode_on_twin: the call under way encodes on the
   * twin, which stages its residual there (set by src/device before the call
   * encodes; compressor_commit and compressor_abort act on the twin then, and
   * clear it). */
  struct gpu_compressor* device;
  const struct compressor_twin_ops* twin_ops;
  int residual_on_device;
  int encode_on_twin;
};

/* Makes a compressor of `spec` (parsed and checked: spec_parse, a float dtype
 * unless the codec is none, zstd only in builds with it) for count elements
 * (at most COMPRESSOR_MAX_COUNT) of dt. Its residual starts at zero and its call
 * number at 0. gcclSystemError when out of memory; *out is NULL on error. */
gcclResult_t compressor_create(struct gcclCompressor** out, const struct codec_spec* spec, size_t count,
                               gcclDataType_t dt);

/* Frees c, its GPU twin included. NULL is allowed. */
void compressor_destroy(struct gcclCompressor* c);

/* Frees what c holds, its GPU twin included, but not c itself, which stays for
 * the caller to free(): gcclCompressorDestroy hands it to the handle quarantine
 * (core/handles.h), so that a stale handle never names a newer compressor. */
void compressor_release(struct gcclCompressor* c);

/* The residual, converted to the compressor's dtype, into out (count elements);
 * zeros without error feedback. Reads the host residual: one the twin holds must
 * be brought back first (device_residual_to_host). */
void compressor_get_residual(const struct gcclCompressor* c, void* out);

/* Makes in (count elements of the compressor's dtype, converted to fp32) the
 * residual of a compressor with error feedback. Returns count, or the index of
 * the first element that is not finite in fp32 (then nothing changes). The twin's
 * residual, if current, must have been brought back first (device_residual_to_host). */
size_t compressor_set_residual(struct gcclCompressor* c, const void* in);

/* m[i] = float(src[i]) + e_old[i] for i in [first, first + n) (src and m the
 * whole tensor's, src of dt), and those elements' residuals count as staged: the
 * caller writes their new residual into c->work before the commit (a codec whose
 * residual comes from a collective's result: powersgd). Without error feedback,
 * m is the input. */
gcclResult_t compressor_stage_input(struct gcclCompressor* c, const void* src, gcclDataType_t dt, size_t first,
                                    size_t n, float* m);

/* The fp32 values the codec's state carries between calls (powersgd's Q), *n
 * of them; NULL with *n = 0 for codecs that carry none. */
float* compressor_carried(const struct gcclCompressor* c, size_t* n);

/* Largest frame for n elements of the compressor's spec and dtype. */
size_t compressor_bound(const struct gcclCompressor* c, size_t n);

/* Largest frame for n elements of which at most nonfinite are inf or NaN. */
size_t compressor_bound_nonfinite(const struct gcclCompressor* c, size_t n, size_t nonfinite);

/* gcclEncode of host buffers: the whole tensor into one frame in frame[0, cap),
 * then commit. On error the residual and call number stay as they were (abort).
 * Errors as compressor_encode_part's. */
gcclResult_t compressor_encode(struct gcclCompressor* c, const void* src, void* frame, size_t cap, size_t* frame_bytes);

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
 * once (gcclInternalError otherwise, and nothing changes). A call that encoded
 * on the GPU twin (encode_on_twin) commits the twin's staged residual instead. */
gcclResult_t compressor_commit(struct gcclCompressor* c);

/* Forgets staged parts, the twin's too: the residual and call number stay as
 * they were. */
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

#endif
