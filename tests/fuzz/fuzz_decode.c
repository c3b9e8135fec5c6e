/* fuzz_decode.c — libFuzzer target: gcclDecodeAccumulate on arbitrary bytes.
 *
 * Input: byte 0 picks the receiver's dtype, byte 1 its count, the rest is the
 * frame. With the top bit of a selector clear (and a whole header present) the
 * receiver takes the frame's own dtype / count, so a valid frame decodes and
 * mutations of it reach deep; otherwise the selector picks a dtype or one of a
 * few counts. Each input is decoded twice: as given (the CRC rejects almost
 * every mutation) and with its CRC field recomputed (frame_crc), so the header
 * checks and every codec's validate see hostile bytes too.
 *
 * Checked on every decode: the result is success or corrupt data (or invalid
 * usage for a zstd frame in a build without zstd); nothing is written outside
 * dst (guard bytes); a failed decode leaves dst byte for byte as it was.
 * ASan/UBSan catch reads outside the frame (libFuzzer's buffer is exactly sized)
 * and undefined arithmetic. Any violation aborts, which libFuzzer reports as a
 * crash with the input saved. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "compress/frame.h"
#include "fuzz_common.h"
#include "gccl.h"

#define GUARD_BYTES 64
#define GUARD_BYTE 0xAB
#define MAX_HEADER_COUNT (1u << 16) /* larger header counts fall back to the table */

static const size_t kCounts[] = {0, 1, 2, 7, 31, 37, 64, 100, 511, 512, 513, 1000, 4096};
#define NUM_COUNTS (sizeof kCounts / sizeof kCounts[0])

static void fail(const char* what, gcclResult_t r, size_t count, gcclDataType_t dt) {
  fprintf(stderr, "fuzz_decode: %s (result %d \"%s\", count %zu, dtype %d): %s\n", what, (int)r, gcclGetErrorString(r),
          count, (int)dt, gcclGetLastError(NULL));
  abort();
}

/* Decodes frame[0, len) into a guarded dst of count elements of dt. */
static void decode_checked(const uint8_t* frame, size_t len, size_t count, gcclDataType_t dt) {
  size_t body = count * dtype_size(dt);
  uint8_t* buf = malloc(2 * GUARD_BYTES + body);
  uint8_t* before = malloc(body + 1);
  if (buf == NULL || before == NULL) abort();
  memset(buf, GUARD_BYTE, GUARD_BYTES);
  memset(buf + GUARD_BYTES + body, GUARD_BYTE, GUARD_BYTES);
  /* 0x3C repeated is a small finite number in every float dtype. */
  memset(buf + GUARD_BYTES, 0x3C, body);
  memcpy(before, buf + GUARD_BYTES, body);

  gcclResult_t r = gcclDecodeAccumulate(frame, len, buf + GUARD_BYTES, count, dt);
  int allowed = r == gcclSuccess || r == gcclCorruptData;
#ifndef GCCL_HAVE_ZSTD
  allowed = allowed || r == gcclInvalidUsage;
#endif
  if (!allowed) fail("unexpected result", r, count, dt);
  for (size_t i = 0; i < GUARD_BYTES; i++)
    if (buf[i] != GUARD_BYTE || buf[GUARD_BYTES + body + i] != GUARD_BYTE) fail("write outside dst", r, count, dt);
  if (r != gcclSuccess && memcmp(before, buf + GUARD_BYTES, body) != 0) fail("failed decode changed dst", r, count, dt);
  free(before);
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint8_t dsel = data[0], csel = data[1];
  const uint8_t* frame = data + 2;
  size_t len = size - 2;
  int whole_header = len >= FRAME_HEADER_BYTES;

  gcclDataType_t dt = (gcclDataType_t)((dsel & 0x7F) % gcclNumTypes);
  if (!(dsel & 0x80) && whole_header && frame[6] < gcclNumTypes) dt = (gcclDataType_t)frame[6];
  size_t count = kCounts[(csel & 0x7F) % NUM_COUNTS];
  if (!(csel & 0x80) && whole_header && fuzz_load_u64le(frame + 8) <= MAX_HEADER_COUNT)
    count = (size_t)fuzz_load_u64le(frame + 8);

  decode_checked(frame, len, count, dt);

  if (whole_header) {
    uint8_t* sealed = fuzz_sealed_copy(frame, len);
    decode_checked(sealed, len, count, dt);
    free(sealed);
  }
  return 0;
}
