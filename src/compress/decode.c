/* decode.c — the codec-agnostic decoder: validate everything, then accumulate. */
#include "compress/decode.h"

#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec_util.h"

/* dst[i] += the raw exception value (a dtype element at v), in dtype arithmetic
 * (halves through fp32, rounded once), so inf and NaN land as they were sent. */
static void add_raw(void* dst, gcclDataType_t dt, size_t i, const unsigned char* v) {
  switch (dt) {
    case gcclFloat64: {
      double x;
      memcpy(&x, v, 8);
      ((double*)dst)[i] += x;
      break;
    }
    case gcclFloat32:
      ((float*)dst)[i] += get_f32(v);
      break;
    case gcclFloat16: {
      uint16_t x;
      memcpy(&x, v, 2);
      elem_accumulate(dst, dt, i, half_to_float(x));
      break;
    }
    case gcclBfloat16: {
      uint16_t x;
      memcpy(&x, v, 2);
      elem_accumulate(dst, dt, i, bf16_to_float(x));
      break;
    }
    default:
      break;
  }
}

gcclResult_t frame_check(const void* frame, size_t frame_bytes, size_t count, gcclDataType_t dt,
                         struct frame_header* out) {
  struct frame_header h;
  GCCL_CHECK(frame_validate(frame, frame_bytes, count, dt, &h));
  const unsigned char* payload = (const unsigned char*)frame + FRAME_HEADER_BYTES;
  if (!(h.flags & FRAME_FLAG_RAW)) { /* frame_validate checked a raw frame's size */
    if (h.codec == CODEC_NONE && h.exceptions != 0)
      return err_set(gcclCorruptData, "corrupt frame: codec none with %llu exceptions",
                     (unsigned long long)h.exceptions);
    GCCL_CHECK(codec_ops_for(h.codec)->validate(&h, payload));
    /* The exceptions list: indices strictly increasing and in range. */
    size_t entry = frame_exception_bytes(dt);
    const unsigned char* e = payload + h.payload_bytes;
    for (size_t j = 0; j < (size_t)h.exceptions; j++) {
      uint64_t idx = get_u64le(e + j * entry), prev = j ? get_u64le(e + (j - 1) * entry) : 0;
      if (idx >= count || (j > 0 && idx <= prev))
        return err_set(gcclCorruptData, "corrupt frame: exception %zu has index %llu (count %zu, previous %llu)", j,
                       (unsigned long long)idx, count, (unsigned long long)prev);
    }
  }
  *out = h;
  return gcclSuccess;
}

/* Decodes a checked frame's payload into dst: adds it (store = 0), or writes
 * 0.0f + the decoded values into an fp32 dst (store = 1, the codec has
 * decode_store_f32). Its exceptions are the nexc entries at e, whose indices
 * count from `base` (a range of a frame: frame_decode_range). */
static gcclResult_t decode_checked(const struct frame_header* h, const unsigned char* payload, const unsigned char* e,
                                   size_t nexc, uint64_t base, void* dst, gcclDataType_t dt, int store) {
  size_t entry = frame_exception_bytes(dt);
  uint64_t* exc = NULL;
  if (nexc > 0) {
    exc = malloc(nexc * sizeof *exc); /* rare: only inputs with non-finite values */
    if (exc == NULL) return err_set(gcclSystemError, "out of memory decoding %zu exceptions", nexc);
    for (size_t j = 0; j < nexc; j++) exc[j] = get_u64le(e + j * entry) - base;
  }
  const struct codec_ops* ops = codec_ops_for(h->codec);
  gcclResult_t res =
      store ? ops->decode_store_f32(h, payload, exc, nexc, dst) : ops->decode_accumulate(h, payload, exc, nexc, dst);
  if (res == gcclSuccess)
    for (size_t j = 0; j < nexc; j++) add_raw(dst, dt, (size_t)exc[j], e + j * entry + 8);
  free(exc);
  return res;
}

/* decode_checked of a whole frame. */
static gcclResult_t decode_frame(const struct frame_header* h, const unsigned char* payload, void* dst,
                                 gcclDataType_t dt, int store) {
  return decode_checked(h, payload, payload + h->payload_bytes, (size_t)h->exceptions, 0, dst, dt, store);
}

