/* gpu_compressor.h — a compressor whose tensor and error-feedback residual live on
 * a CUDA device: gcclEncode and gcclDecodeAccumulate for device buffers.
 *
 * Frames are byte-identical to the CPU compressor's (compressor.c) for the same
 * spec, dtype, input, residual, call number and rank: the kernels compute the
 * codec arithmetic of codec_math.h, and the host writes the header and CRC with
 * frame.c. Frames are returned in host memory (the local and MPI transports carry
 * them from there); decoding validates the frame on the host before a byte of the
 * device tensor changes. Codecs with kernels: none, fp16, bf16, uniform, qsgd,
 * sign, terngrad, topk (exact and approx=1), randk; topk with zstd=1 is
 * gcclInvalidUsage. Device scratch is allocated at
 * create (and grown once if a larger frame is decoded) and reused. Not
 * thread-safe, like gcclCompressor_t. */
#ifndef GCCL_CUDA_GPU_COMPRESSOR_H
#define GCCL_CUDA_GPU_COMPRESSOR_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "gccl.h"

struct codec_spec;

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_compressor;

/* 1 when a CUDA device is present and usable, else 0 (and why, in *why, if not NULL). */
int gpu_available(const char** why);

/* For count elements of dt (a float type; any type for "none") with spec's codec. */
gcclResult_t gpu_compressor_create(struct gpu_compressor** g, const char* spec, size_t count, gcclDataType_t dt);
void gpu_compressor_destroy(struct gpu_compressor* g);

/* Sets the call number and rank the next encode's random keys use, so that a
 * GPU twin of a host compressor draws what the host one would. */
void gpu_compressor_sync(struct gpu_compressor* g, uint64_t calls, uint64_t rank);

/* gcclEncodeBound's value for this compressor. */
size_t gpu_compressor_bound(const struct gpu_compressor* g);

/* Pinned host memory of gpu_compressor_bound bytes, made at create, through which
 * encoded bodies cross to the host: encoding into it saves a copy. */
void* gpu_compressor_frame_buffer(struct gpu_compressor* g);

/* Sets the rank mixed into the stochastic-rounding key (0 by default), as a
 * collective does for its CPU compressor. */
void gpu_compressor_set_rank(struct gpu_compressor* g, uint64_t rank);

/* 1 when the GPU encodes spec for tensors of count elements (gpu_compressor_create
 * would not refuse it). */
int gpu_codec_supported(const struct codec_spec* spec, size_t count);

/* Encodes the device tensor src into frame[0, cap) in host memory and commits the
 * new residual (on the device) only on success. Returns when the frame is ready. */
gcclResult_t gpu_compressor_encode(struct gpu_compressor* g, const void* src, void* frame, size_t cap,
                                   size_t* frame_bytes, cudaStream_t stream);

/* The same, with the new residual staged: gpu_compressor_commit makes it current
 * and advances the call number (as compressor_commit), gpu_compressor_abort
 * forgets it (as compressor_abort). For collectives, which commit only once
 * every rank succeeded. */
gcclResult_t gpu_compressor_encode_staged(struct gpu_compressor* g, const void* src, void* frame, size_t cap,
                                          size_t* frame_bytes, cudaStream_t stream);
void gpu_compressor_commit(struct gpu_compressor* g);
void gpu_compressor_abort(struct gpu_compressor* g);

/* The encode kernels alone, device to device, for timing: the payload of src in
 * device scratch, and the staged residual. No frame, no commit. */
gcclResult_t gpu_compressor_encode_payload(struct gpu_compressor* g, const void* src, cudaStream_t stream);

/* The residual (count floats) to and from host memory. */
gcclResult_t gpu_compressor_get_residual(const struct gpu_compressor* g, float* out);
gcclResult_t gpu_compressor_set_residual(struct gpu_compressor* g, const float* in);

/* dst (device, count elements of dt) += the frame's decoded values; the frame is
 * in host memory and fully validated first (gcclCorruptData leaves dst unchanged).
 * Uses g's device scratch; the frame may come from any compressor. */
gcclResult_t gpu_compressor_decode(struct gpu_compressor* g, const void* frame, size_t frame_bytes, void* dst,
                                   size_t count, gcclDataType_t dt, cudaStream_t stream);

/* The decode kernels alone, device to device, for timing: dst += the payload that
 * the last gpu_compressor_encode_payload left in device scratch (exceptions not
 * applied). */
gcclResult_t gpu_compressor_decode_payload(struct gpu_compressor* g, void* dst, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
