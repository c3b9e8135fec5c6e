/* ring.c — ring reduce-scatter, allgather, and allreduce as the two in sequence.
 *
 * Rank r sends only to next = r+1 and receives only from prev = r-1 (mod p). The
 * data is cut into p chunks and rank r ends up owning chunk r: near-equal chunks of
 * one vector (allreduce, coll_chunk) or p slots of `count` (reducescatter,
 * allgather). Chunks are cut further into segments of half the scratch, and the
 * schedule runs one segment index at a time through every step (as NCCL's loop over
 * slices does): a partial sum never needs more than one segment of scratch, and no
 * user buffer serves as an accumulator, so reducescatter in place is safe.
 *
 * Reduce-scatter, p = 4 (step s: rank r sends chunk r-s-1, receives chunk r-s-2 and
 * adds its own copy of it). Chunk c starts at rank c+1 and arrives complete at c:
 *
 *   step 0:  r0 -c3-> r1   r1 -c0-> r2   r2 -c1-> r3   r3 -c2-> r0
 *   step 1:  r0 -c2-> r1   r1 -c3-> r2   r2 -c0-> r3   r3 -c1-> r0
 *   step 2:  r0 -c1-> r1   r1 -c2-> r2   r2 -c3-> r3   r3 -c0-> r0   (r owns c_r)
 *
 * Each element is reduced by one rank along one fixed path and then only copied,
 * so every rank ends with the same bits, call after call. */
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"

struct ring_layout {
  size_t count; /* elements of the vector (slots == 0) or of one slot */
  int slots;    /* chunk c is slot c of `count` elements, not coll_chunk's chunk */
  size_t seg;   /* elements per segment */
  size_t size;  /* bytes per element */
};

/* Segment j of chunk c: its first element and its length (0 past the chunk's end). */
static void seg_of(const struct ring_layout* L, int p, int c, size_t j, size_t* off, size_t* len) {
  size_t coff, clen;
  if (L->slots) {
    coff = (size_t)c * L->count;
    clen = L->count;
  } else {
    coll_chunk(L->count, p, c, &coff, &clen);
  }
  coll_segment(coff, clen, L->seg, j, off, len);
}

/* Segment indices to run: enough for chunk 0, the longest. */
static size_t seg_count(const struct ring_layout* L, int p) {
  size_t off, len;
  coll_chunk(L->count, L->slots ? 1 : p, 0, &off, &len);
  return (len + L->seg - 1) / L->seg;
}

/* Reduce-scatter of segment index j: afterwards own_dst holds segment j of chunk r
 * reduced over all ranks. Partial sums live in two scratch buffers: step s receives
 * into buf[s%2] and sends what step s-1 reduced in buf[(s-1)%2]. */
static gcclResult_t ring_reduce_scatter_seg(struct coll_ctx* ctx, const struct coll_args* a,
                                            const struct ring_layout* L, size_t j, char* own_dst) {
  struct transport* tp = ctx->tp;
  int p = ctx->nranks, r = ctx->rank;
  struct prim_ring ring = prim_ring_of(r, p);
  const char* in = a->sendbuff;
  char* buf[2] = {ctx->scratch, (char*)ctx->scratch + L->seg * L->size};
  size_t soff, slen, roff, rlen;
  tp_req sreq, rreq;

  seg_of(L, p, prim_mod(r - 2, p), j, &roff, &rlen);
  GCCL_CHECK(prim_post_recv(tp, ring.prev, buf[0], rlen * L->size, &rreq));
  for (int s = 0; s < p - 1; s++) {
    /* step s: push chunk r-s-1 to next: our own input at step 0, afterwards the
     * partial sum we made at step s-1 */
    seg_of(L, p, prim_mod(r - s - 1, p), j, &soff, &slen);
    const char* src = s == 0 ? in + soff * L->size : buf[(s - 1) % 2];
    GCCL_CHECK(prim_post_send(tp, ring.next, src, slen * L->size, &sreq));
    GCCL_CHECK(prim_wait(tp, &rreq));
    GCCL_CHECK(prim_wait(tp, &sreq));
    size_t off = roff, len = rlen;
    char* got = buf[s % 2];
    /* the buffer just sent is free again: receive step s+1 into it while we reduce */
    if (s + 1 < p - 1) {
      seg_of(L, p, prim_mod(r - s - 3, p), j, &roff, &rlen);
      GCCL_CHECK(prim_post_recv(tp, ring.prev, buf[(s + 1) % 2], rlen * L->size, &rreq));
    }
    /* add our own copy of chunk r-s-2; at the last step it is chunk r, now complete */
    if (len) reduce_2(s == p - 2 ? own_dst : got, in + off * L->size, got, len, a->dt, a->op);
  }
  return gcclSuccess;
}