gcclResult_t frame_accumulate_checked(const struct frame_header* h, const void* frame, void* dst, gcclDataType_t dt) {
  const unsigned char* payload = (const unsigned char*)frame + FRAME_HEADER_BYTES;
  if (h->flags & FRAME_FLAG_RAW) {
    raw_accumulate(dst, payload, (size_t)h->count, dt);
    return gcclSuccess;
  }
  return decode_frame(h, payload, dst, dt, 0);
}

gcclResult_t frame_decode_accumulate(const void* frame, size_t frame_bytes, void* dst, size_t count,
                                     gcclDataType_t dt) {
  struct frame_header h;
  GCCL_CHECK(frame_check(frame, frame_bytes, count, dt, &h));
  return frame_accumulate_checked(&h, frame, dst, dt);
}

gcclResult_t frame_decode_f32_to(const void* frame, size_t frame_bytes, void* out, gcclDataType_t dt, size_t n,
                                 float* stage) {
  float* dst = dt == gcclFloat32 ? out : stage;
  struct frame_header h;
  GCCL_CHECK(frame_check(frame, frame_bytes, n, gcclFloat32, &h));
  const unsigned char* payload = (const unsigned char*)frame + FRAME_HEADER_BYTES;
  if (!(h.flags & FRAME_FLAG_RAW) && codec_ops_for(h.codec)->decode_store_f32) {
    GCCL_CHECK(decode_frame(&h, payload, dst, gcclFloat32, 1));
  } else {
    memset(dst, 0, n * sizeof(float));
    if (h.flags & FRAME_FLAG_RAW)
      raw_accumulate(dst, payload, n, gcclFloat32);
    else
      GCCL_CHECK(decode_frame(&h, payload, dst, gcclFloat32, 0));
  }
  if (dt != gcclFloat32) f32_store(out, dt, stage, n);
  return gcclSuccess;
}

size_t frame_range_granule(const struct frame_header* h) {
  if (h->flags & FRAME_FLAG_RAW) return 1;
  const struct codec_ops* ops = codec_ops_for(h->codec);
  if (ops == NULL || ops->payload_offset == NULL) return 0;
  return h->bucket ? h->bucket : 1;
}

/* The first of the n exception entries at e (increasing indices) whose index is
 * at least i. */
static size_t exceptions_from(const unsigned char* e, size_t n, size_t entry, uint64_t i) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (get_u64le(e + mid * entry) < i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

gcclResult_t frame_decode_range(const struct frame_header* h, const void* frame, size_t from, size_t len, float* dst,
                                int store) {
  size_t g = frame_range_granule(h);
  if (g == 0 || h->dtype != gcclFloat32 || from % g != 0 || from > h->count || len > h->count - from ||
      (len % g != 0 && from + len != h->count))
    return err_set(gcclInternalError, "frame_decode_range: [%zu, +%zu) of a frame of %llu elements, granule %zu", from,
                   len, (unsigned long long)h->count, g);
  const unsigned char* payload = (const unsigned char*)frame + FRAME_HEADER_BYTES;
  if (h->flags & FRAME_FLAG_RAW) {
    if (store && len) memset(dst, 0, len * sizeof(float));
    raw_accumulate(dst, payload + from * sizeof(float), len, gcclFloat32);
    return gcclSuccess;
  }
  const struct codec_ops* ops = codec_ops_for(h->codec);
  uint64_t off = ops->payload_offset(h, from);
  uint64_t end = from + len == h->count ? h->payload_bytes : ops->payload_offset(h, from + len);
  size_t entry = frame_exception_bytes(gcclFloat32);
  const unsigned char* e = payload + h->payload_bytes;
  size_t lo = exceptions_from(e, (size_t)h->exceptions, entry, from);
  size_t hi = exceptions_from(e, (size_t)h->exceptions, entry, from + len);
  struct frame_header sub = *h;
  sub.count = len;
  sub.payload_bytes = end - off;
  sub.exceptions = hi - lo;
  if (store && !ops->decode_store_f32) {
    if (len) memset(dst, 0, len * sizeof(float));
    store = 0;
  }
  return decode_checked(&sub, payload + off, e + lo * entry, hi - lo, from, dst, gcclFloat32, store);
}
