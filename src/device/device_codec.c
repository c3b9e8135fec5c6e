/* device_codec.c — gcclEncode and gcclDecodeAccumulate on CUDA device buffers,
 * and the GPU encode inside the one-frame collectives (device.h): the GPU codecs
 * (gpu_compressor.h) behind the public API.
 *
 * A compressor used with a device tensor gets a GPU twin on first use, which the
 * compressor then owns: it commits, aborts and frees the twin through twin_ops
 * (compressor.h). The twin encodes with the compressor's call number and rank,
 * so its frames are the ones the CPU would have made. The error-feedback
 * residual lives where the last encode ran: it moves to the device before a
 * device encode and back to the host before anything that reads it there (a
 * host encode, a collective that encodes on the CPU, GetResidual, SetResidual),
 * so alternating host and device use gives the host-only results. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "compress/decode.h"
#include "compress/frame.h"
#include "cuda/gpu_compressor.h"
#include "device/device.h"

static gcclResult_t cuda_fail(cudaError_t e, const char* what) {
  return err_set(gcclSystemError, "CUDA: %s failed: %s", what, cudaGetErrorString(e));
}

gcclResult_t device_residual_to_host(gcclCompressor_t c) {
  if (!c->residual_on_device) return gcclSuccess;
  GCCL_CHECK(gpu_compressor_get_residual(c->device, c->residual));
  c->residual_on_device = 0;
  return gcclSuccess;
}

static const struct compressor_twin_ops twin_ops = {
    .commit = gpu_compressor_commit,
    .abort = gpu_compressor_abort,
    .destroy = gpu_compressor_destroy,
};

/* The twin made on first use, holding the current residual. */
static gcclResult_t residual_to_device(gcclCompressor_t c) {
  if (c->device == NULL) {
    GCCL_CHECK(gpu_compressor_create(&c->device, c->spec_text, c->count, c->dt));
    c->twin_ops = &twin_ops;
  }
  if (c->spec.ef && !c->residual_on_device) {
    GCCL_CHECK(gpu_compressor_set_residual(c->device, c->residual));
    c->residual_on_device = 1;
  }
  return gcclSuccess;
}

/* The schedules whose only encode is coll_encode_input. */
static int one_frame_schedule(enum coll_kind kind, enum coll_algo algo) {
  if (kind == COLL_ALLGATHER) return algo == ALGO_SRA; /* allgather_frames */
  return kind == COLL_ALLREDUCE && (algo == ALGO_SPARSE_AG || algo == ALGO_SPARSE_SR || algo == ALGO_RANDK);
}

unsigned device_codec_path(const struct coll_args* a, enum coll_algo algo) {
  gcclCompressor_t c = a->comp;
  /* Collective frames are fp32 frames: for an fp32 tensor they are the ones the
   * GPU twin makes. Global re-sparsification stages residual on the host; codec
   * "none" runs the dense schedules. */
  int encode = c && (a->device & DEVICE_SEND) && one_frame_schedule(a->kind, algo) && a->comp_first == 0 &&
               a->count == c->count && c->count > 0 && c->dt == gcclFloat32 && c->spec.codec != CODEC_NONE &&
               !c->spec.global && gpu_codec_supported(&c->spec, c->count);
  if (!encode) return 0;
  /* sparse-sr routes entries as range messages and sums them on the host */
  return DEVICE_SEND | ((a->device & DEVICE_RECV) && algo != ALGO_SPARSE_SR ? DEVICE_RECV : 0u);
}

gcclResult_t device_place_residual(const struct coll_args* a) {
  if (a->comp == NULL) return gcclSuccess;
  a->comp->encode_on_twin = a->device_send != NULL;
  return a->device_send ? residual_to_device(a->comp) : device_residual_to_host(a->comp);
}

gcclResult_t device_encode_input(const struct coll_args* a, void* frame, size_t cap, size_t* frame_bytes) {
  gcclCompressor_t c = a->comp;
  gpu_compressor_sync(c->device, c->calls, c->rank);
  return gpu_compressor_encode_staged(c->device, a->device_send, frame, cap, frame_bytes, (cudaStream_t)a->cuda_stream);
}

