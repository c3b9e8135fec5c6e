/* one_frame.c — the steps of the one-frame schedules that touch the caller's
 * buffers (coll.h): on the CPU from sendbuff into recvbuff, or, for a call that
 * device_execute gave the GPU (device/device.h), from and into the caller's device
 * buffers. Both make the same frames and the same output bits. */
#include <string.h>

#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "compress/decode.h"
#include "device/device.h"

gcclResult_t coll_encode_input(const struct coll_args* a, void* frame, size_t cap, size_t* frame_bytes) {
  if (a->device_send) return device_encode_input(a, frame, cap, frame_bytes);
  return compressor_encode_f32(a->comp, a->sendbuff, a->dt, a->comp_first, a->count, EF_ADD, 0, frame, cap,
                               frame_bytes);
}

gcclResult_t coll_output_clear(const struct coll_args* a, float* out, size_t n) {
  if (a->device_recv) return device_output_clear(a, 0, n);
  memset(out, 0, n * sizeof(float));
  return gcclSuccess;
}

gcclResult_t coll_output_add(const struct coll_args* a, const void* frame, size_t frame_bytes, float* out, size_t n) {
  if (a->device_recv) return device_output_add(a, frame, frame_bytes, 0, n);
  return frame_decode_accumulate(frame, frame_bytes, out, n, gcclFloat32);
}

gcclResult_t coll_output_frame(const struct coll_args* a, const void* frame, size_t frame_bytes, size_t at, size_t n,
                               float* stage) {
  if (a->device_recv) { /* fp32: cleared, then added, as frame_decode_f32_to */
    GCCL_CHECK(device_output_clear(a, at, n));
    return device_output_add(a, frame, frame_bytes, at, n);
  }
  unsigned char* out = (unsigned char*)a->recvbuff + at * dtype_size(a->dt);
  return frame_decode_f32_to(frame, frame_bytes, out, a->dt, n, stage);
}
