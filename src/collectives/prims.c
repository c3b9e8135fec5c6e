/* prims.c — the primitives every schedule is made of (prims.h). */
#include "collectives/prims.h"

#include <string.h>

#include "common/arena.h"
#include "common/result.h"
#include "compress/decode.h"
#include "compress/frame.h"

gcclResult_t prim_post_send(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* req) {
  *req = -1;
  return bytes ? tp_isend(tp, peer, buf, bytes, req) : gcclSuccess;
}

gcclResult_t prim_post_recv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* req) {
  *req = -1;
  return bytes ? tp_irecv(tp, peer, buf, bytes, req) : gcclSuccess;
}

gcclResult_t prim_post_recv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got, tp_req* req) {
  *req = -1;
  return tp_irecv_upto(tp, peer, buf, cap, got, req);
}

gcclResult_t prim_send(struct transport* tp, int peer, const void* buf, size_t bytes) {
  return bytes ? tp_send(tp, peer, buf, bytes) : gcclSuccess;
}

gcclResult_t prim_recv(struct transport* tp, int peer, void* buf, size_t bytes) {
  return bytes ? tp_recv(tp, peer, buf, bytes) : gcclSuccess;
}

gcclResult_t prim_wait(struct transport* tp, tp_req* slot) {
  tp_req r = *slot;
  *slot = -1;
  return r < 0 ? gcclSuccess : tp_wait(tp, r);
}

gcclResult_t prim_wait_all(struct transport* tp, tp_req* slots, size_t n) {
  gcclResult_t first = gcclSuccess;
  for (size_t i = 0; i < n; i++) {
    gcclResult_t res = prim_wait(tp, &slots[i]);
    if (first == gcclSuccess) first = res;
  }
  return first;
}

struct prim_tree prim_tree_of(int rank, int root, int p) {
  struct prim_tree t = {.parent = -1, .nchildren = 0};
  int v = (rank - root + p) % p;
  for (int mask = 1; mask < p; mask <<= 1) {
    if (v & mask) {
      t.parent = (v - mask + root) % p;
      break;
    }
    if (v + mask < p) t.children[t.nchildren++] = (v + mask + root) % p;
  }
  return t;
}

gcclResult_t prim_carve_workspace(struct coll_ctx* ctx, struct prim_carver* c) {
  void* base;
  GCCL_CHECK(coll_workspace(ctx, c->used, &base));
  c->base = base;
  c->used = 0;
  return gcclSuccess;
}

gcclResult_t prim_encode(const struct prim_encode* e, unsigned char* frame, size_t cap, size_t* bytes) {
  return compressor_encode_f32(e->comp, e->src, e->dt, e->first, e->n, e->ef, e->stage, frame, cap, bytes);
}

gcclResult_t prim_encode_send(struct transport* tp, int peer, const struct prim_encode* e, unsigned char* frame,
                              size_t cap, size_t* bytes, tp_req* req) {
  GCCL_CHECK(prim_encode(e, frame, cap, bytes));
  return prim_post_send(tp, peer, frame, *bytes, req);
}

gcclResult_t prim_decode(struct transport* tp, const void* frame, size_t bytes, size_t n, float* dst, int add) {
  struct frame_header h;
  GCCL_CHECK(frame_check(frame, bytes, n, gcclFloat32, &h));
  size_t g = frame_range_granule(&h);
  if (g == 0) {                                /* frames that do not decode by ranges: in one go, same bits */
    if (!add) memset(dst, 0, n * sizeof *dst); /* stored = added to +0.0f, as frame_decode_f32_to does */
    return frame_accumulate_checked(&h, frame, dst, gcclFloat32);
  }
  size_t slice = (PRIM_PROGRESS_SLICE + g - 1) / g * g;
  for (size_t from = 0; from < n; from += slice) {
    GCCL_CHECK(frame_decode_range(&h, frame, from, n - from < slice ? n - from : slice, dst + from, !add));
    prim_progress(tp);
  }
  return gcclSuccess;
}

gcclResult_t prim_recv_decode(struct transport* tp, tp_req* slot, const void* frame, const size_t* bytes, size_t n,
                              float* dst, int add) {
  GCCL_CHECK(prim_wait(tp, slot));
  return prim_decode(tp, frame, *bytes, n, dst, add);
}

gcclResult_t coll_workspace(struct coll_ctx* ctx, size_t bytes, void** out) {
  if (bytes > ctx->work_bytes) {
    coll_workspace_free(ctx);
    /* Grow by half again: a few calls of rising size do not reallocate each time. */
    size_t want = bytes + bytes / 2;
    GCCL_CHECK(arena_alloc(&ctx->work, want));
    ctx->work_bytes = want;
  }
  *out = ctx->work;
  return gcclSuccess;
}

void coll_workspace_free(struct coll_ctx* ctx) {
  arena_free(ctx->work, ctx->work_bytes);
  ctx->work = NULL;
  ctx->work_bytes = 0;
}
