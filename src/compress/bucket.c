/* bucket.c — payload sizes and scratch of the bucket codecs (see bucket.h). */
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

gcclResult_t bucket_state_create(const struct codec_spec* s, size_t n, void** state) {
  struct bucket_state* st = malloc(sizeof *st);
  if (st == NULL) return err_set(gcclSystemError, "%s: out of memory for codec state", spec_codec_name(s->codec));
  st->cap = n < s->bucket ? n : s->bucket;
  st->tmp = malloc((st->cap ? st->cap : 1) * sizeof(float));
  if (st->tmp == NULL) {
    size_t cap = st->cap;
    free(st);
    return err_set(gcclSystemError, "%s: out of memory for a %zu-element bucket buffer", spec_codec_name(s->codec), cap);
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
