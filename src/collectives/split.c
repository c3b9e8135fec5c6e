/* split.c — allreduce in two rounds of messages: every rank sends each chunk of
 * its vector straight to the chunk's owner, the owner reduces it, and sends the
 * sum straight back to every rank (reduce-scatter and allgather, each one round).
 *
 *   chunk c of p near-equal chunks (coll_chunk) is owned by rank c; p = 3:
 *
 *     round 1:  r0 -c1-> r1  r0 -c2-> r2  r1 -c0-> r0  r1 -c2-> r2  r2 -c0-> r0  r2 -c1-> r1
 *               (each owner adds the p copies of its chunk: its own first, then
 *                ranks r+1, r+2, ... mod p)
 *     round 2:  r0 -S0-> r1,r2   r1 -S1-> r0,r2   r2 -S2-> r0,r1
 *
 * Each rank sends and receives 2 (p-1)/p n bytes, as in the ring, in two
 * rounds where the ring takes 2 (p-1) steps. Over tagged messages (MPI across
 * nodes) round 1 waits on the agreement's exchange (below): at p = 3 the fold's
 * host sends its extra rank's chunk only after the verdict, so a call takes four
 * steps, as the ring does, and on the test bed ties it only where the link, not
 * latency, decides (docs/notes/2026-12-07-i-split-at-three-ranks-latency.md).
 *
 * Why it exists: across nodes with p not a power of two, the in-band exchange
 * folds the extra ranks' whole vectors in (in_band.c), and past the size the
 * communicator timed at creation (core/in_band_limit.c) a dense allreduce of up to
 * IN_BAND_MAX_BYTES took the agreement alone and then the ring: on the 1 Gbit/s
 * test bed at 3 ranks, the agreement's three latencies made 16 KiB 1.3x Open MPI's
 * allreduce where the ring without them took 1.01-1.05x (BENCHMARKS.md). Here
 * round 1 leaves while the agreement runs (split_send_early, called by agree.c): a
 * rank's chunk for a peer goes right after its own tagged message to that peer, or
 * at once to a peer it exchanges none with, so that no receive of a tagged
 * message, which takes any tag, meets it (transport/mpi_lanes.c). Nothing is
 * received or written before the verdict; after a mismatch every rank knows every
 * rank's call and takes in what was sent to it (split_drop), so the next call
 * finds no message of this one.
 *
 * Every element is reduced by its owner alone, in one fixed order, and then only
 * copied: every rank ends with the same bits. Chunks are cut into segments so
 * that the p - 1 copies of one segment fit the scratch; the road across nodes
 * runs one segment (IN_BAND_MAX_BYTES at most). */
#include "collectives/split.h"

#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"

struct split_layout {
  size_t count, seg, size; /* elements, elements per segment, bytes per element */
};

/* Segments of at most seg elements: the p - 1 copies of one fit the scratch. */
static gcclResult_t layout_of(const struct coll_ctx* ctx, size_t count, gcclDataType_t dt, struct split_layout* L) {
  size_t size = dtype_size(dt), peers = ctx->nranks > 1 ? (size_t)ctx->nranks - 1 : 1;
  *L = (struct split_layout){count, ctx->scratch_bytes / peers / size, size};
  if (L->seg == 0)
    return err_set(gcclInternalError, "split: %zu bytes of scratch is too small for %d ranks", ctx->scratch_bytes,
                   ctx->nranks);
  return gcclSuccess;
}

/* Segment j of chunk c: its first element and length (0 past the chunk's end). */
static void seg_of(const struct split_layout* L, int p, int c, size_t j, size_t* off, size_t* len) {
  size_t coff, clen;
  coll_chunk(L->count, p, c, &coff, &clen);
  coll_segment(coff, clen, L->seg, j, off, len);
}

/* Round 1 of segment j to one peer: its chunk of this rank's vector. */
static gcclResult_t send_chunk(struct coll_ctx* ctx, const struct coll_args* a, const struct split_layout* L, size_t j,
                               int peer, tp_req* slot) {
  size_t off, len;
  seg_of(L, ctx->nranks, peer, j, &off, &len);
  return prim_post_send(ctx->tp, peer, (const char*)a->sendbuff + off * L->size, len * L->size, slot);
}

/* Where peer k's copy of this rank's chunk lands in the scratch. */
static char* copy_of(const struct coll_ctx* ctx, const struct split_layout* L, int k) {
  int slot = prim_mod(k - ctx->rank - 1, ctx->nranks);
  return (char*)ctx->scratch + (size_t)slot * L->seg * L->size;
}

