/* device.h — collectives on CUDA device buffers (CUDA builds; see gccl_cuda.h).
 *
 * A call whose send or receive buffer is device memory (cudaPointerGetAttributes
 * says cudaMemoryTypeDevice) is flagged when it is launched and, when it runs,
 * staged: once the CUDA stream it belongs to has finished what came before, the
 * send buffer is copied into pinned host memory the communicator keeps (grown
 * when a call needs more, reused otherwise), the collective runs on host memory
 * as any other (the same schedules, codecs and residuals), and the result is
 * copied back and waited for. So the call is ordered on its CUDA stream like a
 * kernel, but the host waits for it. A one-frame schedule's encode of the whole
 * fp32 input runs on the GPU instead, from the device buffer, which then never
 * crosses to the host (device_prepare).
 * Builds without CUDA compile device_none.c: no pointer is a device pointer there. */
#ifndef GCCL_CORE_DEVICE_H
#define GCCL_CORE_DEVICE_H

#include "../collectives/coll.h"
#include "gccl.h"

/* Flags of coll_args.device. */
#define DEVICE_SEND 1u
#define DEVICE_RECV 2u

/* Which of a's buffers are device memory (DEVICE_* flags), for a communicator
 * of nranks ranks. 0 without CUDA or without a usable device. */
unsigned device_buffers(const struct coll_args* a, int nranks);

/* Runs a flagged call through pinned host buffers: run(comm, host_args) does the
 * collective itself. The staging buffers live in *stage (made on first use). */
struct device_stage;
gcclResult_t device_execute(struct device_stage** stage, gcclComm_t comm, const struct coll_args* a,
                            gcclResult_t (*run)(gcclComm_t, const struct coll_args*));
void device_stage_free(struct device_stage* stage);

/* Before a call runs algorithm algo on `rank` of nranks (comm_execute). A staged
 * call from the device (a->device_send set by device_execute, a->sendbuff the
 * pinned staging) keeps a->device_send when its one encode of the input will run
 * on the GPU: algo is a one-frame schedule (coll_encode_input), the input the
 * whole fp32 tensor, the codec one with GPU kernels. Otherwise the send buffer is
 * copied into the staging now and a->device_send cleared. A compressor's residual
 * is put where the encode will read it (the device, or the host). */
gcclResult_t device_prepare(struct coll_args* a, enum coll_algo algo, int rank, int nranks);
/* device_prepare's choice for a compressed call (device_codec.c): *gpu = 1 when
 * its encode runs on the GPU; moves the residual there, or to the host. */
gcclResult_t device_place_residual(const struct coll_args* a, enum coll_algo algo, int* gpu);
/* The GPU encode of coll_encode_input: the device input into a host frame, the
 * new residual staged on the device until device_commit_encode. */
gcclResult_t device_encode_input(const struct coll_args* a, void* frame, size_t cap, size_t* frame_bytes);
/* After a collective that encoded on the GPU: makes the staged residual current
 * and advances the call number, as compressor_commit; or forgets it. */
gcclResult_t device_commit_encode(gcclCompressor_t c);
void device_abort_encode(gcclCompressor_t c);

/* 1 when p points to CUDA device memory (0 without CUDA or a usable device). */
int device_is_pointer(const void* p);

/* The codec API on device memory (cuda/device_codec.c). gcclEncode of a device
 * tensor (frame in host or device memory), and gcclDecodeAccumulate where the
 * frame or dst is device memory. A compressor's residual lives where its last
 * encode ran: device_residual_to_host brings it back before host code reads it. */
gcclResult_t device_encode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frame_bytes);
gcclResult_t device_decode_accumulate(const void* frame, size_t frame_bytes, void* dst, size_t count,
                                      gcclDataType_t dt);
gcclResult_t device_residual_to_host(gcclCompressor_t c);
void device_compressor_free(gcclCompressor_t c);

#endif