/* Allgather of segment index j, in place in `out`: rank r holds segment j of chunk r
 * (at `own`, which may lie outside `out`); step s forwards chunk r-s to next and
 * receives chunk r-s-1 from prev into its final place. */
static gcclResult_t ring_allgather_seg(struct coll_ctx* ctx, const struct ring_layout* L, size_t j, const char* own,
                                       char* out) {
  struct transport* tp = ctx->tp;
  int p = ctx->nranks, r = ctx->rank;
  struct prim_ring ring = prim_ring_of(r, p);
  size_t soff, slen, roff, rlen;
  tp_req sreq, rreq;
  for (int s = 0; s < p - 1; s++) {
    seg_of(L, p, prim_mod(r - s, p), j, &soff, &slen);
    seg_of(L, p, prim_mod(r - s - 1, p), j, &roff, &rlen);
    GCCL_CHECK(prim_post_recv(tp, ring.prev, out + roff * L->size, rlen * L->size, &rreq));
    GCCL_CHECK(prim_post_send(tp, ring.next, s == 0 ? own : out + soff * L->size, slen * L->size, &sreq));
    GCCL_CHECK(prim_wait(tp, &rreq));
    GCCL_CHECK(prim_wait(tp, &sreq));
  }
  return gcclSuccess;
}

/* Segment length for schedules that keep two segments in scratch. */
static gcclResult_t ring_seg(const struct coll_ctx* ctx, size_t size, size_t* seg) {
  *seg = ctx->scratch_bytes / 2 / size;
  if (*seg == 0) return err_set(gcclInternalError, "ring: %zu bytes of scratch is too small", ctx->scratch_bytes);
  return gcclSuccess;
}

static void copy_if_apart(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) memcpy(dst, src, bytes);
}

/* Count 0 or a rank alone: nothing moves (a copy when out of place). */
static int nothing_to_move(const struct coll_ctx* ctx, const struct coll_args* a) {
  if (a->count && ctx->nranks > 1) return 0;
  copy_if_apart(a->recvbuff, a->sendbuff, a->count * dtype_size(a->dt));
  return 1;
}

gcclResult_t reducescatter_ring(struct coll_ctx* ctx, const struct coll_args* a) {
  if (nothing_to_move(ctx, a)) return gcclSuccess;
  size_t size = dtype_size(a->dt);
  char* out = a->recvbuff;
  struct ring_layout L = {.count = a->count, .slots = 1, .size = size};
  GCCL_CHECK(ring_seg(ctx, size, &L.seg));
  for (size_t j = 0, n = seg_count(&L, ctx->nranks); j < n; j++)
    GCCL_CHECK(ring_reduce_scatter_seg(ctx, a, &L, j, out + j * L.seg * size));
  return gcclSuccess;
}

gcclResult_t allgather_ring(struct coll_ctx* ctx, const struct coll_args* a) {
  size_t size = dtype_size(a->dt), bytes = a->count * size;
  char* out = a->recvbuff;
  if (a->count == 0) return gcclSuccess;
  /* No scratch is involved, so each step moves a whole slot (one segment). Step 0
   * sends straight from sendbuff; our own slot is filled at the end. */
  struct ring_layout L = {.count = a->count, .slots = 1, .seg = a->count, .size = size};
  GCCL_CHECK(ring_allgather_seg(ctx, &L, 0, a->sendbuff, out));
  copy_if_apart(out + (size_t)ctx->rank * bytes, a->sendbuff, bytes);
  return gcclSuccess;
}

gcclResult_t allreduce_ring(struct coll_ctx* ctx, const struct coll_args* a) {
  if (nothing_to_move(ctx, a)) return gcclSuccess;
  size_t size = dtype_size(a->dt);
  char* out = a->recvbuff;
  struct ring_layout L = {.count = a->count, .slots = 0, .size = size};
  GCCL_CHECK(ring_seg(ctx, size, &L.seg));
  for (size_t j = 0, n = seg_count(&L, ctx->nranks); j < n; j++) {
    size_t off, len;
    seg_of(&L, ctx->nranks, ctx->rank, j, &off, &len);
    /* phase 1: reduce-scatter; segment j of our chunk r lands, complete, in out */
    GCCL_CHECK(ring_reduce_scatter_seg(ctx, a, &L, j, out + off * size));
    /* phase 2: allgather; every owner's result is copied around the ring unchanged */
    GCCL_CHECK(ring_allgather_seg(ctx, &L, j, out + off * size, out));
  }
  return gcclSuccess;
}
