/* compress_api.c — the public compressor and codec entry points: each checks its
 * arguments, then calls the compressor (compress/compressor.h), the decoder
 * (compress/decode.h) or, for device buffers, the device seam (device/device.h). */
#include <stdint.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "compress/decode.h"
#include "core/comm.h"
#include "device/device.h"

/* c must be a live compressor: NULL, destroyed and made-up handles are refused
 * before anything reads through them. */
static gcclResult_t check_compressor(gcclCompressor_t c, const char* fn) {
  if (c == NULL) return err_set(gcclInvalidArgument, "%s: compressor is NULL", fn);
  if (!handle_live(HANDLE_COMPRESSOR, c))
    return err_set(gcclInvalidArgument, "%s: compressor %p is not a live compressor (destroyed, or never created)", fn,
                   (void*)c);
  return gcclSuccess;
}

static int ranges_overlap(const void* a, size_t abytes, const void* b, size_t bbytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return abytes && bbytes && x < y + bbytes && y < x + abytes;
}

gcclResult_t compressor_handle_create(gcclCompressor_t* out, const char* spec, size_t count, gcclDataType_t dt) {
  if ((unsigned)dt >= gcclNumTypes)
    return err_set(gcclInvalidArgument, "gcclCompressorCreate: invalid datatype %d", dt);
  if (count > COMPRESSOR_MAX_COUNT)
    return err_set(gcclInvalidArgument, "gcclCompressorCreate: count %zu too large (at most %zu)", count,
                   (size_t)COMPRESSOR_MAX_COUNT);
  struct codec_spec s;
  GCCL_CHECK(err_prefix(spec_parse(spec, &s), "gcclCompressorCreate"));
  if (s.codec != CODEC_NONE && !dtype_is_float(dt))
    return err_set(gcclInvalidArgument,
                   "gcclCompressorCreate: codec %s compresses floating-point tensors only, not %s (use \"none\")",
                   spec_codec_name(s.codec), dtype_name(dt));
#ifndef GCCL_HAVE_ZSTD
  if (s.zstd)
    return err_set(gcclInvalidArgument,
                   "gcclCompressorCreate: spec \"%s\" asks for zstd, but gccl was built without it", spec);
#endif
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
  if (out == NULL) return err_set(gcclInvalidArgument, "gcclCompressorCreate: compressor pointer is NULL");
  *out = NULL;
  if (spec == NULL) return err_set(gcclInvalidArgument, "gcclCompressorCreate: spec is NULL");
  return compressor_handle_create(out, spec, count, dt);
}

gcclResult_t gcclCompressorDestroy(gcclCompressor_t c) {
  GCCL_CHECK(check_compressor(c, "gcclCompressorDestroy"));
  compressor_handle_destroy(c);
  return gcclSuccess;
}

gcclResult_t gcclCompressorGetResidual(gcclCompressor_t c, void* out) {
  GCCL_CHECK(check_compressor(c, "gcclCompressorGetResidual"));
  if (out == NULL && c->count > 0) return err_set(gcclInvalidArgument, "gcclCompressorGetResidual: out is NULL");
  size_t es = dtype_size(c->dt);
  if ((uintptr_t)out % es != 0)
    return err_set(gcclInvalidArgument, "gcclCompressorGetResidual: out is not aligned to %zu bytes", es);
  if (c->count == 0) return gcclSuccess;
  GCCL_CHECK(device_residual_to_host(c));
  compressor_get_residual(c, out);
  return gcclSuccess;
}

gcclResult_t gcclCompressorSetResidual(gcclCompressor_t c, const void* in) {
  GCCL_CHECK(check_compressor(c, "gcclCompressorSetResidual"));
  if (in == NULL && c->count > 0) return err_set(gcclInvalidArgument, "gcclCompressorSetResidual: in is NULL");
  size_t es = dtype_size(c->dt);
  if ((uintptr_t)in % es != 0)
    return err_set(gcclInvalidArgument, "gcclCompressorSetResidual: in is not aligned to %zu bytes", es);
  if (!c->spec.ef)
    return err_set(gcclInvalidUsage, "gcclCompressorSetResidual: compressor %s keeps no residual (ef=0)", c->spec_text);
  GCCL_CHECK(device_residual_to_host(c)); /* the host copy becomes the current one */
  size_t bad = compressor_set_residual(c, in);
  if (bad < c->count)
    return err_set(gcclInvalidArgument, "gcclCompressorSetResidual: element %zu is not finite in fp32", bad);
  return gcclSuccess;
}

gcclResult_t gcclEncodeBound(gcclCompressor_t c, size_t* maxBytes) {
  GCCL_CHECK(check_compressor(c, "gcclEncodeBound"));
  if (maxBytes == NULL) return err_set(gcclInvalidArgument, "gcclEncodeBound: maxBytes is NULL");
  *maxBytes = c->bound;
  return gcclSuccess;
}

gcclResult_t gcclEncodeBoundNonFinite(gcclCompressor_t c, size_t maxNonFinite, size_t* maxBytes) {
  GCCL_CHECK(check_compressor(c, "gcclEncodeBoundNonFinite"));
  if (maxBytes == NULL) return err_set(gcclInvalidArgument, "gcclEncodeBoundNonFinite: maxBytes is NULL");
  *maxBytes = compressor_bound_nonfinite(c, c->count, maxNonFinite);
  return gcclSuccess;
}

