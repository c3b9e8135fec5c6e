/* device.h — CUDA device buffers in collectives and in the codec API (CUDA builds;
 * see gccl_cuda.h): the seam between host code and the GPU.
 *
 * A call whose send or receive buffer is device memory (cudaPointerGetAttributes
 * says cudaMemoryTypeDevice) is flagged when it is launched and, when it runs,
 * staged: once the CUDA stream it belongs to has finished what came before, the
 * send buffer is copied into pinned host memory the communicator keeps (grown
 * when a call needs more, reused otherwise), the collective runs on host memory
 * as any other (the same schedules, codecs and residuals), and the result is
 * copied back and waited for. So the call is ordered on its CUDA stream like a
 * kernel, but the host waits for it. A one-frame schedule of a whole fp32
 * tensor instead encodes and decodes on the GPU, from and into the device
 * buffers: only frames cross to the host (device_codec_path).
 * CUDA builds compile device_stage.c and device_codec.c; builds without CUDA
 * compile device_none.c, where no pointer is a device pointer. The seam sits
 * below the collectives, whose one-frame steps (one_frame.c) call it, and takes
 * only their call types from coll.h: the communicator stays opaque here. */
#ifndef GCCL_DEVICE_DEVICE_H
#define GCCL_DEVICE_DEVICE_H

#include "collectives/coll.h"
#include "gccl.h"

/* Flags of coll_args.device. */
#define DEVICE_SEND 1u
#define DEVICE_RECV 2u

/* Which of a's buffers are device memory (DEVICE_* flags), for a communicator
 * of nranks ranks. 0 without CUDA or without a usable device. */
unsigned device_buffers(const struct coll_args* a, int nranks);

/* Runs a flagged call of rank ctx->rank of ctx->nranks through pinned host
 * buffers: run(comm, host_args) does the collective itself, with algorithm algo
 * (the one the call runs: with a compressor it decides which codec work stays on
 * the GPU, device_codec_path). A failure before run is called aborts ctx->tp:
 * the peers are on their way into the collective. The staging buffers live in
 * *stage (made on first use). */
struct device_stage;
gcclResult_t device_execute(struct device_stage** stage, const struct coll_ctx* ctx, const struct coll_args* a,
                            enum coll_algo algo, gcclComm_t comm,
                            gcclResult_t (*run)(gcclComm_t, const struct coll_args*));
void device_stage_free(struct device_stage* stage);

/* Which codec work of a compressed call running algorithm algo runs on the GPU
 * (device_codec.c), as DEVICE_* flags: DEVICE_SEND, the encode of the input,
 * when the send buffer is on the device, algo a one-frame schedule (coll.h's
 * coll_encode_input), the call the whole fp32 tensor and the codec one with GPU
 * kernels; DEVICE_RECV as well, the decoding into the output (coll_output_*),
 * when the receive buffer is on the device too and algo is not sparse-sr (whose
 * sums are built on the host). device_execute hands the schedule those device
 * buffers (coll_args.device_send, device_recv) instead of staging them. */
unsigned device_codec_path(const struct coll_args* a, enum coll_algo algo);
/* Puts a compressor's residual where this call's encode reads it: on the device
 * when a->device_send is set, else on the host (before the schedule runs). It
 * also tells the compressor which one this call stages (encode_on_twin), so that
 * compressor_commit and compressor_abort act on that one. */
gcclResult_t device_place_residual(const struct coll_args* a);
/* The one-frame steps on the GPU: the device input into a host frame, the new
 * residual staged on the device until compressor_commit; elements [at, at + n)
 * of the device output cleared, or a (host) frame of n elements added into
 * them. */
gcclResult_t device_encode_input(const struct coll_args* a, void* frame, size_t cap, size_t* frame_bytes);
gcclResult_t device_output_clear(const struct coll_args* a, size_t at, size_t n);
gcclResult_t device_output_add(const struct coll_args* a, const void* frame, size_t frame_bytes, size_t at, size_t n);
/* 1 when p points to CUDA device memory (0 without CUDA or a usable device). */
int device_is_pointer(const void* p);

/* The codec API on device memory (device_codec.c). gcclEncode of a device
 * tensor (frame in host or device memory), and gcclDecodeAccumulate where the
 * frame or dst is device memory, ordered on CUDA stream cuda_stream (NULL: the
 * legacy default stream); both return when the work is done. A compressor's
 * residual lives where its last encode ran: device_residual_to_host brings it
 * back before host code reads it. */
gcclResult_t device_encode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frame_bytes,
                           void* cuda_stream);
gcclResult_t device_decode_accumulate(const void* frame, size_t frame_bytes, void* dst, size_t count, gcclDataType_t dt,
                                      void* cuda_stream);
gcclResult_t device_residual_to_host(gcclCompressor_t c);

#endif
