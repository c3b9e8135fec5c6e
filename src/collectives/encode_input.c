/* encode_input.c — coll_encode_input: a one-frame schedule's encode of its input,
 * on the CPU from the (host or staged) send buffer, or on the GPU from the
 * caller's device buffer (core/device.h). Both make the same frame. */
#include "../compress/compressor.h"
#include "../core/device.h"
#include "coll.h"

gcclResult_t coll_encode_input(const struct coll_args* a, void* frame, size_t cap, size_t* frame_bytes) {
  if (a->device_send) return device_encode_input(a, frame, cap, frame_bytes);
  return compressor_encode_f32(a->comp, a->sendbuff, a->dt, a->comp_first, a->count, EF_ADD, 0, frame, cap,
                               frame_bytes);
}
