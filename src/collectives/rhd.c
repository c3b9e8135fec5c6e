/* rhd.c — Rabenseifner's allreduce: recursive-halving reduce-scatter, then
 * recursive-doubling allgather (Thakur, Rabenseifner & Gropp, "Optimization of
 * collective communication operations in MPICH", IJHPCA 2005).
 *
 * With q = 2^k ranks the vector is cut into q blocks (coll_chunk). Halving step
 * with distance d = q/2, q/4, ..., 1: a rank and its partner v^d share a range of
 * 2d blocks; each sends the half holding the partner's block and reduces the half
 * holding its own. After k steps rank v holds block v reduced over all ranks,
 * computed there alone. Doubling steps d = 1, 2, ..., q/2 run the same pairs
 * backwards, copying the finished blocks: every rank ends with the same bits.
 *
 * p ranks, q = 2^floor(log2 p), r = p - q: of ranks 0..2r-1 each even rank folds its
 * whole vector into the odd rank above it and sits out; the q remaining ranks run
 * the above as v = 0..q-1, and each odd rank finally sends the result back down.
 *
 *   p = 6, q = 4, r = 2:   rank  0  1  2  3  4  5
 *                          v     -  0  -  1  2  3      (0 -> 1, 2 -> 3 fold)
 */
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"

/* First element of block b of q (b == q gives count). */
static size_t block_start(size_t count, int q, int b) {
  size_t off, len;
  coll_chunk(count, q, b, &off, &len);
  return off;
}

/* Rank of virtual rank v. */
static int real_rank(int v, int r) {
  return v < r ? 2 * v + 1 : v + r;
}

static size_t min_size(size_t a, size_t b) {
  return a < b ? a : b;
}

/* Sends scount elements of sbuf to peer and, at the same time, receives rcount
 * elements from it into scratch, reducing each piece as dst = src op piece. Both
 * directions go in segments of half the scratch; the peer runs the same code over
 * the same ranges, so the message sizes agree. The receive of segment k+1 is posted
 * before segment k is reduced. */
static gcclResult_t exchange_reduce(struct coll_ctx* ctx, const struct coll_args* a, int peer, const char* sbuf,
                                    size_t scount, char* dst, const char* src, size_t rcount) {
  struct transport* tp = ctx->tp;
  size_t size = dtype_size(a->dt), seg = ctx->scratch_bytes / 2 / size;
  if (seg == 0) return err_set(gcclInternalError, "rhd: %zu bytes of scratch is too small", ctx->scratch_bytes);
  char* buf[2] = {ctx->scratch, (char*)ctx->scratch + seg * size};
  size_t nsend = (scount + seg - 1) / seg, nrecv = (rcount + seg - 1) / seg;
  tp_req sreq = -1, rreq = -1;
  if (nrecv) GCCL_CHECK(prim_post_recv(tp, peer, buf[0], min_size(rcount, seg) * size, &rreq));
  for (size_t k = 0; k < nsend || k < nrecv; k++) {
    size_t at = k * seg;
    if (k < nsend) GCCL_CHECK(prim_post_send(tp, peer, sbuf + at * size, min_size(scount - at, seg) * size, &sreq));
    if (k < nrecv) {
      GCCL_CHECK(prim_wait(tp, &rreq));
      if (k + 1 < nrecv)
        GCCL_CHECK(prim_post_recv(tp, peer, buf[(k + 1) % 2], min_size(rcount - at - seg, seg) * size, &rreq));
      reduce_2(dst + at * size, src + at * size, buf[k % 2], min_size(rcount - at, seg), a->dt, a->op);
    }
    GCCL_CHECK(prim_wait(tp, &sreq));
  }
  return gcclSuccess;
}

/* Sends and receives in one step, skipping empty directions (both sides agree). */
static gcclResult_t swap(struct transport* tp, int peer, const void* sbuf, size_t sbytes, void* rbuf, size_t rbytes) {
  tp_req reqs[2];
  GCCL_CHECK(prim_post_recv(tp, peer, rbuf, rbytes, &reqs[0]));
  GCCL_CHECK(prim_post_send(tp, peer, sbuf, sbytes, &reqs[1]));
  return prim_wait_all(tp, reqs, 2);
}

gcclResult_t allreduce_rhd(struct coll_ctx* ctx, const struct coll_args* a) {
  struct transport* tp = ctx->tp;
  int p = ctx->nranks, rank = ctx->rank;
  size_t size = dtype_size(a->dt), n = a->count;
  char* out = a->recvbuff;
  const char* in = a->sendbuff;
  if (n == 0) return gcclSuccess;
  if (p == 1) {
    if (out != in) memcpy(out, in, n * size);
    return gcclSuccess;
  }
  int q = coll_pow2_floor(p), r = p - q;

  /* step 0 (p not a power of two): fold the first 2r ranks pairwise */
  const char* cur = in; /* where this rank's current vector lives */
  if (rank < 2 * r) {
    if (rank % 2 == 0) {
      GCCL_CHECK(exchange_reduce(ctx, a, rank + 1, in, n, NULL, NULL, 0));
      /* sit out; the partner sends back the final result */
      return prim_recv(tp, rank + 1, out, n * size);
    }
    GCCL_CHECK(exchange_reduce(ctx, a, rank - 1, NULL, 0, out, in, n));
    cur = out;
  }
  int v = rank < 2 * r ? rank / 2 : rank - r;

  /* step 1: recursive halving. Keep the half of the shared range holding block v,
   * send the other half; the kept half is reduced into out. */
  for (int d = q / 2; d >= 1; d /= 2) {
    int lo = v & ~(2 * d - 1), keep = (v & d) ? lo + d : lo, give = (v & d) ? lo : lo + d;
    size_t k0 = block_start(n, q, keep), k1 = block_start(n, q, keep + d);
    size_t g0 = block_start(n, q, give), g1 = block_start(n, q, give + d);
    GCCL_CHECK(exchange_reduce(ctx, a, real_rank(v ^ d, r), cur + g0 * size, g1 - g0, out + k0 * size, cur + k0 * size,
                               k1 - k0));
    cur = out;
  }

  /* step 2: recursive doubling. We hold the d blocks around v, the partner the d
   * blocks around v^d: swap them, straight into out. */
  for (int d = 1; d < q; d *= 2) {
    int mine = v & ~(d - 1), theirs = mine ^ d;
    size_t m0 = block_start(n, q, mine), m1 = block_start(n, q, mine + d);
    size_t t0 = block_start(n, q, theirs), t1 = block_start(n, q, theirs + d);
    GCCL_CHECK(swap(tp, real_rank(v ^ d, r), out + m0 * size, (m1 - m0) * size, out + t0 * size, (t1 - t0) * size));
  }

  /* step 3: hand the result back to the rank that folded into us */
  if (rank < 2 * r) GCCL_CHECK(prim_send(tp, rank - 1, out, n * size));
  return gcclSuccess;
}
