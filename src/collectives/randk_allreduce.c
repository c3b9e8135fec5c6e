/* randk_allreduce.c — random-k allreduce: the indices come from the shared seed, so only the values travel.
 *
 * Every rank's randk frame of one call keeps the same k indices (randk_index of
 * the shared key, made of seed, call number and first only), so the frames line
 * up value by value: the sum of the p frames is the frame whose j-th value is the
 * sum of the p j-th values.
 *
 *   1. every rank encodes its input once (EF_ADD: its residual is staged for
 *      every element) into a randk frame of k values;
 *   2. the k values, as fp32 whatever type the frame carries, go through a dense
 *      sum allreduce (the tuner's message-only choice: tree, rhd or ring) —
 *      4k bytes and no indices, where a sparse allgather would move p frames;
 *   3. every rank writes the summed values as one randk frame of fp32 values (a
 *      sum that overflowed to inf rides as that index's exception) and decodes
 *      it into its zeroed output.
 * The dense allreduce leaves the same sums on every rank and every rank decodes
 * the same frame, so all hold the same bits.
 *
 * Non-finite inputs are exceptions of a rank's frame (and a frame with very many
 * is sent raw); neither can be summed value by value, nor can a frame of another
 * codec. So the ranks first agree,
 * one byte each (allgather_small), whether any frame has them, and if so all sum
 * whole frames in rank order instead (sparse_frames_sum), which carries them.
 *
 * In place: sendbuff is read only by the encode, before anything is written. */
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "collectives/sparse.h"
#include "collectives/tuner.h"
#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec_util.h"
#include "compress/compressor.h"
#include "compress/frame.h"
#include "compress/randk.h"
#include "compress/topk.h"

/* The workspace: this rank's frame first (sparse_frames_sum keeps it there),
 * flags (everyone's, then mine), the sum frame, and the fp32 output for other
 * dtypes. */
struct randk_work {
  unsigned char *frame, *flags, *sum_frame;
  float* out;
};

static void randk_layout(struct prim_carver* c, struct randk_work* w, size_t bound, size_t p, size_t sum_room,
                         size_t out_n) {
  w->frame = prim_carve(c, bound);
  w->flags = prim_carve(c, p + 1);
  w->sum_frame = prim_carve(c, sum_room);
  w->out = PRIM_CARVE(c, float, out_n);
}

gcclResult_t allreduce_randk(struct coll_ctx* ctx, const struct coll_args* a) {
  struct transport* tp = ctx->tp;
  struct gcclCompressor* c = a->comp;
  int p = ctx->nranks;
  size_t n = a->count, up = (size_t)p, bound = compressor_bound_f32(c, n), k = sparse_k(c->spec.ratio, n);
  size_t sum_room = FRAME_HEADER_BYTES + k * (sizeof(float) + FRAME_EXCEPTION_BYTES_F32);
  struct randk_work w;
  struct prim_carver carver = {0};
  randk_layout(&carver, &w, bound, up, sum_room, a->dt == gcclFloat32 ? 0 : n);
  GCCL_CHECK(prim_carve_workspace(ctx, &carver));
  randk_layout(&carver, &w, bound, up, sum_room, a->dt == gcclFloat32 ? 0 : n);
  unsigned char* base = w.frame;

  size_t bytes;
  struct frame_header h;
  GCCL_CHECK(coll_encode_input(a, base, bound, &bytes));
  GCCL_CHECK(frame_validate(base, bytes, n, gcclFloat32, &h));
  unsigned char* flags = w.flags;
  flags[up] = (h.flags & FRAME_FLAG_RAW) || h.exceptions != 0 || h.codec != CODEC_RANDK || h.k != k;
  GCCL_CHECK(prim_allgather_small(tp, &flags[up], 1, flags));
  int whole_frames = 0;
  for (size_t r = 0; r < up; r++) whole_frames |= flags[r];
  if (whole_frames) {
    float* sum;
    GCCL_CHECK(sparse_frames_sum(ctx, a, 0, bytes, &sum));
    if (a->dt != gcclFloat32) f32_store(a->recvbuff, a->dt, sum, n);
    return gcclSuccess;
  }

  unsigned char* sum_frame = w.sum_frame;
  float* values = (float*)(void*)(sum_frame + FRAME_HEADER_BYTES);
  topk_values_get(base + FRAME_HEADER_BYTES, (enum spec_values)h.values, k, values);
  struct coll_args dense = {
      .kind = COLL_ALLREDUCE, .sendbuff = values, .recvbuff = values, .count = k, .dt = gcclFloat32, .op = gcclSum};
  GCCL_CHECK(coll_run(ctx, &dense, tuner_choose(COLL_ALLREDUCE, k * sizeof(float), p, p, 0, &ctx->net, ALGO_AUTO)));

  /* the sum frame: header as mine but fp32 values; overflowed sums as exceptions */
  unsigned char* exc = sum_frame + FRAME_HEADER_BYTES + k * sizeof(float);
  size_t nexc = 0;
  for (size_t j = 0; j < k; j++) {
    if (f32_finite(values[j])) continue;
    put_u64le(exc + nexc * FRAME_EXCEPTION_BYTES_F32, randk_index(h.rng_key, n, k, j));
    put_f32(exc + nexc * FRAME_EXCEPTION_BYTES_F32 + 8, values[j]);
    values[j] = 0.0f;
    nexc++;
  }
  h.values = SPEC_VALUES_FP32;
  h.payload_bytes = k * sizeof(float);
  h.exceptions = nexc;
  GCCL_CHECK(frame_header_write(sum_frame, sum_room, &h));
  float* out = a->dt == gcclFloat32 ? a->recvbuff : w.out;
  GCCL_CHECK(coll_output_clear(a, out, n));
  GCCL_CHECK(
      coll_output_add(a, sum_frame, FRAME_HEADER_BYTES + h.payload_bytes + nexc * FRAME_EXCEPTION_BYTES_F32, out, n));
  if (a->dt != gcclFloat32) f32_store(a->recvbuff, a->dt, out, n);
  return gcclSuccess;
}
