/* agree.c — step 0 of every collective: all ranks check that they make the same call.
 *
 * NCCL hangs or corrupts memory when ranks disagree on a call; gccl exchanges a
 * small descriptor first, and every rank derives the same verdict from the same
 * table of descriptors, so all return gcclInvalidUsage together and the
 * communicator stays usable. */
#include <stdio.h>
#include <string.h>

#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/result.h"
#include "compress/compressor.h"

struct coll_desc {
  int32_t kind, dt, op, root, algo, pad;
  uint64_t count;
  uint64_t seq;
  uint64_t send, recv; /* buffer addresses: used on a shared address space */
  uint64_t send_bytes, recv_bytes;
  char spec[SPEC_FORMAT_MAX]; /* the compressor's canonical spec; "" for a dense call */
};

_Static_assert(sizeof(struct coll_desc) <= TP_SMALL_MAX, "a call descriptor must fit allgather_small");

/* Bytes of the send and receive buffers a rank touches for this call. */
static void buffer_bytes(const struct coll_args* a, int rank, int nranks, uint64_t* send, uint64_t* recv) {
  uint64_t b = (uint64_t)a->count * dtype_size(a->dt);
  *send = *recv = b;
  if (a->kind == COLL_ALLGATHER) *recv = b * (uint64_t)nranks;
  if (a->kind == COLL_REDUCESCATTER) *send = b * (uint64_t)nranks;
  if (a->kind == COLL_BROADCAST && rank != a->root) *send = 0;
  if (a->kind == COLL_REDUCE && rank != a->root) *recv = 0;
}

static int overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  return alen && blen && a < b + blen && b < a + alen;
}

/* With buffers addressable by every rank, a rank's receive buffer must not overlap
 * another rank's buffers: the direct algorithms would read half-written data. */
static gcclResult_t check_cross_rank_overlap(const struct coll_desc* d, int nranks) {
  for (int r = 0; r < nranks; r++)
    for (int s = 0; s < nranks; s++) {
      if (r == s) continue;
      if (overlaps(d[r].recv, d[r].recv_bytes, d[s].send, d[s].send_bytes) ||
          overlaps(d[r].recv, d[r].recv_bytes, d[s].recv, d[s].recv_bytes))
        return err_set(gcclInvalidUsage, "the receive buffer of rank %d overlaps a buffer of rank %d", r, s);
    }
  return gcclSuccess;
}

gcclResult_t coll_agree(struct coll_ctx* ctx, const struct coll_args* a, enum coll_algo algo, uint64_t seq) {
  struct coll_desc mine = {.kind = a->kind,
                           .dt = a->dt,
                           .op = a->op,
                           .root = a->root,
                           .algo = algo,
                           .count = a->count,
                           .seq = seq,
                           .send = (uint64_t)(uintptr_t)a->sendbuff,
                           .recv = (uint64_t)(uintptr_t)a->recvbuff};
  buffer_bytes(a, ctx->rank, ctx->nranks, &mine.send_bytes, &mine.recv_bytes);
  if (a->comp) snprintf(mine.spec, sizeof mine.spec, "%s", a->comp->spec_text);
  struct coll_desc all[ctx->nranks > 0 ? ctx->nranks : 1];
  GCCL_CHECK(prim_allgather_small(ctx->tp, &mine, sizeof mine, all));

  /* Compare every rank with rank 0, field by field, in the order a user reads a call. */
  const struct coll_desc* d0 = &all[0];
  for (int r = 1; r < ctx->nranks; r++) {
    const struct coll_desc* d = &all[r];
    if (d->kind != d0->kind)
      return err_set(gcclInvalidUsage, "collective mismatch: rank 0 called %s, rank %d called %s",
                     coll_kind_name(d0->kind), r, coll_kind_name(d->kind));
    const char* what = coll_kind_name(d0->kind);
    if (d->count != d0->count)
      return err_set(gcclInvalidUsage, "count mismatch in %s: rank 0 passed %llu, rank %d passed %llu", what,
                     (unsigned long long)d0->count, r, (unsigned long long)d->count);
    if (d->dt != d0->dt)
      return err_set(gcclInvalidUsage, "datatype mismatch in %s: rank 0 passed %s, rank %d passed %s", what,
                     dtype_name(d0->dt), r, dtype_name(d->dt));
    if (d->op != d0->op)
      return err_set(gcclInvalidUsage, "reduction op mismatch in %s: rank 0 passed %s, rank %d passed %s", what,
                     op_name(d0->op), r, op_name(d->op));
    if (d->root != d0->root)
      return err_set(gcclInvalidUsage, "root mismatch in %s: rank 0 passed %d, rank %d passed %d", what, d0->root, r,
                     d->root);
    if (strcmp(d->spec, d0->spec) != 0)
      return err_set(gcclInvalidUsage, "compressor mismatch in %s: rank 0 uses \"%s\", rank %d uses \"%s\"", what,
                     d0->spec[0] ? d0->spec : "(dense)", r, d->spec[0] ? d->spec : "(dense)");
    if (d->algo != d0->algo)
      return err_set(gcclInvalidUsage,
                     "algorithm mismatch in %s: rank 0 chose %s, rank %d chose %s (set GCCL_ALGO alike)", what,
                     algo_name(d0->algo), r, algo_name(d->algo));
  }
  if (ctx->tp->shares_address_space) {
    GCCL_CHECK(check_cross_rank_overlap(all, ctx->nranks));
    for (int r = 0; r < ctx->nranks; r++) {
      ctx->peer_send[r] = (const void*)(uintptr_t)all[r].send;
      ctx->peer_recv[r] = (void*)(uintptr_t)all[r].recv;
    }
  }
  return gcclSuccess;
}