gcclResult_t device_output_clear(const struct coll_args* a, size_t at, size_t n) {
  cudaStream_t cs = (cudaStream_t)a->cuda_stream;
  cudaError_t e = cudaMemsetAsync((float*)a->device_recv + at, 0, n * sizeof(float), cs); /* before the adds */
  return e == cudaSuccess ? gcclSuccess : cuda_fail(e, "clearing the device output");
}

gcclResult_t device_output_add(const struct coll_args* a, const void* frame, size_t frame_bytes, size_t at, size_t n) {
  return gpu_compressor_decode(a->comp->device, frame, frame_bytes, (float*)a->device_recv + at, n, gcclFloat32,
                               (cudaStream_t)a->cuda_stream);
}

gcclResult_t device_encode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frame_bytes,
                           void* cuda_stream) {
  if (!device_is_pointer(src) && c->count > 0)
    return err_set(gcclInvalidUsage, "a device frame needs a device tensor (src is host memory)");
  cudaStream_t st = (cudaStream_t)cuda_stream;
  GCCL_CHECK(residual_to_device(c));
  gpu_compressor_sync(c->device, c->calls, c->rank);
  /* A device frame is encoded into the twin's pinned buffer (the host writes the
   * CRC), then copied over; the residual is committed once the frame is there. */
  int to_device = device_is_pointer(frame);
  void* out = to_device ? gpu_compressor_frame_buffer(c->device) : frame;
  GCCL_CHECK(gpu_compressor_encode_staged(c->device, src, out, to_device ? c->bound : cap, frame_bytes, st));
  c->encode_on_twin = 1; /* the twin staged the new residual: commit and abort act on it */
  cudaError_t e = cudaSuccess;
  if (to_device) { /* the pinned buffer is the next encode's: the copy must be done */
    e = cudaMemcpyAsync(frame, out, *frame_bytes, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  }
  if (e != cudaSuccess) {
    compressor_abort(c);
    return cuda_fail(e, "copying the frame to the device");
  }
  return compressor_commit(c); /* the twin's residual becomes current; both call numbers move on */
}

/* One decoder per thread: device scratch that grows to the largest frame seen. */
static pthread_key_t decoder_key;
static pthread_once_t decoder_once = PTHREAD_ONCE_INIT;
static void decoder_free(void* p) {
  gpu_compressor_destroy(p);
}
static void decoder_key_make(void) {
  pthread_key_create(&decoder_key, decoder_free);
}

gcclResult_t device_decode_accumulate(const void* frame, size_t frame_bytes, void* dst, size_t count, gcclDataType_t dt,
                                      void* cuda_stream) {
  cudaStream_t st = (cudaStream_t)cuda_stream;
  const void* host_frame = frame;
  unsigned char* staged = NULL;
  if (device_is_pointer(frame)) { /* frames are checked on the host before any byte of dst changes */
    staged = malloc(frame_bytes ? frame_bytes : 1);
    if (staged == NULL) return err_set(gcclSystemError, "out of memory staging a device frame");
    cudaError_t e = cudaMemcpyAsync(staged, frame, frame_bytes, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) {
      free(staged);
      return cuda_fail(e, "copying the frame from the device");
    }
    host_frame = staged;
  }
  gcclResult_t res;
  if (!device_is_pointer(dst) && count > 0) {
    res = frame_decode_accumulate(host_frame, frame_bytes, dst, count, dt);
  } else {
    pthread_once(&decoder_once, decoder_key_make);
    struct gpu_compressor* g = pthread_getspecific(decoder_key);
    res = gcclSuccess;
    if (g == NULL) {
      res = gpu_compressor_create(&g, "none", 0, gcclFloat32);
      if (res == gcclSuccess) pthread_setspecific(decoder_key, g);
    }
    if (res == gcclSuccess) res = gpu_compressor_decode(g, host_frame, frame_bytes, dst, count, dt, st);
  }
  free(staged);
  return res;
}
