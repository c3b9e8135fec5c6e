/* fuzz_spec.c — libFuzzer target: the codec spec parser (spec_parse), which reads
 * the text of gcclCompressorCreate and of GCCL_COMPRESS.
 *
 * Input: arbitrary bytes, up to the first NUL, as the spec text. Checked:
 *  - spec_parse returns success or gcclInvalidArgument, and a failed parse
 *    leaves its output as it was;
 *  - a parsed spec has one canonical text: spec_format's text parses back to a
 *    spec that formats to the same text (ranks compare canonical texts, so a
 *    spec with two of them would make agreeing ranks disagree);
 *  - gcclCompressorCreate on the text fails with gcclInvalidArgument when the
 *    parse failed, and otherwise succeeds (or refuses a zstd spec in a build
 *    without zstd, or a powersgd spec where no CBLAS library loads), for a small fp32
 *    tensor.
 * Any violation aborts, which libFuzzer reports as a crash with the input saved. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/spec.h"
#include "gccl.h"

#define MAX_TEXT 1024
#define TENSOR_COUNT 64

static void fail(const char* what, const char* text, gcclResult_t r) {
  fprintf(stderr, "fuzz_spec: %s (result %d \"%s\") for spec \"%s\": %s\n", what, (int)r, gcclGetErrorString(r), text,
          gcclGetLastError(NULL));
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char text[MAX_TEXT + 1];
  size_t n = size < MAX_TEXT ? size : MAX_TEXT;
  memcpy(text, data, n);
  text[n] = '\0';

  struct codec_spec s, untouched;
  memset(&s, 0x5A, sizeof s);
  memcpy(&untouched, &s, sizeof s);
  gcclResult_t r = spec_parse(text, &s);
  if (r != gcclSuccess && r != gcclInvalidArgument) fail("unexpected parse result", text, r);
  if (r != gcclSuccess && memcmp(&s, &untouched, sizeof s) != 0) fail("failed parse changed its output", text, r);

  if (r == gcclSuccess) {
    char canon[SPEC_FORMAT_MAX], again[SPEC_FORMAT_MAX];
    struct codec_spec back;
    gcclResult_t f = spec_format(&s, canon, sizeof canon);
    if (f != gcclSuccess) fail("a parsed spec does not format", text, f);
    if ((f = spec_parse(canon, &back)) != gcclSuccess) fail("the canonical text does not parse", canon, f);
    if ((f = spec_format(&back, again, sizeof again)) != gcclSuccess || strcmp(canon, again) != 0)
      fail("the canonical text is not a fixed point", canon, f);
  }

  gcclCompressor_t c = NULL;
  gcclResult_t cr = gcclCompressorCreate(&c, text, TENSOR_COUNT, gcclFloat32);
  int allowed = r == gcclSuccess ? cr == gcclSuccess : cr == gcclInvalidArgument;
#ifndef GCCL_HAVE_ZSTD
  allowed = allowed || (r == gcclSuccess && cr == gcclInvalidUsage);
#endif
  /* powersgd loads CBLAS at its first compressor: a machine without one refuses it. */
  allowed = allowed || (r == gcclSuccess && cr == gcclSystemError && s.codec == CODEC_POWERSGD);
  if (!allowed)
    fail(r == gcclSuccess ? "a parsed spec makes no compressor" : "an invalid spec makes a compressor", text, cr);
  if (c != NULL && gcclCompressorDestroy(c) != gcclSuccess) fail("destroy failed", text, cr);
  return 0;
}
