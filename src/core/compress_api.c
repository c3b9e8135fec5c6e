/* compress_api.c — the public compression entry points.
 * The codecs are not built yet: each function reports that and changes nothing. */
#include "../common/result.h"
#include "comm.h"

static gcclResult_t not_built(const char* fn) {
  return err_set(gcclInvalidUsage, "%s: compression not built yet in this version of gccl", fn);
}

gcclResult_t gcclCompressorCreate(gcclCompressor_t* c, const char* spec, size_t count, gcclDataType_t dt) {
  (void)spec, (void)count, (void)dt;
  if (c) *c = NULL;
  return not_built("gcclCompressorCreate");
}
gcclResult_t gcclCompressorDestroy(gcclCompressor_t c) {
  (void)c;
  return not_built("gcclCompressorDestroy");
}
gcclResult_t gcclCompressorGetResidual(gcclCompressor_t c, void* out) {
  (void)c, (void)out;
  return not_built("gcclCompressorGetResidual");
}
gcclResult_t gcclCompressorSetResidual(gcclCompressor_t c, const void* in) {
  (void)c, (void)in;
  return not_built("gcclCompressorSetResidual");
}
gcclResult_t gcclAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t dt,
                                     gcclRedOp_t op, gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  (void)sendbuff, (void)recvbuff, (void)count, (void)dt, (void)op, (void)c, (void)s;
  return comm_fail(comm, not_built("gcclAllReduceCompressed"));
}
gcclResult_t gcclAllGatherCompressed(const void* sendbuff, void* recvbuff, size_t sendcount, gcclDataType_t dt,
                                     gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  (void)sendbuff, (void)recvbuff, (void)sendcount, (void)dt, (void)c, (void)s;
  return comm_fail(comm, not_built("gcclAllGatherCompressed"));
}
gcclResult_t gcclReduceScatterCompressed(const void* sendbuff, void* recvbuff, size_t recvcount, gcclDataType_t dt,
                                         gcclRedOp_t op, gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  (void)sendbuff, (void)recvbuff, (void)recvcount, (void)dt, (void)op, (void)c, (void)s;
  return comm_fail(comm, not_built("gcclReduceScatterCompressed"));
}
gcclResult_t gcclEncodeBound(gcclCompressor_t c, size_t* maxBytes) {
  (void)c, (void)maxBytes;
  return not_built("gcclEncodeBound");
}
gcclResult_t gcclEncode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frameBytes) {
  (void)c, (void)src, (void)frame, (void)cap, (void)frameBytes;
  return not_built("gcclEncode");
}
gcclResult_t gcclDecodeAccumulate(const void* frame, size_t frameBytes, void* dst, size_t count, gcclDataType_t dt) {
  (void)frame, (void)frameBytes, (void)dst, (void)count, (void)dt;
  return not_built("gcclDecodeAccumulate");
}
