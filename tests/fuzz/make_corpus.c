/* make_corpus.c — writes seed inputs for fuzz_decode and fuzz_collective: valid
 * frames of every codec, and sparse-sr's range messages.
 *
 * Usage: make_corpus OUTDIR [SEED [PER_SPEC]]
 * Each file is the two selector bytes 0x00 0x00 (receiver takes the frame's own
 * dtype and count) followed by one frame encoded through the public API from
 * random normal data, some with a NaN or inf (the exceptions list) and some
 * with many of them (the raw fallback); or by one range message (range-*.bin),
 * sparse or dense. Files over 4 KiB are not written.
 * tests/fuzz/corpus/ holds the output of `make_corpus DIR 1 3`; scripts/fuzz.sh
 * adds fresh ones with a random seed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/sparse.h"
#include "common/dtype.h"
#include "gccl.h"

#define MAX_FILE_BYTES 4096

static const char* const kSpecs[] = {
    "none",
    "fp16",
    "bf16:ef=1",
    "uniform:bits=1,round=nearest",
    "uniform:bits=4,bucket=16,round=stochastic",
    "uniform:bits=8,bucket=64,round=nearest",
    "qsgd:bits=2,bucket=32",
    "qsgd:bits=8,bucket=7",
    "sign:bucket=16",
    "terngrad:bucket=32",
    "topk:ratio=0.1",
    "topk:ratio=0.3,approx=1,values=fp16",
    "topk:ratio=0.2,values=bf16,zstd=1",
    "topk:ratio=0.5,zstd=1",
    "randk:ratio=0.25",
    "randk:ratio=0.5,values=fp16",
};
#define NUM_SPECS (sizeof kSpecs / sizeof kSpecs[0])

static uint64_t rng_state;

static uint64_t next_u64(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * UINT64_C(2685821657736338717);
}

static double next_normal(void) { /* Box-Muller */
  double u = ((double)(next_u64() >> 11) + 0.5) * 0x1p-53, v = (double)(next_u64() >> 11) * 0x1p-53;
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void set_elem(void* buf, gcclDataType_t dt, size_t i, double x) {
  switch (dt) {
    case gcclFloat32:
      ((float*)buf)[i] = (float)x;
      break;
    case gcclFloat64:
      ((double*)buf)[i] = x;
      break;
    case gcclFloat16:
      ((uint16_t*)buf)[i] = float_to_half((float)x);
      break;
    case gcclBfloat16:
      ((uint16_t*)buf)[i] = float_to_bf16((float)x);
      break;
    case gcclInt32:
      ((int32_t*)buf)[i] = (int32_t)(x * 1000);
      break;
    default:
      memset((char*)buf + i * dtype_size(dt), 0, dtype_size(dt));
      break;
  }
}

/* Encodes one random tensor and writes it as OUTDIR/<name>. 0 on success or skip. */
static int write_one(const char* dir, const char* spec, gcclDataType_t dt, size_t count, int specials,
                     unsigned serial) {
  gcclCompressor_t c;
  if (gcclCompressorCreate(&c, spec, count, dt) != gcclSuccess) {
    fprintf(stderr, "make_corpus: skipping %s: %s\n", spec, gcclGetLastError(NULL));
    return 0;
  }
  size_t bound = 0, bytes = 0, es = dtype_size(dt);
  gcclEncodeBound(c, &bound);
  void* src = calloc(count ? count : 1, es);
  unsigned char* out = malloc(bound + 2);
  if (src == NULL || out == NULL) return 1;
  for (size_t i = 0; i < count; i++) set_elem(src, dt, i, next_normal());
  if (dtype_is_float(dt)) {
    for (int s = 0; s < specials && count > 0; s++)
      set_elem(src, dt, next_u64() % count, s % 3 == 0 ? NAN : (s % 3 == 1 ? INFINITY : -INFINITY));
  }
  /* Two calls, so error feedback and the call number are not always at their start. */
  int rc = 0;
  for (int call = 0; call < 2 && rc == 0; call++)
    if (gcclEncode(c, src, out + 2, bound, &bytes) != gcclSuccess) rc = 1;
  if (rc == 0 && bytes + 2 <= MAX_FILE_BYTES) {
    char name[512], clean[128];
    size_t j = 0;
    for (const char* p = spec; *p && j + 1 < sizeof clean; p++)
      clean[j++] = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ? *p : '_';
    clean[j] = '\0';
    snprintf(name, sizeof name, "%s/%s-%s-%zu-%u.bin", dir, clean, dtype_name(dt), count, serial);
    FILE* f = fopen(name, "wb");
    out[0] = out[1] = 0;
    if (f == NULL || fwrite(out, 1, bytes + 2, f) != bytes + 2) rc = 1;
    if (f != NULL) fclose(f);
  }
  if (rc) fprintf(stderr, "make_corpus: %s failed: %s\n", spec, gcclGetLastError(NULL));
  free(out);
  free(src);
  gcclCompressorDestroy(c);
  return rc;
}

/* A range message of len values, about `nonzero` of them set, as
 * OUTDIR/range-LEN-NONZERO.bin. 0 on success. */
static int write_range(const char* dir, size_t len, size_t nonzero) {
  float* x = calloc(len, sizeof *x);
  unsigned char* m = malloc(2 + RANGE_HEADER + 4 * len);
  if (x == NULL || m == NULL) return 1;
  for (size_t k = 0; k < nonzero; k++) x[next_u64() % len] = (float)next_normal();
  size_t bytes = sparse_range_write(m + 2, x, len) + 2;
  m[0] = m[1] = 0;
  int rc = 0;
  if (bytes <= MAX_FILE_BYTES) {
    char name[512];
    snprintf(name, sizeof name, "%s/range-%zu-%zu.bin", dir, len, nonzero);
    FILE* f = fopen(name, "wb");
    if (f == NULL || fwrite(m, 1, bytes, f) != bytes) rc = 1;
    if (f != NULL) fclose(f);
  }
  free(m);
  free(x);
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUTDIR [SEED [PER_SPEC]]\n", argv[0]);
    return 2;
  }
  rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) * 2 + 1 : 1;
  int per_spec = argc > 3 ? atoi(argv[3]) : 3;
  static const gcclDataType_t kTypes[] = {gcclFloat32, gcclFloat16, gcclFloat64, gcclBfloat16};
  static const size_t kCounts[] = {1, 7, 37, 100, 300};
  int rc = 0;
  for (size_t s = 0; s < NUM_SPECS; s++) {
    for (int k = 0; k < per_spec; k++) {
      gcclDataType_t dt = kTypes[next_u64() % 4];
      size_t count = kCounts[next_u64() % 5];
      int specials = k == 0 ? 1 : (k == 1 ? 0 : (int)(next_u64() % 3) * (int)count / 2);
      rc |= write_one(argv[1], kSpecs[s], dt, count, specials, (unsigned)k);
    }
  }
  rc |= write_one(argv[1], "none", gcclInt32, 37, 0, 0); /* none carries every dtype */
  static const size_t kRangeLens[] = {7, 64, 300, 1000};
  for (size_t l = 0; l < 4; l++) {
    size_t len = kRangeLens[l];
    const size_t nonzero[] = {0, 1, len / 10, len};
    for (size_t z = 0; z < 4; z++) rc |= write_range(argv[1], len, nonzero[z]);
  }
  return rc;
}
