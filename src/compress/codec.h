/* codec.h — what every codec provides, and the contract between codecs and the
 * compressor that drives them (compressor.c) and the decoder (decode.c).
 *
 * Division of labour:
 *  - The compressor turns the caller's tensor (any float dtype) plus the
 *    error-feedback residual into one fp32 array x, hands it to the codec, then
 *    writes the exceptions list, the header and the CRC, and commits the residual
 *    only when everything succeeded.
 *  - A codec turns x into its payload and, with error feedback, leaves the new
 *    residual x - decoded(x) in place. It never sees other dtypes on encode.
 *  - On decode the frame header and CRC are already checked (frame_validate); the
 *    codec checks its payload completely (validate) before anything is written,
 *    then adds its decoded values into dst (decode_accumulate) in dst's dtype.
 *
 * Exceptions: elements a codec cannot or should not represent — non-finite inputs,
 * and all elements of a bucket whose scale overflows fp32 — are listed by index
 * (exc_push). The compressor sends their raw input values after the payload. At an
 * exception index the payload's own contribution must be zero: dense codecs skip
 * those positions when accumulating (block_accumulate does it), sparse codecs
 * never select them (topk) or send 0 there (randk). The decoder then adds the raw
 * values. So a NaN or inf input comes back non-finite at its index, exactly.
 *
 * Payloads are little-endian. Scales and thresholds are computed over finite
 * values only. Arithmetic that defines a decoded value must be written so that
 * encoder (for the residual), decoder and the GPU kernels compute the same bits:
 * no FMA contraction (compress sources build with -ffp-contract=off), fixed
 * summation orders (canon_sum below).
 */
#ifndef GCCL_COMPRESS_CODEC_H
#define GCCL_COMPRESS_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compress/frame.h"
#include "compress/spec.h"
#include "gccl.h"

/* Indices of elements sent as exceptions, strictly increasing. Owned by the
 * compressor; grows on demand (non-finite inputs are rare). */
struct exc_list {
  uint64_t* idx;
  size_t n;
  size_t cap;
};

/* Appends index i (must exceed the last one). gcclSystemError if out of memory. */
gcclResult_t exc_push(struct exc_list* l, uint64_t i);

/* Per-call inputs to encode. */
struct encode_ctx {
  const struct codec_spec* spec;
  uint64_t key;        /* stochastic rounding: rng_key(seed, call, rank) */
  uint64_t shared_key; /* randk: rng_key(seed, call, RNG_SHARED) — equal on every rank */
  struct exc_list* exc;
  void* state; /* codec-private scratch made by ops->state_create, or NULL */
  /* Optional: a codec that checksums its payload while writing it (cheaper than
   * a second pass) stores crc32c(0, payload, payload_bytes) here and sets
   * payload_crc_valid; otherwise the compressor computes it. */
  int payload_crc_valid;
  uint32_t payload_crc;
  /* Deferred input, for codecs with ops->fills_input: when fill_dst is set, x is
   * fill_dst and x[i] = fill_a[i] + fill_b[i] (input + residual), or fill_a[i]
   * when fill_b is NULL (a copy), is built by encode_fill just before the codec
   * first reads x[i], so each bucket is still in cache when the codec reads it
   * and writes the residual over it. */
  float* fill_dst;
  const float* fill_a;
  const float* fill_b;
};

/* Builds x[base, base + m) of a deferred input (no-op when there is none). */
static inline void encode_fill(const struct encode_ctx* ctx, size_t base, size_t m) {
  if (!ctx->fill_dst) return;
  float* x = ctx->fill_dst + base;
  const float* a = ctx->fill_a + base;
  if (ctx->fill_b == NULL) {
    memcpy(x, a, m * sizeof(float));
    return;
  }
  const float* b = ctx->fill_b + base;
  for (size_t i = 0; i < m; i++) x[i] = a[i] + b[i];
}

struct codec_ops {
  /* Largest payload (bytes, excluding header and exceptions) encode writes for
   * n elements. */
  size_t (*payload_bound)(const struct codec_spec* s, size_t n);

  /* Optional: scratch the codec reuses across calls for tensors of n elements
   * (allocated once per compressor). NULL when the codec needs none. */
  gcclResult_t (*state_create)(const struct codec_spec* s, size_t n, void** state);
  void (*state_destroy)(void* state);
  /* Optional: a collective that staged codec state (powersgd's next Q) committed
   * or aborted; commit makes that state current, abort drops it. */
  void (*state_commit)(void* state);
  void (*state_abort)(void* state);
  /* Optional: the fp32 values the state carries from call to call (a checkpoint
   * saves and restores them; gcclCompressorGetState), *n of them. */
  float* (*state_carried)(void* state, size_t* n);

  /* Encodes x[0, n) into payload (room for payload_bound bytes), sets
   * *payload_bytes and the codec fields of h (bits, bucket, values, k, rng_key,
   * flags); the compressor has already set codec, dtype and count.
   * Exceptions go to ctx->exc in increasing order.
   * resid is NULL (no error feedback) or equal to x: then on return
   * x[i] = x[i] - decoded[i] for every i (0 at exception indices).
   * Fails only on internal errors (out of memory, zstd). */
  gcclResult_t (*encode)(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                         size_t* payload_bytes, struct frame_header* h);

  /* 1 when encode calls encode_fill for every range before reading it, so it can
   * take a deferred input (ctx->fill_dst); 0: the compressor builds x first. */
  int fills_input;

  /* Checks everything about the payload the header leaves open (its exact size
   * for these parameters, scales finite, codes legal, indices in range and
   * increasing, ...). gcclCorruptData with an err_set message otherwise. Must not
   * read outside payload[0, h->payload_bytes). */
  gcclResult_t (*validate)(const struct frame_header* h, const unsigned char* payload);

  /* dst[i] += decoded[i] for i < h->count, dst of dtype h->dtype, skipping the
   * exception indices exc[0, nexc) (increasing, < count; the decoder adds their
   * values afterwards). Called only after validate succeeded. May allocate only
   * for zstd; returns gcclSystemError if that fails (dst then unchanged). */
  gcclResult_t (*decode_accumulate)(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                    size_t nexc, void* dst);

  /* Optional, for fp32 frames: what decode_accumulate leaves in an fp32 dst of
   * +0.0f, i.e. dst[i] = 0.0f + decoded[i] (0 at exception indices), without
   * reading dst first: a collective's output is written once instead of cleared
   * and then read back. NULL: the decoder clears dst and accumulates. */
  gcclResult_t (*decode_store_f32)(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                   size_t nexc, float* dst);

  /* Optional: the payload offset in bytes at which element `first` starts, for
   * `first` a multiple of h->bucket (any index when h->bucket is 0), so a run of
   * whole buckets decodes as a frame of its own (frame_decode_range). */
  uint64_t (*payload_offset)(const struct frame_header* h, uint64_t first);
};

/* The table for each codec, one per file (codec_none.c, codec_half.c, ...). */
extern const struct codec_ops codec_none_ops;
extern const struct codec_ops codec_half_ops; /* codec_half.c: fp16 and bf16 */
extern const struct codec_ops codec_uniform_ops;
extern const struct codec_ops codec_qsgd_ops;
extern const struct codec_ops codec_sign_ops;
extern const struct codec_ops codec_terngrad_ops;
extern const struct codec_ops codec_topk_ops;
extern const struct codec_ops codec_randk_ops;
extern const struct codec_ops codec_powersgd_ops;

/* The ops of codec id c (NULL if unknown). */
const struct codec_ops* codec_ops_for(enum codec_id c);

#endif
