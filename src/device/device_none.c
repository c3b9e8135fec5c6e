/* device_none.c — device.h without CUDA: every buffer is host memory. */
#include "common/result.h"
#include "device/device.h"

unsigned device_buffers(const struct coll_args* a, int nranks) {
  (void)a;
  (void)nranks;
  return 0;
}

gcclResult_t device_execute(struct device_stage** stage, const struct coll_ctx* ctx, const struct coll_args* a,
                            enum coll_algo algo, gcclComm_t comm,
                            gcclResult_t (*run)(gcclComm_t, const struct coll_args*)) {
  (void)stage;
  (void)ctx;
  (void)a;
  (void)algo;
  (void)comm;
  (void)run;
  return err_set(gcclInternalError, "device buffers in a build without CUDA");
}

void device_stage_free(struct device_stage* stage) {
  (void)stage;
}

int device_is_pointer(const void* p) {
  (void)p;
  return 0;
}

gcclResult_t device_encode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frame_bytes,
                           void* cuda_stream) {
  (void)cuda_stream;
  (void)c;
  (void)src;
  (void)frame;
  (void)cap;
  (void)frame_bytes;
  return err_set(gcclInternalError, "device buffers in a build without CUDA");
}

gcclResult_t device_decode_accumulate(const void* frame, size_t frame_bytes, void* dst, size_t count, gcclDataType_t dt,
                                      void* cuda_stream) {
  (void)cuda_stream;
  (void)frame;
  (void)frame_bytes;
  (void)dst;
  (void)count;
  (void)dt;
  return err_set(gcclInternalError, "device buffers in a build without CUDA");
}

unsigned device_codec_path(const struct coll_args* a, enum coll_algo algo) {
  (void)a;
  (void)algo;
  return 0;
}

gcclResult_t device_place_residual(const struct coll_args* a) {
  (void)a;
  return gcclSuccess;
}

gcclResult_t device_encode_input(const struct coll_args* a, void* frame, size_t cap, size_t* frame_bytes) {
  (void)a;
  (void)frame;
  (void)cap;
  (void)frame_bytes;
  return err_set(gcclInternalError, "device buffers in a build without CUDA");
}

gcclResult_t device_output_clear(const struct coll_args* a, size_t at, size_t n) {
  (void)a;
  (void)at;
  (void)n;
  return err_set(gcclInternalError, "device buffers in a build without CUDA");
}

gcclResult_t device_output_add(const struct coll_args* a, const void* frame, size_t frame_bytes, size_t at, size_t n) {
  (void)a;
  (void)frame;
  (void)frame_bytes;
  (void)at;
  (void)n;
  return err_set(gcclInternalError, "device buffers in a build without CUDA");
}

gcclResult_t device_residual_to_host(gcclCompressor_t c) {
  (void)c;
  return gcclSuccess;
}
