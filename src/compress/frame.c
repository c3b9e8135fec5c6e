/* frame.c — writes and validates frame headers (layout in frame.h). */
#include "compress/frame.h"

#include <stdint.h>
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/crc32c.h"

/* Explicit little-endian access: the wire format must not depend on the host. */
static void put_u16(unsigned char* p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get_u16(const unsigned char* p) {
  return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

size_t frame_exception_bytes(gcclDataType_t dt) {
  size_t es = dtype_size(dt);
  return es ? 8 + es : 0;
}

/* 64 + payload + exceptions * entry, or 0 if that overflows size_t or dt is bad. */
static size_t total_or_zero(const struct frame_header* h) {
  size_t entry = frame_exception_bytes(h->dtype);
  if (entry == 0 || h->exceptions > SIZE_MAX / entry) return 0;
  size_t exc = (size_t)h->exceptions * entry;
  if (h->payload_bytes > SIZE_MAX - FRAME_HEADER_BYTES - exc) return 0;
  return FRAME_HEADER_BYTES + (size_t)h->payload_bytes + exc;
}

gcclResult_t frame_total_bytes(const struct frame_header* h, size_t* frame_bytes) {
  if (h == NULL || frame_bytes == NULL) return err_set(gcclInvalidArgument, "frame_total_bytes: NULL argument");
  size_t total = total_or_zero(h);
  if (total == 0) return err_set(gcclInvalidArgument, "frame_total_bytes: frame size overflows or dtype invalid");
  *frame_bytes = total;
  return gcclSuccess;
}

/* The rules shared by writer and validator; `bad` is the result to report (an
 * invalid argument when writing, corrupt data when receiving). */
static gcclResult_t check_fields(const struct frame_header* h, gcclResult_t bad, const char* who) {
  if ((unsigned)h->codec >= CODEC_COUNT) return err_set(bad, "%s: unknown codec id %u", who, (unsigned)h->codec);
  const char* name = spec_codec_name(h->codec);
  if ((unsigned)h->dtype >= gcclNumTypes) return err_set(bad, "%s: invalid dtype %u", who, (unsigned)h->dtype);
  if (h->codec != CODEC_NONE && !dtype_is_float(h->dtype))
    return err_set(bad, "%s: codec %s on non-float dtype %s", who, name, dtype_name(h->dtype));
  if (h->flags & ~FRAME_FLAGS_KNOWN) return err_set(bad, "%s: unknown flags 0x%02x", who, (unsigned)h->flags);
  if ((h->flags & FRAME_FLAG_ZSTD) && h->codec != CODEC_TOPK)
    return err_set(bad, "%s: zstd flag on codec %s", who, name);
  if ((h->flags & FRAME_FLAG_RAW) && (h->flags & FRAME_FLAG_ZSTD))
    return err_set(bad, "%s: raw and zstd flags together", who);
  if ((h->flags & FRAME_FLAG_RAW) &&
      (h->exceptions != 0 || h->count > UINT64_MAX / 8 || h->payload_bytes != h->count * dtype_size(h->dtype)))
    return err_set(bad, "%s: raw frame of %llu elements with %llu payload bytes and %llu exceptions", who,
                   (unsigned long long)h->count, (unsigned long long)h->payload_bytes,
                   (unsigned long long)h->exceptions);
  if (h->exceptions > h->count)
    return err_set(bad, "%s: %llu exceptions for %llu elements", who, (unsigned long long)h->exceptions,
                   (unsigned long long)h->count);

  /* Parameters a codec does not use must be zero, so every frame has one encoding. */
  unsigned keys = spec_codec_keys(h->codec);
  int bits_ok = (keys & SPEC_KEY_BITS) ? h->bits >= SPEC_BITS_MIN && h->bits <= SPEC_BITS_MAX : h->bits == 0;
  if (!bits_ok) return err_set(bad, "%s: bits=%u illegal for codec %s", who, (unsigned)h->bits, name);
  int bucket_ok = (keys & SPEC_KEY_BUCKET) ? h->bucket >= 1 && h->bucket <= SPEC_BUCKET_MAX : h->bucket == 0;
  if (!bucket_ok) return err_set(bad, "%s: bucket=%u illegal for codec %s", who, (unsigned)h->bucket, name);
  int values_ok = (keys & SPEC_KEY_VALUES) ? h->values <= SPEC_VALUES_BF16 : h->values == 0;
  if (!values_ok) return err_set(bad, "%s: values=%u illegal for codec %s", who, (unsigned)h->values, name);
  int k_ok = (keys & SPEC_KEY_RATIO) ? h->k <= h->count : h->k == 0;
  if (!k_ok)
    return err_set(bad, "%s: k=%llu illegal for codec %s with %llu elements", who, (unsigned long long)h->k, name,
                   (unsigned long long)h->count);
  if (h->codec != CODEC_RANDK && h->rng_key != 0) return err_set(bad, "%s: rng_key set for codec %s", who, name);
  return gcclSuccess;
}

/* The header's part of the CRC, continuing from the body's. */
static uint32_t crc_finish(const unsigned char* f, uint32_t body_crc) {
  static const unsigned char zero[4] = {0, 0, 0, 0};
  return crc32c(crc32c(body_crc, f, FRAME_CRC_OFFSET), zero, 4);
}

uint32_t frame_crc(const void* frame, size_t total) {
  const unsigned char* f = frame;
  return crc_finish(f, crc32c(0, f + FRAME_HEADER_BYTES, total - FRAME_HEADER_BYTES));
}

gcclResult_t frame_header_write(void* frame, size_t cap, const struct frame_header* h) {
  if (frame == NULL || h == NULL) return err_set(gcclInvalidArgument, "frame_header_write: NULL argument");
  size_t total = total_or_zero(h);
  if (total == 0 || total > cap)
    return err_set(gcclInvalidArgument, "frame_header_write: frame of %zu bytes does not fit in %zu", total, cap);
  const unsigned char* f = frame;
  return frame_header_write_crc(frame, cap, h, crc32c(0, f + FRAME_HEADER_BYTES, total - FRAME_HEADER_BYTES));
}

gcclResult_t frame_header_write_crc(void* frame, size_t cap, const struct frame_header* h, uint32_t body_crc) {
  if (frame == NULL || h == NULL) return err_set(gcclInvalidArgument, "frame_header_write: NULL argument");
  GCCL_CHECK(check_fields(h, gcclInvalidArgument, "frame_header_write"));
  size_t total = total_or_zero(h);
  if (total == 0 || total > cap)
    return err_set(gcclInvalidArgument, "frame_header_write: frame of %zu bytes does not fit in %zu", total, cap);

  unsigned char* f = frame;
  put_u32(f + 0, FRAME_MAGIC);
  f[4] = FRAME_VERSION;
  f[5] = (unsigned char)h->codec;
  f[6] = (unsigned char)h->dtype;
  f[7] = h->flags;
  put_u64(f + 8, h->count);
  put_u64(f + 16, h->payload_bytes);
  put_u64(f + 24, h->exceptions);
  f[32] = h->bits;
  f[33] = h->values;
  put_u16(f + 34, 0);
  put_u32(f + 36, h->bucket);
  put_u64(f + 40, h->k);
  put_u64(f + 48, h->rng_key);
  put_u32(f + 56, 0);
  put_u32(f + FRAME_CRC_OFFSET, crc_finish(f, body_crc));
  return gcclSuccess;
}

gcclResult_t frame_validate(const void* frame, size_t frame_bytes, size_t expect_count, gcclDataType_t expect_dt,
                            struct frame_header* out) {
  static const char who[] = "corrupt frame";
  if (frame == NULL) return err_set(gcclCorruptData, "%s: NULL frame", who);
  if (frame_bytes < FRAME_HEADER_BYTES)
    return err_set(gcclCorruptData, "%s: %zu bytes, shorter than the %d-byte header", who, frame_bytes,
                   FRAME_HEADER_BYTES);
  const unsigned char* f = frame;
  uint32_t magic = get_u32(f);
  if (magic != FRAME_MAGIC) return err_set(gcclCorruptData, "%s: bad magic 0x%08x", who, (unsigned)magic);
  if (f[4] != FRAME_VERSION)
    return err_set(gcclCorruptData, "%s: format version %u, expected %d", who, (unsigned)f[4], FRAME_VERSION);
  if (get_u16(f + 34) != 0 || get_u32(f + 56) != 0)
    return err_set(gcclCorruptData, "%s: reserved header bytes are not zero", who);

  struct frame_header h;
  h.version = f[4];
  h.codec = (enum codec_id)f[5];
  h.dtype = (gcclDataType_t)f[6];
  h.flags = f[7];
  h.count = get_u64(f + 8);
  h.payload_bytes = get_u64(f + 16);
  h.exceptions = get_u64(f + 24);
  h.bits = f[32];
  h.values = f[33];
  h.bucket = get_u32(f + 36);
  h.k = get_u64(f + 40);
  h.rng_key = get_u64(f + 48);
  h.crc = get_u32(f + FRAME_CRC_OFFSET);

  GCCL_CHECK(check_fields(&h, gcclCorruptData, who));
  if (h.count != (uint64_t)expect_count)
    return err_set(gcclCorruptData, "%s: %llu elements, receiver expects %zu", who, (unsigned long long)h.count,
                   expect_count);
  if (h.dtype != expect_dt)
    return err_set(gcclCorruptData, "%s: dtype %s, receiver expects %s", who, dtype_name(h.dtype),
                   dtype_name(expect_dt));
  size_t total = total_or_zero(&h);
  if (total != frame_bytes)
    return err_set(gcclCorruptData, "%s: header + %llu payload bytes + %llu exceptions do not add up to %zu bytes", who,
                   (unsigned long long)h.payload_bytes, (unsigned long long)h.exceptions, frame_bytes);
  uint32_t crc = frame_crc(f, frame_bytes);
  if (crc != h.crc)
    return err_set(gcclCorruptData, "%s: CRC32C 0x%08x, header says 0x%08x", who, (unsigned)crc, (unsigned)h.crc);
  if (out != NULL) *out = h;
  return gcclSuccess;
}
