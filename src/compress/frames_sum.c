/* frames_sum.c — several frames summed, in order, into a fresh fp32 tensor, a block at a time.
 *
 * A sparse allgather ends with every rank adding p top-k frames in rank order
 * into a zeroed output. Frame by frame (clear the output, then decode_accumulate
 * each frame), that is a clearing pass over the whole tensor and then p passes
 * of scattered adds: at 1% every kept entry lands on a different cache line of a
 * tensor far larger than the cache, so each pass reads and writes back most of
 * the tensor's lines. Here the output is built BLOCK elements at a time in a
 * buffer that stays in L1: zeroed, every frame's entries of the block added in
 * frame order (a cursor per frame), then streamed out once. Each element gets
 * the same additions in the same order as frame by frame, so the same bits.
 *
 * A frame's exceptions (index, raw fp32 value) are added after its payload
 * entries of the block, and a payload entry at an exception index is skipped,
 * as topk_decode_accumulate and decode.c do. Raw frames add their block slice. */
#include "compress/frames_sum.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/copy.h"
#include "common/result.h"
#include "compress/codec_util.h"
#include "compress/decode.h"
#include "compress/frame.h"
#include "compress/topk.h"

#define BLOCK 4096    /* output elements built at a time: 16 KiB, half of L1 */
#define CURSOR_BUF 64 /* entries a cursor decodes at a time */

struct cursor {
  int raw;
  const unsigned char* raw_vals; /* raw frame: n fp32 values */
  struct topk_reader rd;         /* top-k frame */
  int rd_open, rd_done;
  uint64_t idx[CURSOR_BUF];
  float val[CURSOR_BUF];
  size_t pos, got;
  const unsigned char* exc; /* exceptions list */
  size_t nexc, skip, added; /* skip: first exception >= the next entry; added: first not yet added */
};

static uint64_t exc_index(const struct cursor* c, size_t j) {
  return get_u64le(c->exc + j * frame_exception_bytes(gcclFloat32));
}

/* Adds the frame's contributions to elements [b0, b1) into blk (blk[0] is b0). */
static void cursor_add_block(struct cursor* c, float* blk, size_t b0, size_t b1) {
  if (c->raw) {
    raw_accumulate(blk, c->raw_vals + b0 * sizeof(float), b1 - b0, gcclFloat32);
    return;
  }
  while (!c->rd_done) {
    if (c->pos == c->got) {
      c->got = topk_reader_next(&c->rd, c->idx, c->val, CURSOR_BUF);
      c->pos = 0;
      if (c->got == 0) {
        c->rd_done = 1;
        break;
      }
    }
    uint64_t i = c->idx[c->pos];
    if (i >= b1) break;
    float v = c->val[c->pos++];
    while (c->skip < c->nexc && exc_index(c, c->skip) < i) c->skip++;
    if (c->skip < c->nexc && exc_index(c, c->skip) == i) continue; /* the exception's raw value replaces it */
    blk[i - b0] += v;
  }
  for (; c->added < c->nexc; c->added++) {
    uint64_t i = exc_index(c, c->added);
    if (i >= b1) break;
    blk[i - b0] += get_f32(c->exc + c->added * frame_exception_bytes(gcclFloat32) + 8);
  }
}

static void cursors_free(struct cursor* cur, int nframes) {
  for (int r = 0; r < nframes; r++)
    if (cur[r].rd_open) topk_reader_free(&cur[r].rd);
  free(cur);
}

/* Opens a cursor on each frame; *blockwise = 0 (and none opened past it) at a
 * frame of a codec without one. */
static gcclResult_t cursors_open(struct cursor* cur, const unsigned char* const* frames, const struct frame_header* h,
                                 int nframes, int* blockwise) {
  *blockwise = 1;
  for (int r = 0; r < nframes; r++) {
    const unsigned char* payload = frames[r] + FRAME_HEADER_BYTES;
    struct cursor* c = &cur[r];
    if (h[r].flags & FRAME_FLAG_RAW) {
      c->raw = 1;
      c->raw_vals = payload;
    } else if (h[r].codec == CODEC_TOPK) {
      c->exc = payload + h[r].payload_bytes;
      c->nexc = (size_t)h[r].exceptions;
      GCCL_CHECK(topk_reader_init(&c->rd, &h[r], payload));
      c->rd_open = 1;
    } else {
      *blockwise = 0;
      return gcclSuccess;
    }
  }
  return gcclSuccess;
}

gcclResult_t frames_sum_f32(const unsigned char* const* frames, const struct frame_header* h, int nframes, float* dst,
                            size_t n) {
  if (nframes <= 0) return err_set(gcclInternalError, "frames_sum_f32: %d frames", nframes);
  struct cursor* cur = calloc((size_t)nframes, sizeof *cur);
  if (cur == NULL) return err_set(gcclSystemError, "frames_sum_f32: out of memory for %d cursors", nframes);
  int blockwise;
  gcclResult_t res = cursors_open(cur, frames, h, nframes, &blockwise);
  if (res == gcclSuccess && !blockwise) { /* frame by frame */
    memset(dst, 0, n * sizeof(float));
    for (int r = 0; r < nframes && res == gcclSuccess; r++)
      res = frame_accumulate_checked(&h[r], frames[r], dst, gcclFloat32);
  } else if (res == gcclSuccess) {
    float blk[BLOCK] __attribute__((aligned(64)));
    for (size_t b0 = 0; b0 < n; b0 += BLOCK) {
      size_t b1 = n - b0 < BLOCK ? n : b0 + BLOCK;
      memset(blk, 0, (b1 - b0) * sizeof(float));
      for (int r = 0; r < nframes; r++) cursor_add_block(&cur[r], blk, b0, b1);
      copy_stream(dst + b0, blk, (b1 - b0) * sizeof(float));
    }
    copy_stream_fence();
  }
  cursors_free(cur, nframes);
  return res;
}
