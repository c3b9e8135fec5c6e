/* compress_api.c — the public compressor and codec entry points: each checks its
 * arguments (argcheck.h), then calls the compressor (compress/compressor.h), the
 * decoder (compress/decode.h) or, for device buffers, the device seam
 * (device/device.h); the compressed collectives launch as the dense ones do. */
#include <math.h>
#include <string.h>

#include "common/result.h"
#include "compress/compressor.h"
#include "compress/decode.h"
#include "core/argcheck.h"
#include "core/comm.h"
#include "device/device.h"

gcclResult_t compressor_handle_create(gcclCompressor_t* out, const char* spec, size_t count, gcclDataType_t dt) {
  struct codec_spec s;
  GCCL_CHECK(argcheck_compressor_spec(spec, count, dt, &s));
  struct gcclCompressor* c;
  GCCL_CHECK(compressor_create(&c, &s, count, dt));
  gcclResult_t res = handle_add(HANDLE_COMPRESSOR, c);
  if (res != gcclSuccess) {
    compressor_destroy(c);
    return res;
  }
  *out = c;
  return gcclSuccess;
}

void compressor_handle_destroy(gcclCompressor_t c) {
  compressor_release(c);
  handle_retire(HANDLE_COMPRESSOR, c); /* frees c once it leaves the quarantine */
}

gcclResult_t gcclCompressorCreate(gcclCompressor_t* out, const char* spec, size_t count, gcclDataType_t dt) {
  GCCL_CHECK(argcheck_not_null(out, "gcclCompressorCreate", "compressor pointer"));
  *out = NULL;
  GCCL_CHECK(argcheck_not_null(spec, "gcclCompressorCreate", "spec"));
  return compressor_handle_create(out, spec, count, dt);
}

gcclResult_t gcclCompressorDestroy(gcclCompressor_t c) {
  GCCL_CHECK(argcheck_compressor(c, "gcclCompressorDestroy"));
  compressor_handle_destroy(c);
  return gcclSuccess;
}

gcclResult_t gcclCompressorGetResidual(gcclCompressor_t c, void* out) {
  GCCL_CHECK(argcheck_residual(c, out, 0));
  if (c->count == 0) return gcclSuccess;
  GCCL_CHECK(device_residual_to_host(c));
  compressor_get_residual(c, out);
  return gcclSuccess;
}

gcclResult_t gcclCompressorSetResidual(gcclCompressor_t c, const void* in) {
  GCCL_CHECK(argcheck_residual(c, in, 1));
  GCCL_CHECK(device_residual_to_host(c)); /* the host copy becomes the current one */
  size_t bad = compressor_set_residual(c, in);
  if (bad < c->count)
    return err_set(gcclInvalidArgument, "gcclCompressorSetResidual: element %zu is not finite in fp32", bad);
  return gcclSuccess;
}

gcclResult_t gcclCompressorGetState(gcclCompressor_t c, void* out, size_t cap, size_t* stateBytes) {
  GCCL_CHECK(argcheck_state(c, out, cap, stateBytes, 0));
  size_t n;
  const float* carried = compressor_carried(c, &n);
  *stateBytes = n * sizeof(float);
  if (out && n) memcpy(out, carried, n * sizeof(float));
  return gcclSuccess;
}

gcclResult_t gcclCompressorSetState(gcclCompressor_t c, const void* in, size_t stateBytes) {
  GCCL_CHECK(argcheck_state(c, in, stateBytes, NULL, 1));
  size_t n;
  float* carried = compressor_carried(c, &n);
  const unsigned char* bytes = in;
  for (size_t i = 0; i < n; i++) {
    float v;
    memcpy(&v, bytes + i * sizeof v, sizeof v);
    if (!isfinite(v)) return err_set(gcclInvalidArgument, "gcclCompressorSetState: value %zu is not finite", i);
  }
  memcpy(carried, in, n * sizeof(float));
  return gcclSuccess;
}

gcclResult_t gcclEncodeBound(gcclCompressor_t c, size_t* maxBytes) {
  GCCL_CHECK(argcheck_bound(c, maxBytes, "gcclEncodeBound"));
  *maxBytes = c->bound;
  return gcclSuccess;
}

gcclResult_t gcclEncodeBoundNonFinite(gcclCompressor_t c, size_t maxNonFinite, size_t* maxBytes) {
  GCCL_CHECK(argcheck_bound(c, maxBytes, "gcclEncodeBoundNonFinite"));
  *maxBytes = compressor_bound_nonfinite(c, c->count, maxNonFinite);
  return gcclSuccess;
}

gcclResult_t codec_encode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frameBytes,
                          void* cuda_stream, const char* fn) {
  GCCL_CHECK(argcheck_encode(c, src, frame, cap, frameBytes, fn));
  if (device_is_pointer(src) || device_is_pointer(frame))
    return err_prefix(device_encode(c, src, frame, cap, frameBytes, cuda_stream), fn);
  GCCL_CHECK(device_residual_to_host(c));
  return compressor_encode(c, src, frame, cap, frameBytes);
}

gcclResult_t gcclEncode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frameBytes) {
  return codec_encode(c, src, frame, cap, frameBytes, NULL, "gcclEncode");
}

gcclResult_t codec_decode_accumulate(const void* frame, size_t frameBytes, void* dst, size_t count, gcclDataType_t dt,
                                     void* cuda_stream, const char* fn) {
  GCCL_CHECK(argcheck_decode(frame, frameBytes, dst, count, dt, fn));
  gcclResult_t res = device_is_pointer(frame) || device_is_pointer(dst)
                         ? device_decode_accumulate(frame, frameBytes, dst, count, dt, cuda_stream)
                         : frame_decode_accumulate(frame, frameBytes, dst, count, dt);
  return err_prefix(res, fn);
}

gcclResult_t gcclDecodeAccumulate(const void* frame, size_t frameBytes, void* dst, size_t count, gcclDataType_t dt) {
  return codec_decode_accumulate(frame, frameBytes, dst, count, dt, NULL, "gcclDecodeAccumulate");
}

/* ---- compressed collectives ------------------------------------------------- */

/* Checked, a compressed call is a collective call that carries its compressor:
 * from here on it takes the dense calls' path (enqueue.c, execute.c). */
static gcclResult_t launch_compressed(gcclComm_t comm, struct coll_args* a, gcclCompressor_t c, gcclStream_t stream,
                                      const char* fn) {
  GCCL_CHECK(comm_fail(comm, argcheck_compressed(comm, a, c, stream, fn)));
  a->comp = c;
  return enqueue_collective(comm, a, stream);
}

gcclResult_t gcclAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t dt,
                                     gcclRedOp_t op, gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  struct coll_args a = coll_call(COLL_ALLREDUCE, sendbuff, recvbuff, count, dt, op, 0);
  return launch_compressed(comm, &a, c, s, "gcclAllReduceCompressed");
}

gcclResult_t gcclAllGatherCompressed(const void* sendbuff, void* recvbuff, size_t sendcount, gcclDataType_t dt,
                                     gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  struct coll_args a = coll_call(COLL_ALLGATHER, sendbuff, recvbuff, sendcount, dt, gcclSum, 0);
  return launch_compressed(comm, &a, c, s, "gcclAllGatherCompressed");
}

gcclResult_t gcclReduceScatterCompressed(const void* sendbuff, void* recvbuff, size_t recvcount, gcclDataType_t dt,
                                         gcclRedOp_t op, gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  struct coll_args a = coll_call(COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, dt, op, 0);
  return launch_compressed(comm, &a, c, s, "gcclReduceScatterCompressed");
}
