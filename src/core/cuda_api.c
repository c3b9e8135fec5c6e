/* cuda_api.c — gccl_cuda.h's entry points (CUDA builds only): gccl streams ordered
 * on a CUDA stream, and the codec API on one. The work itself is the device
 * seam's (device/device.h); these check their arguments (argcheck.h) and name
 * themselves. */
#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"
#include "gccl_cuda.h"

gcclResult_t gcclStreamCreateCuda(gcclStream_t* s, cudaStream_t cuda) {
  GCCL_CHECK(gcclStreamCreate(s));
  stream_set_cuda(*s, (void*)cuda);
  return gcclSuccess;
}

gcclResult_t gcclStreamGetCuda(gcclStream_t s, cudaStream_t* cuda) {
  GCCL_CHECK(argcheck_stream(s, "gcclStreamGetCuda"));
  GCCL_CHECK(argcheck_not_null(cuda, "gcclStreamGetCuda", "cuda"));
  *cuda = (cudaStream_t)stream_cuda(s);
  return gcclSuccess;
}

gcclResult_t gcclEncodeCuda(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frameBytes,
                            cudaStream_t stream) {
  return codec_encode(c, src, frame, cap, frameBytes, stream, "gcclEncodeCuda");
}

gcclResult_t gcclDecodeAccumulateCuda(const void* frame, size_t frameBytes, void* dst, size_t count,
                                      gcclDataType_t datatype, cudaStream_t stream) {
  return codec_decode_accumulate(frame, frameBytes, dst, count, datatype, stream, "gcclDecodeAccumulateCuda");
}
