/* codec_none.c — the lossless reference codec: the tensor verbatim, any dtype.
 * The compressor writes its payload itself (a copy of the caller's buffer, in
 * its own dtype), so the table has no encode. */
#include <stdint.h>

#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"
#include "compress/codec_util.h"

void raw_accumulate(void* dst, const unsigned char* payload, size_t n, gcclDataType_t dt) {
  size_t es = dtype_size(dt);
  if ((uintptr_t)payload % es == 0) {
    reduce_2(dst, dst, payload, n, dt, gcclSum);
    return;
  }
  /* An unaligned frame: go through an aligned bounce buffer in L1. */
  _Alignas(64) unsigned char bounce[8192];
  size_t per = sizeof bounce / es;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    memcpy(bounce, payload + i * es, m * es);
    unsigned char* d = (unsigned char*)dst + i * es;
    reduce_2(d, d, bounce, m, dt, gcclSum);
  }
}

static size_t none_payload_bound(const struct codec_spec* s, size_t n) {
  (void)s;
  return n * 8; /* never used: the compressor sizes none frames from the dtype */
}

static gcclResult_t none_validate(const struct frame_header* h, const unsigned char* payload) {
  (void)payload;
  uint64_t es = dtype_size(h->dtype);
  if (h->count > UINT64_MAX / es || h->payload_bytes != h->count * es)
    return err_set(gcclCorruptData, "corrupt frame: none payload of %llu bytes for %llu elements of %s",
                   (unsigned long long)h->payload_bytes, (unsigned long long)h->count, dtype_name(h->dtype));
  return gcclSuccess;
}

static gcclResult_t none_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                           const uint64_t* exc, size_t nexc, void* dst) {
  (void)exc, (void)nexc; /* none frames never carry exceptions */
  raw_accumulate(dst, payload, (size_t)h->count, h->dtype);
  return gcclSuccess;
}

const struct codec_ops codec_none_ops = {
    .payload_bound = none_payload_bound,
    .validate = none_validate,
    .decode_accumulate = none_decode_accumulate,
};
