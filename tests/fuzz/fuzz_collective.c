/* fuzz_collective.c — libFuzzer target: the decoders the compressed collectives
 * run on the bytes a peer sent them.
 *
 * Input: byte 0 picks a range size and the add/store mode, byte 1 the count, the
 * rest is the message. With byte 1's top bit clear and a whole frame header
 * present, the count is the header's (so valid seed frames decode, and their
 * mutations reach deep), else one of a few counts. The message goes through:
 *  - frame_check as an fp32 frame of count elements (sra, ring-requant and the
 *    sparse schedules check every frame so); when it passes, frame_decode_range
 *    over the whole tensor in ranges of whole granules (sra's sliced decodes and
 *    block sums), and frames_sum_f32 of the frame twice (sparse-ag's sum);
 *  - sparse_range_apply as a range message of count elements (sparse-sr's phase 2).
 * Each runs on the message as given and with its frame CRC recomputed, so the
 * checks behind the CRC see hostile bytes too.
 *
 * Checked: results are success or gcclCorruptData (or gcclInvalidUsage for a zstd
 * frame in a build without zstd); frames frame_check passed decode by ranges
 * without failing; nothing is written outside dst (guard bytes); a failed
 * range message leaves dst as it was. ASan/UBSan catch reads outside the message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/sparse.h"
#include "compress/decode.h"
#include "compress/frame.h"
#include "compress/frames_sum.h"
#include "fuzz_common.h"
#include "gccl.h"

#define GUARD 16 /* floats each side of dst */
#define GUARD_BITS 0x7FA5A5A5u
#define MAX_HEADER_COUNT (1u << 16)

static const size_t kCounts[] = {0, 1, 2, 7, 31, 37, 64, 100, 511, 512, 513, 1000, 4096};
#define NUM_COUNTS (sizeof kCounts / sizeof kCounts[0])

static void fail(const char* what, gcclResult_t r, size_t count) {
  fprintf(stderr, "fuzz_collective: %s (result %d \"%s\", count %zu): %s\n", what, (int)r, gcclGetErrorString(r), count,
          gcclGetLastError(NULL));
  abort();
}

static void check_result(const char* what, gcclResult_t r, size_t count) {
  int allowed = r == gcclSuccess || r == gcclCorruptData;
#ifndef GCCL_HAVE_ZSTD
  allowed = allowed || r == gcclInvalidUsage;
#endif
  if (!allowed) fail(what, r, count);
}

/* A dst of n floats between guards; 1.0f inside. */
static float* guarded(size_t n) {
  float* b = malloc((n + 2 * GUARD) * sizeof(float));
  if (b == NULL) abort();
  for (size_t i = 0; i < n + 2 * GUARD; i++) memcpy(&b[i], &(uint32_t){GUARD_BITS}, 4);
  for (size_t i = 0; i < n; i++) b[GUARD + i] = 1.0f;
  return b;
}

static void check_guards(const float* b, size_t n, const char* what) {
  for (size_t i = 0; i < GUARD; i++) {
    uint32_t lo, hi;
    memcpy(&lo, &b[i], 4);
    memcpy(&hi, &b[GUARD + n + i], 4);
    if (lo != GUARD_BITS || hi != GUARD_BITS) fail(what, gcclSuccess, n);
  }
}

static void as_frame(const uint8_t* m, size_t len, size_t n, uint8_t sel) {
  struct frame_header h;
  gcclResult_t r = frame_check(m, len, n, gcclFloat32, &h);
  check_result("frame_check", r, n);
  if (r != gcclSuccess) return;
  float* dst = guarded(n);
  size_t g = frame_range_granule(&h);
  if (g > 0) {
    size_t step = g * (1 + (sel & 0x0F)); /* whole granules; the last range may be short */
    int store = (sel >> 4) & 1;
    for (size_t from = 0; from < n; from += step) {
      size_t len_r = n - from < step ? n - from : step;
      if ((r = frame_decode_range(&h, m, from, len_r, dst + GUARD + from, store)) != gcclSuccess)
        fail("a checked frame failed to decode a range", r, n);
    }
    check_guards(dst, n, "frame_decode_range wrote outside dst");
  }
  const unsigned char* frames[2] = {m, m};
  struct frame_header hs[2] = {h, h};
  r = frames_sum_f32(frames, hs, 2, dst + GUARD, n); /* corrupt only from a zstd section that does not inflate */
  check_result("frames_sum_f32", r, n);
  check_guards(dst, n, "frames_sum_f32 wrote outside dst");
  free(dst);
}

static void as_range(const uint8_t* m, size_t len, size_t n, uint8_t sel) {
  float* dst = guarded(n);
  float* before = malloc((n + 1) * sizeof(float));
  if (before == NULL) abort();
  memcpy(before, dst + GUARD, n * sizeof(float));
  gcclResult_t r = sparse_range_apply(m, len, dst + GUARD, n, (sel >> 5) & 1, 1);
  if (r != gcclSuccess && r != gcclCorruptData) fail("sparse_range_apply", r, n);
  check_guards(dst, n, "sparse_range_apply wrote outside dst");
  if (r != gcclSuccess && memcmp(before, dst + GUARD, n * sizeof(float)) != 0)
    fail("a refused range message changed dst", r, n);
  free(before);
  free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint8_t sel = data[0], csel = data[1];
  const uint8_t* m = data + 2;
  size_t len = size - 2, n = kCounts[(csel & 0x7F) % NUM_COUNTS];
  int whole_header = len >= FRAME_HEADER_BYTES;
  /* bytes 8-15: a frame's count, a range message's entries (a dense one's length) */
  if (!(csel & 0x80) && len >= RANGE_HEADER && fuzz_load_u64le(m + 8) <= MAX_HEADER_COUNT)
    n = (size_t)fuzz_load_u64le(m + 8);

  as_frame(m, len, n, sel);
  as_range(m, len, n, sel);
  if (whole_header) {
    uint8_t* sealed = fuzz_sealed_copy(m, len);
    as_frame(sealed, len, n, sel);
    free(sealed);
  }
  return 0;
}