gcclResult_t codec_encode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frameBytes,
                          void* cuda_stream, const char* fn) {
  GCCL_CHECK(check_compressor(c, fn));
  if (frame == NULL || frameBytes == NULL) return err_set(gcclInvalidArgument, "%s: frame or frameBytes is NULL", fn);
  size_t es = dtype_size(c->dt), bytes = c->count * es;
  if (src == NULL && c->count > 0) return err_set(gcclInvalidArgument, "%s: src is NULL", fn);
  if ((uintptr_t)src % es != 0)
    return err_set(gcclInvalidArgument, "%s: src is not aligned to its %s elements", fn, dtype_name(c->dt));
  if (cap < c->bound)
    return err_set(gcclInvalidArgument, "%s: cap %zu is below gcclEncodeBound's %zu bytes", fn, cap, c->bound);
  if (ranges_overlap(src, bytes, frame, cap)) return err_set(gcclInvalidArgument, "%s: src and frame overlap", fn);
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
  if (frame == NULL) return err_set(gcclInvalidArgument, "%s: frame is NULL", fn);
  if ((unsigned)dt >= gcclNumTypes) return err_set(gcclInvalidArgument, "%s: invalid datatype %d", fn, dt);
  size_t es = dtype_size(dt);
  if (dst == NULL && count > 0) return err_set(gcclInvalidArgument, "%s: dst is NULL", fn);
  if ((uintptr_t)dst % es != 0)
    return err_set(gcclInvalidArgument, "%s: dst is not aligned to its %s elements", fn, dtype_name(dt));
  if (count > SIZE_MAX / es) return err_set(gcclInvalidArgument, "%s: count %zu too large", fn, count);
  if (ranges_overlap(frame, frameBytes, dst, count * es))
    return err_set(gcclInvalidArgument, "%s: frame and dst overlap", fn);
  gcclResult_t res = device_is_pointer(frame) || device_is_pointer(dst)
                         ? device_decode_accumulate(frame, frameBytes, dst, count, dt, cuda_stream)
                         : frame_decode_accumulate(frame, frameBytes, dst, count, dt);
  return err_prefix(res, fn);
}

gcclResult_t gcclDecodeAccumulate(const void* frame, size_t frameBytes, void* dst, size_t count, gcclDataType_t dt) {
  return codec_decode_accumulate(frame, frameBytes, dst, count, dt, NULL, "gcclDecodeAccumulate");
}

/* ---- compressed collectives ------------------------------------------------- */

/* The checks of a dense call, then what a compressor adds: it must be live, made
 * for this datatype and for the call's tensor (`tensor` elements), and only sum
 * and avg reduce compressed values. */
static gcclResult_t launch_compressed(gcclComm_t comm, struct coll_args* a, size_t tensor, gcclCompressor_t c,
                                      gcclStream_t stream, const char* fn) {
  gcclResult_t res = argcheck_collective(comm, a, fn);
  if (res == gcclSuccess) res = check_compressor(c, fn);
  if (res == gcclSuccess && c->dt != a->dt)
    res = err_set(gcclInvalidArgument, "%s: the compressor was made for %s, the call passes %s", fn, dtype_name(c->dt),
                  dtype_name(a->dt));
  if (res == gcclSuccess && c->count != tensor)
    res = err_set(gcclInvalidArgument, "%s: the compressor was made for %zu elements, the call's tensor has %zu", fn,
                  c->count, tensor);
  if (res == gcclSuccess && a->kind != COLL_ALLGATHER && a->op != gcclSum && a->op != gcclAvg)
    res = err_set(gcclInvalidArgument, "%s: compressed collectives reduce with sum or avg, not %s", fn, op_name(a->op));
  if (res == gcclSuccess && stream && !stream_valid(stream))
    res = err_set(gcclInvalidArgument, "%s: stream is not a live gcclStream_t", fn);
  if (res != gcclSuccess) return comm_fail(comm, res);
  a->comp = c;
  return enqueue_collective(comm, a, stream);
}

gcclResult_t gcclAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t dt,
                                     gcclRedOp_t op, gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  struct coll_args a = coll_call(COLL_ALLREDUCE, sendbuff, recvbuff, count, dt, op, 0);
  return launch_compressed(comm, &a, count, c, s, "gcclAllReduceCompressed");
}

gcclResult_t gcclAllGatherCompressed(const void* sendbuff, void* recvbuff, size_t sendcount, gcclDataType_t dt,
                                     gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  struct coll_args a = coll_call(COLL_ALLGATHER, sendbuff, recvbuff, sendcount, dt, gcclSum, 0);
  return launch_compressed(comm, &a, sendcount, c, s, "gcclAllGatherCompressed");
}

gcclResult_t gcclReduceScatterCompressed(const void* sendbuff, void* recvbuff, size_t recvcount, gcclDataType_t dt,
                                         gcclRedOp_t op, gcclCompressor_t c, gcclComm_t comm, gcclStream_t s) {
  struct coll_args a = coll_call(COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, dt, op, 0);
  /* The compressor serves the whole send buffer: nranks * recvcount elements. */
  size_t tensor = (handle_live(HANDLE_COMM, comm) && recvcount <= SIZE_MAX / (size_t)comm->nranks)
                      ? recvcount * (size_t)comm->nranks
                      : recvcount;
  return launch_compressed(comm, &a, tensor, c, s, "gcclReduceScatterCompressed");
}
