/* tree.c — binomial trees: reduce to a root, broadcast from it, and allreduce as a
 * reduce to rank 0 followed by a broadcast from rank 0.
 *
 * Ranks are relabelled v = (rank - root) mod p so that the root is v = 0; a rank's
 * parent and children are prim_tree_of's (prims.h).
 * For p = 8 (log2 p = 3 rounds):
 *
 *                0                 broadcast  round 0: 0->4
 *            /   |   \                        round 1: 0->2  4->6
 *           4    2    1                       round 2: 0->1  2->3  4->5  6->7
 *          / \   |
 *         6   5  3                 reduce runs the same edges upwards, round 2
 *         |                        first; a rank combines its own data with its
 *         7                        children's in a fixed order (child v+1, v+2, v+4)
 *
 * The data goes in segments, so the levels of the tree work on different segments
 * at once instead of each waiting for the whole message. */
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"

/* Segment length: a reducing rank keeps one segment per child plus its partial sum
 * in scratch, and the root has ceil(log2 p) children. Every rank derives it from p
 * alone, so parents and children cut the data identically. */
static gcclResult_t tree_seg(const struct coll_ctx* ctx, size_t size, size_t* seg) {
  int slots = 1;
  for (int mask = 1; mask < ctx->nranks; mask <<= 1) slots++;
  *seg = ctx->scratch_bytes / (size_t)slots / size;
  if (*seg == 0) return err_set(gcclInternalError, "tree: %zu bytes of scratch is too small", ctx->scratch_bytes);
  return gcclSuccess;
}

/* Binomial reduce of a->sendbuff to `root`, whose result goes to root_out (touched on
 * the root only). Partial sums live in scratch, never in a user buffer. */
static gcclResult_t tree_reduce(struct coll_ctx* ctx, const struct coll_args* a, int root, char* root_out) {
  struct transport* tp = ctx->tp;
  size_t size = dtype_size(a->dt), seg;
  const char* in = a->sendbuff;
  struct prim_tree t = prim_tree_of(ctx->rank, root, ctx->nranks);
  GCCL_CHECK(tree_seg(ctx, size, &seg));
  char* partial = ctx->scratch;
  const void* srcs[PRIM_TREE_MAX_CHILDREN + 1];
  tp_req reqs[PRIM_TREE_MAX_CHILDREN];
  for (size_t off = 0; off < a->count; off += seg) {
    size_t len = a->count - off < seg ? a->count - off : seg;
    /* receive this segment from every child at once, one scratch slot each */
    srcs[0] = in + off * size;
    for (int c = 0; c < t.nchildren; c++) {
      char* slot = partial + (size_t)(c + 1) * seg * size;
      srcs[c + 1] = slot;
      GCCL_CHECK(prim_post_recv(tp, t.children[c], slot, len * size, &reqs[c]));
    }
    GCCL_CHECK(prim_wait_all(tp, reqs, (size_t)t.nchildren));
    /* combine own data, then children nearest first: one rounding for fp16/bf16 */
    char* dst = t.parent < 0 ? root_out + off * size : partial;
    if (t.nchildren > 0 || t.parent < 0) reduce_n(dst, srcs, 1 + t.nchildren, len, a->dt, a->op);
    /* pass the subtree's partial sum up (a leaf sends its input as it is) */
    if (t.parent >= 0) GCCL_CHECK(prim_send(tp, t.parent, t.nchildren ? dst : srcs[0], len * size));
  }
  return gcclSuccess;
}

/* Binomial broadcast of `count` elements from `root`: the root sends from src, the
 * others receive into and forward from out. */
static gcclResult_t tree_broadcast(struct coll_ctx* ctx, const struct coll_args* a, int root, const char* src,
                                   char* out) {
  struct transport* tp = ctx->tp;
  size_t size = dtype_size(a->dt), seg;
  struct prim_tree t = prim_tree_of(ctx->rank, root, ctx->nranks);
  GCCL_CHECK(tree_seg(ctx, size, &seg));
  const char* from = t.parent < 0 ? src : out;
  tp_req reqs[PRIM_TREE_MAX_CHILDREN];
  for (size_t off = 0; off < a->count; off += seg) {
    size_t bytes = (a->count - off < seg ? a->count - off : seg) * size;
    if (t.parent >= 0) GCCL_CHECK(prim_recv(tp, t.parent, out + off * size, bytes));
    /* farthest child first: it heads the largest subtree */
    for (int c = t.nchildren - 1, n = 0; c >= 0; c--, n++)
      GCCL_CHECK(prim_post_send(tp, t.children[c], from + off * size, bytes, &reqs[n]));
    GCCL_CHECK(prim_wait_all(tp, reqs, (size_t)t.nchildren));
  }
  if (t.parent < 0 && out != src) memcpy(out, src, a->count * size);
  return gcclSuccess;
}

gcclResult_t reduce_tree(struct coll_ctx* ctx, const struct coll_args* a) {
  if (a->count == 0) return gcclSuccess;
  return tree_reduce(ctx, a, a->root, ctx->rank == a->root ? a->recvbuff : NULL);
}

gcclResult_t broadcast_tree(struct coll_ctx* ctx, const struct coll_args* a) {
  if (a->count == 0) return gcclSuccess;
  return tree_broadcast(ctx, a, a->root, a->sendbuff, a->recvbuff);
}

gcclResult_t allreduce_tree(struct coll_ctx* ctx, const struct coll_args* a) {
  if (a->count == 0) return gcclSuccess;
  /* phase 1: reduce to rank 0, the only rank that computes the result */
  GCCL_CHECK(tree_reduce(ctx, a, 0, a->recvbuff));
  /* phase 2: rank 0 broadcasts its result (in place there) to everyone */
  return tree_broadcast(ctx, a, 0, a->recvbuff, a->recvbuff);
}
