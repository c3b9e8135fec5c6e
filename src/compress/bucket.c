/* bucket.c — payload sizes, scratch and header checks of the bucket codecs (see bucket.h). */
#include "compress/bucket.h"

#include <stdlib.h>

#include "common/result.h"

int bucket_payload_size(uint64_t count, uint64_t bucket, unsigned meta_bytes, unsigned code_bits, uint64_t* out) {
  uint64_t full = count / bucket, rem = count % bucket;
  uint64_t per = meta_bytes + (bucket * code_bits + 7) / 8; /* bucket <= 2^24: no overflow */
  if (full > UINT64_MAX / per) return 0;
  uint64_t total = full * per;
  uint64_t tail = rem ? meta_bytes + (rem * code_bits + 7) / 8 : 0;
  if (total > UINT64_MAX - tail) return 0;
  *out = total + tail;
  return 1;
}

size_t bucket_payload_bound(size_t n, uint64_t bucket, unsigned meta_bytes, unsigned code_bits) {
  uint64_t bytes;
  if (!bucket_payload_size(n, bucket, meta_bytes, code_bits, &bytes) || bytes > SIZE_MAX) return SIZE_MAX;
  return (size_t)bytes;
}

uint64_t bucket_payload_offset(const struct frame_header* h, unsigned meta_bytes, unsigned code_bits, uint64_t first) {
  uint64_t off = 0;
  bucket_payload_size(first, h->bucket, meta_bytes, code_bits, &off); /* first <= count: no overflow in a valid frame */
  return off;
}

gcclResult_t bucket_state_create(const struct codec_spec* s, size_t n, void** state) {
  struct bucket_state* st = malloc(sizeof *st);
  if (st == NULL) return err_set(gcclSystemError, "%s: out of memory for codec state", spec_codec_name(s->codec));
  st->cap = n < s->bucket ? n : s->bucket;
  st->tmp = malloc((st->cap ? st->cap : 1) * sizeof(float));
  if (st->tmp == NULL) {
    size_t cap = st->cap;
    free(st);
    return err_set(gcclSystemError, "%s: out of memory for a %zu-element bucket buffer", spec_codec_name(s->codec),
                   cap);
  }
  *state = st;
  return gcclSuccess;
}

void bucket_state_destroy(void* state) {
  struct bucket_state* st = state;
  if (st == NULL) return;
  free(st->tmp);
  free(st);
}

gcclResult_t bucket_check_size(const struct bucket_codec* c, const struct frame_header* h, unsigned code_bits) {
  uint64_t expect;
  if (h->bucket == 0) return err_set(gcclCorruptData, "%s: bucket 0", c->name); /* frame_validate excludes it too */
  if (!bucket_payload_size(h->count, h->bucket, c->meta_bytes, code_bits, &expect))
    return err_set(gcclCorruptData, "%s: payload size for %llu elements overflows", c->name,
                   (unsigned long long)h->count);
  if (h->payload_bytes == expect) return gcclSuccess;
  if (c->bits_in_header)
    return err_set(gcclCorruptData, "%s: payload is %llu bytes, %llu elements in buckets of %u at %u bits need %llu",
                   c->name, (unsigned long long)h->payload_bytes, (unsigned long long)h->count, (unsigned)h->bucket,
                   (unsigned)h->bits, (unsigned long long)expect);
  return err_set(gcclCorruptData, "%s: payload is %llu bytes, %llu elements in buckets of %u need %llu", c->name,
                 (unsigned long long)h->payload_bytes, (unsigned long long)h->count, (unsigned)h->bucket,
                 (unsigned long long)expect);
}
