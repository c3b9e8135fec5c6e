/* compressor.c — drives a codec: builds its fp32 input with error feedback,
 * appends the exceptions list, seals the frame, and commits the residual. */
#include "compress/compressor.h"

#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec_util.h"
#include "compress/crc32c.h"
#include "compress/rng.h"

const struct codec_ops* codec_ops_for(enum codec_id c) {
  switch (c) {
    case CODEC_NONE:
      return &codec_none_ops;
    case CODEC_FP16:
      return &codec_fp16_ops;
    case CODEC_BF16:
      return &codec_bf16_ops;
    case CODEC_UNIFORM:
      return &codec_uniform_ops;
    case CODEC_QSGD:
      return &codec_qsgd_ops;
    case CODEC_SIGN:
      return &codec_sign_ops;
    case CODEC_TERNGRAD:
      return &codec_terngrad_ops;
    case CODEC_TOPK:
      return &codec_topk_ops;
    case CODEC_RANDK:
      return &codec_randk_ops;
    default:
      return NULL;
  }
}

size_t compressor_bound(const struct gcclCompressor* c, size_t n) {
  /* A frame whose payload plus exceptions would outgrow the raw tensor is sent
   * raw instead (FRAME_FLAG_RAW), so this bound holds however many non-finite
   * values the input has. Sizes were overflow-checked at create. */
  size_t raw = n * dtype_size(c->dt);
  size_t payload = c->spec.codec == CODEC_NONE ? raw : c->ops->payload_bound(&c->spec, n);
  return FRAME_HEADER_BYTES + (payload > raw ? payload : raw);
}

/* x[i] = float(src[i]) (+ residual[i]): the codec's input. */
static void build_input(float* x, const void* src, const float* residual, size_t n, gcclDataType_t dt) {
  switch (dt) {
    case gcclFloat32: {
      const float* s = src;
      if (residual)
        for (size_t i = 0; i < n; i++) x[i] = s[i] + residual[i];
      else if (n)
        memcpy(x, s, n * sizeof *x);
      return;
    }
    case gcclFloat64: {
      const double* s = src;
      for (size_t i = 0; i < n; i++) x[i] = (float)s[i];
      break;
    }
    case gcclFloat16: {
      const uint16_t* s = src;
      for (size_t i = 0; i < n; i++) x[i] = half_to_float(s[i]);
      break;
    }
    case gcclBfloat16: {
      const uint16_t* s = src;
      for (size_t i = 0; i < n; i++) x[i] = bf16_to_float(s[i]);
      break;
    }
    default:
      return;
  }
  if (residual)
    for (size_t i = 0; i < n; i++) x[i] += residual[i];
}

/* Raw fallback: the tensor verbatim. With error feedback nothing of the residual
 * was sent, so it carries over, except where the input is not finite. */
static void encode_raw(struct gcclCompressor* c, const void* src, size_t first, size_t n, unsigned char* payload,
                       struct frame_header* h) {
  size_t es = dtype_size(c->dt);
  if (n) memcpy(payload, src, n * es); /* src may be NULL when n is 0 */
  h->flags = FRAME_FLAG_RAW;
  h->payload_bytes = n * es;
  h->exceptions = 0;
  if (c->spec.ef) {
    float* staged = c->work + first;
    const float* old = c->residual + first;
    build_input(staged, src, old, n, c->dt); /* x again: the codec overwrote it */
    for (size_t i = 0; i < n; i++) staged[i] = f32_finite(staged[i]) ? old[i] : 0.0f;
  }
}

gcclResult_t compressor_encode_part(struct gcclCompressor* c, const void* src, size_t first, size_t n, void* frame,
                                    size_t cap, size_t* frame_bytes) {
  if (first > c->count || n > c->count - first)
    return err_set(gcclInternalError, "encode of elements [%zu, %zu+%zu) outside a tensor of %zu", first, first, n,
                   c->count);
  size_t bound = compressor_bound(c, n);
  if (cap < bound)
    return err_set(gcclInvalidArgument, "frame buffer of %zu bytes is smaller than the %zu that gcclEncodeBound gives",
                   cap, bound);
  size_t es = dtype_size(c->dt);
  unsigned char* f = frame;
  unsigned char* payload = f + FRAME_HEADER_BYTES;
  struct frame_header h = {.codec = c->spec.codec, .dtype = c->dt, .count = n};

  if (c->spec.codec == CODEC_NONE) {
    if (n) memcpy(payload, src, n * es); /* src may be NULL when n is 0 */
    h.payload_bytes = n * es;
  } else {
    int ef = c->spec.ef;
    float* x = c->work ? c->work + first : (float*)(uintptr_t)src; /* work exists unless dt is fp32 and ef off */
    if (c->work) build_input(x, src, ef ? c->residual + first : NULL, n, c->dt);

    uint64_t key = rng_key(c->spec.seed, c->calls, c->rank);
    uint64_t shared = rng_key(c->spec.seed, c->calls, RNG_SHARED);
    if (first != 0) key = rng_mix64(key ^ first), shared = rng_mix64(shared ^ first);
    c->exc.n = 0;
    struct encode_ctx ctx = {.spec = &c->spec, .key = key, .shared_key = shared, .exc = &c->exc, .state = c->state};
    size_t pb = 0;
    GCCL_CHECK(c->ops->encode(&ctx, x, ef ? x : NULL, n, payload, &pb, &h));
    h.payload_bytes = pb;
    h.exceptions = c->exc.n;

    size_t entry = frame_exception_bytes(c->dt);
    if (c->exc.n > (bound - FRAME_HEADER_BYTES - pb) / entry) {
      encode_raw(c, src, first, n, payload, &h);
    } else {
      unsigned char* e = payload + pb;
      const unsigned char* s = src;
      for (size_t j = 0; j < c->exc.n; j++, e += entry) {
        put_u64le(e, c->exc.idx[j]);
        memcpy(e + 8, s + c->exc.idx[j] * es, es);
      }
      uint32_t crc = ctx.payload_crc_valid ? ctx.payload_crc : crc32c(0, payload, pb);
      crc = crc32c(crc, payload + pb, c->exc.n * entry);
      GCCL_CHECK(frame_header_write_crc(frame, cap, &h, crc));
      if (ef) c->staged += n;
      return frame_total_bytes(&h, frame_bytes);
    }
    if (ef) c->staged += n;
  }
  GCCL_CHECK(frame_header_write(frame, cap, &h));
  return frame_total_bytes(&h, frame_bytes);
}

gcclResult_t compressor_commit(struct gcclCompressor* c) {
  if (c->spec.ef) {
    if (c->staged != c->count)
      return err_set(gcclInternalError, "commit after encoding %zu of %zu elements", c->staged, c->count);
    float* t = c->residual;
    c->residual = c->work;
    c->work = t;
  }
  c->staged = 0;
  c->calls++;
  return gcclSuccess;
}

void compressor_abort(struct gcclCompressor* c) {
  c->staged = 0;
}
