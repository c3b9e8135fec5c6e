/* gccl_cuda.h — gccl on CUDA device buffers (only in builds with CUDA).
 *
 * gcclAllReduce, gcclAllGather, gcclReduceScatter, gcclBroadcast, gcclReduce and
 * the compressed collectives accept device pointers for their buffers (found with
 * cudaPointerGetAttributes; host and managed memory are used in place). Such a
 * call waits for the work queued before it on its CUDA stream, stages the send
 * buffer through pinned host memory the communicator keeps, runs the collective
 * with the same schedules, codecs and error-feedback residuals as host buffers,
 * and copies the result back. Where a schedule encodes the whole input once (the
 * sparse-ag, sparse-sr and randk allreduces, the compressed allgather) of an fp32
 * tensor, the codec work runs on the GPU: the encode of a device input (with the
 * residual kept on the device; the frame is the one the CPU would make) and,
 * when the output is on the device too, the decoding of arriving frames into it
 * (not for sparse-sr), so that frames, not tensors, cross to the host; the calling thread (or the gccl stream's worker)
 * waits for all of it. The CUDA stream of a call is the one its gccl stream was
 * made with (gcclStreamCreateCuda), else the legacy default stream; it runs with
 * the device that holds its buffers current (also on a gccl stream's worker
 * thread), and gives the calling thread its device back. Pointers are looked at
 * only once the process uses CUDA (a device's primary context is active), so a
 * process that never touches CUDA gets no CUDA context from gccl. A failure
 * before the collective starts (pinned memory, the stream) breaks the
 * communicator, so that its peers return instead of waiting. */
#ifndef GCCL_CUDA_H
#define GCCL_CUDA_H

#include <cuda_runtime_api.h>

#include "gccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A gccl stream (a worker that runs collectives in order, see gcclStreamCreate)
 * whose device-buffer collectives are ordered on the CUDA stream `cuda`. */
GCCL_API gcclResult_t gcclStreamCreateCuda(gcclStream_t* s, cudaStream_t cuda);
GCCL_API gcclResult_t gcclStreamGetCuda(gcclStream_t s, cudaStream_t* cuda);

/* gcclEncode and gcclDecodeAccumulate ordered on the CUDA stream `stream` (the
 * plain calls use the legacy default stream) for frameworks whose tensors live
 * on other streams (PyTorch's current stream). Each waits for the work queued
 * before it on `stream` and returns when its own is done: the frame written
 * (its size known to the host, which writes the CRC), or dst updated. Buffers
 * in host memory are used as by the plain calls; the same checks and errors. */
GCCL_API gcclResult_t gcclEncodeCuda(gcclCompressor_t c, const void* src, void* frame, size_t cap,
                                     size_t* frameBytes, cudaStream_t stream);
GCCL_API gcclResult_t gcclDecodeAccumulateCuda(const void* frame, size_t frameBytes, void* dst, size_t count,
                                               gcclDataType_t datatype, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
