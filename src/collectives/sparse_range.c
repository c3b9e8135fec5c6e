/* sparse_range.c — sparse-sr's range messages (sparse.h): written from a dense
 * range or entry by entry, checked and applied by their receivers. */
#include <string.h>

#include "collectives/sparse.h"
#include "common/result.h"
#include "compress/codec_util.h"

#define RANGE_SPARSE 0x53505347u /* "GSPS" */
#define RANGE_DENSE 0x44505347u  /* "GSPD" */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static int range_sparse(size_t len, size_t entries) {
  return entries * sizeof(float) + index_code_bytes(len, entries) < len * sizeof(float);
}

void sparse_range_begin(struct sparse_range_out* o, unsigned char* m, size_t len, size_t entries) {
  o->m = m;
  o->len = len;
  o->entries = entries;
  o->section = index_code_bytes(len, entries);
  int sparse = range_sparse(len, entries);
  put_u32le(m, sparse ? RANGE_SPARSE : RANGE_DENSE);
  put_u32le(m + 4, 0);
  put_u64le(m + 8, sparse ? entries : len);
  o->dense = NULL;
  if (sparse) {
    o->v = m + RANGE_HEADER;
    index_writer_init(&o->w, o->v + entries * sizeof(float), len, entries);
  } else {
    o->dense = (float*)(void*)(m + RANGE_HEADER);
    memset(o->dense, 0, len * sizeof(float));
  }
}

/* The message's size. */
size_t sparse_range_end(struct sparse_range_out* o) {
  if (o->dense) return RANGE_HEADER + o->len * sizeof(float);
  index_writer_finish(&o->w);
  return RANGE_HEADER + o->entries * sizeof(float) + o->section;
}

size_t sparse_range_write(unsigned char* m, const float* x, size_t len) {
  size_t entries = 0;
  for (size_t i = 0; i < len; i++) entries += f32_bits(x[i]) != 0;
  if (!range_sparse(len, entries)) {
    put_u32le(m, RANGE_DENSE);
    put_u32le(m + 4, 0);
    put_u64le(m + 8, len);
    memcpy(m + RANGE_HEADER, x, len * sizeof(float));
    return RANGE_HEADER + len * sizeof(float);
  }
  struct sparse_range_out o;
  sparse_range_begin(&o, m, len, entries);
  for (size_t i = 0; i < len; i++)
    if (f32_bits(x[i]) != 0) sparse_range_put(&o, i, x[i]);
  return sparse_range_end(&o);
}

static gcclResult_t range_corrupt(int from, const char* what) {
  return err_set(gcclCorruptData, "sparse-sr: range message from rank %d: %s", from, what);
}

gcclResult_t sparse_range_apply(const unsigned char* m, size_t bytes, float* dst, size_t len, int add, int from) {
  if (bytes < RANGE_HEADER) return range_corrupt(from, "shorter than its header");
  uint32_t tag = get_u32le(m);
  uint64_t entries = get_u64le(m + 8);
  const unsigned char* v = m + RANGE_HEADER;
  if (get_u32le(m + 4) != 0) return range_corrupt(from, "reserved bytes are not zero");
  if (tag == RANGE_DENSE) {
    if (entries != len || bytes - RANGE_HEADER != len * sizeof(float))
      return range_corrupt(from, "dense size does not match the range");
    if (!add) {
      memcpy(dst, v, len * sizeof(float));
    } else {
      for (size_t i = 0; i < len; i++) dst[i] += get_f32(v + 4 * i);
    }
    return gcclSuccess;
  }
  if (tag != RANGE_SPARSE) return range_corrupt(from, "unknown tag");
  size_t section = index_code_bytes(len, entries);
  if (entries > len || section == SIZE_MAX || bytes - RANGE_HEADER != entries * sizeof(float) + section ||
      entries * sizeof(float) + section >= len * sizeof(float))
    return range_corrupt(from, "sparse size does not match its entry count and range");
  const unsigned char* sec = v + entries * sizeof(float);
  if (index_code_validate(sec, section, len, entries) != gcclSuccess)
    return range_corrupt(from, "offsets are not an index section of the range");
  if (!add) memset(dst, 0, len * sizeof(float));
  struct index_reader r;
  index_reader_init(&r, sec, section, len, entries);
  uint64_t idx[256];
  for (size_t got; (got = index_reader_next(&r, idx, 256)) > 0; v += 4 * got)
    for (size_t j = 0; j < got; j++) {
      float x = get_f32(v + 4 * j);
      dst[idx[j]] = add ? dst[idx[j]] + x : x;
    }
  return gcclSuccess;
}