/* Segment j once its round-1 sends are posted (in sends[peer]): the copies of
 * this rank's chunk in, their sum, round 2. */
static gcclResult_t finish_seg(struct coll_ctx* ctx, const struct coll_args* a, const struct split_layout* L, size_t j,
                               tp_req* sends, tp_req* recvs) {
  struct transport* tp = ctx->tp;
  int p = ctx->nranks, r = ctx->rank;
  size_t off, len;
  seg_of(L, p, r, j, &off, &len);
  for (int i = 1; i < p; i++) {
    int k = prim_mod(r + i, p);
    GCCL_CHECK(prim_post_recv(tp, k, copy_of(ctx, L, k), len * L->size, &recvs[k]));
  }
  GCCL_CHECK(prim_wait_all(tp, recvs, (size_t)p));
  /* In place, round 2 writes where round 1's sends read. */
  GCCL_CHECK(prim_wait_all(tp, sends, (size_t)p));
  char* sum = (char*)a->recvbuff + off * L->size;
  const char* own = (const char*)a->sendbuff + off * L->size;
  for (int i = 1; i < p && len; i++) {
    const char* in = copy_of(ctx, L, prim_mod(r + i, p));
    reduce_2(sum, i == 1 ? own : sum, in, len, a->dt, a->op);
  }
  for (int i = 1; i < p; i++) {
    int k = prim_mod(r + i, p);
    size_t koff, klen;
    seg_of(L, p, k, j, &koff, &klen);
    GCCL_CHECK(prim_post_recv(tp, k, (char*)a->recvbuff + koff * L->size, klen * L->size, &recvs[k]));
    GCCL_CHECK(prim_post_send(tp, k, sum, len * L->size, &sends[k]));
  }
  GCCL_CHECK(prim_wait_all(tp, recvs, (size_t)p));
  return prim_wait_all(tp, sends, (size_t)p);
}

gcclResult_t allreduce_split(struct coll_ctx* ctx, const struct coll_args* a) {
  int p = ctx->nranks, r = ctx->rank;
  size_t bytes = a->count * dtype_size(a->dt);
  if (p == 1) {
    if (bytes && a->recvbuff != a->sendbuff) memcpy(a->recvbuff, a->sendbuff, bytes);
    return gcclSuccess;
  }
  struct split_layout L;
  GCCL_CHECK(layout_of(ctx, a->count, a->dt, &L));
  tp_req sends[p], recvs[p];
  prim_slots_clear(sends, (size_t)p);
  prim_slots_clear(recvs, (size_t)p);
  int early = ctx->split_early_posted;
  ctx->split_early_posted = 0;
  size_t off0, longest; /* chunk 0 is the longest */
  coll_chunk(a->count, p, 0, &off0, &longest);
  for (size_t j = 0; j * L.seg < longest; j++) {
    if (j == 0 && early) {
      memcpy(sends, ctx->split_early, (size_t)p * sizeof *sends);
    } else {
      for (int i = 1; i < p; i++) {
        int k = prim_mod(r + i, p);
        GCCL_CHECK(send_chunk(ctx, a, &L, j, k, &sends[k]));
      }
    }
    GCCL_CHECK(finish_seg(ctx, a, &L, j, sends, recvs));
  }
  return gcclSuccess;
}

void split_early_begin(struct coll_ctx* ctx) {
  prim_slots_clear(ctx->split_early, (size_t)ctx->nranks);
  ctx->split_early_posted = 1;
}

gcclResult_t split_send_early(void* arg, int peer) {
  const struct split_early* e = arg;
  struct split_layout L;
  GCCL_CHECK(layout_of(e->ctx, e->call->count, e->call->dt, &L));
  return send_chunk(e->ctx, e->call, &L, 0, peer, &e->ctx->split_early[peer]);
}

gcclResult_t split_drop(struct coll_ctx* ctx, int peer, size_t count, gcclDataType_t dt) {
  struct split_layout L;
  GCCL_CHECK(layout_of(ctx, count, dt, &L));
  size_t off, len;
  seg_of(&L, ctx->nranks, ctx->rank, 0, &off, &len);
  tp_req req = -1;
  GCCL_CHECK(prim_post_recv(ctx->tp, peer, ctx->scratch, len * L.size, &req));
  return prim_wait(ctx->tp, &req);
}

gcclResult_t split_settle(struct coll_ctx* ctx) {
  if (!ctx->split_early_posted) return gcclSuccess;
  ctx->split_early_posted = 0;
  return prim_wait_all(ctx->tp, ctx->split_early, (size_t)ctx->nranks);
}
