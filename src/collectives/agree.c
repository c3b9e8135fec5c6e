/* agree.c — step 0 of every collective: all ranks check that they make the same call.
 *
 * NCCL hangs or corrupts memory when ranks disagree on a call; gccl exchanges a
 * small descriptor first, and every rank derives the same verdict from the same
 * table of descriptors, so all return gcclInvalidUsage together and the
 * communicator stays usable. On transports that agree in band (MPI) only a hash
 * of the descriptor travels, on the exchange of in_band.c, which a small dense
 * allreduce's data rides (coll_agree_allreduce), or on the board of shared memory
 * when every rank runs on one node (on_board.c); the descriptors follow only
 * when the hashes differ, to say how. A split allreduce sends its first round
 * while the hashes travel (split.c), and after a mismatch every rank takes in,
 * by the descriptors, what was sent to it. */
#include <stdio.h>
#include <string.h>

#include "collectives/in_band.h"
#include "collectives/on_board.h"
#include "collectives/prims.h"
#include "collectives/split.h"
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

/* This rank's descriptor of call a. */
static void describe(const struct coll_ctx* ctx, const struct coll_args* a, enum coll_algo algo, uint64_t seq,
                     struct coll_desc* d) {
  memset(d, 0, sizeof *d);
  d->kind = a->kind;
  d->dt = a->dt;
  d->op = a->op;
  d->root = a->root;
  d->algo = algo;
  d->count = a->count;
  d->seq = seq;
  d->send = (uint64_t)(uintptr_t)a->sendbuff;
  d->recv = (uint64_t)(uintptr_t)a->recvbuff;
  buffer_bytes(a, ctx->rank, ctx->nranks, &d->send_bytes, &d->recv_bytes);
  if (a->comp) snprintf(d->spec, sizeof d->spec, "%s", a->comp->spec_text);
}

/* Compares every rank with rank 0, field by field, in the order a user reads a call. */
static gcclResult_t compare(const struct coll_desc* all, int nranks) {
  const struct coll_desc* d0 = &all[0];
  for (int r = 1; r < nranks; r++) {
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
  return gcclSuccess;
}

/* What compare compares, hashed (a 64-bit multiply-xorshift per word), so that
 * the hashes differ where it finds a difference. */
static uint64_t mix(uint64_t h, uint64_t word) {
  h = (h ^ word) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

static uint64_t hash_of(const struct coll_args* a, enum coll_algo algo) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  h = mix(h, (uint64_t)(uint32_t)a->kind | (uint64_t)(uint32_t)a->dt << 32);
  h = mix(h, (uint64_t)(uint32_t)a->op | (uint64_t)(uint32_t)a->root << 32);
  h = mix(h, (uint64_t)(uint32_t)algo);
  h = mix(h, (uint64_t)a->count);
  const char* spec = a->comp ? a->comp->spec_text : "";
  for (size_t i = 0, n = strlen(spec); i < n; i += 8) {
    uint64_t word = 0;
    memcpy(&word, spec + i, n - i < 8 ? n - i : 8);
    h = mix(h, word);
  }
  return h;
}

/* Every rank's descriptor, then the verdict; publishes buffer addresses. */
static gcclResult_t agree_by_allgather(struct coll_ctx* ctx, const struct coll_desc* mine) {
  struct coll_desc all[ctx->nranks > 0 ? ctx->nranks : 1];
  GCCL_CHECK(prim_allgather_small(ctx->tp, mine, sizeof *mine, all));
  GCCL_CHECK(compare(all, ctx->nranks));
  if (ctx->tp->shares_address_space) {
    GCCL_CHECK(check_cross_rank_overlap(all, ctx->nranks));
    for (int r = 0; r < ctx->nranks; r++) {
      ctx->peer_send[r] = (const void*)(uintptr_t)all[r].send;
      ctx->peer_recv[r] = (void*)(uintptr_t)all[r].recv;
    }
  }
  return gcclSuccess;
}

/* Whether a rank whose call is of this kind, algorithm and count sends the split
 * allreduce's first round during the agreement (agree_in_band). */
static int sends_early(int32_t kind, int32_t algo, uint64_t count) {
  return kind == COLL_ALLREDUCE && algo == ALGO_SPLIT && count > 0;
}

/* After a mismatch: what ranks on the split road sent this rank during the
 * agreement is taken in, and this rank's own early sends end, so that no message
 * of this call is left for the next (split.c). */
static gcclResult_t drop_early(struct coll_ctx* ctx, const struct coll_desc* all) {
  for (int r = 0; r < ctx->nranks; r++)
    if (r != ctx->rank && sends_early(all[r].kind, all[r].algo, all[r].count))
      GCCL_CHECK(split_drop(ctx, r, (size_t)all[r].count, (gcclDataType_t)all[r].dt));
  return split_settle(ctx);
}

/* The hashes in band (with sum's data riding along, or the split road's first
 * round beside them); only after a mismatch, which every rank sees alike, the
 * descriptors themselves, to say what differs. */
static gcclResult_t agree_in_band(struct coll_ctx* ctx, const struct coll_args* a, enum coll_algo algo, uint64_t seq,
                                  const struct coll_args* sum) {
  int agreed = 0;
  struct split_early call = {ctx, a};
  struct in_band_early early = {split_send_early, &call};
  int split = !sum && sends_early(a->kind, algo, a->count);
  if (split) split_early_begin(ctx);
  if (tp_has_board(ctx->tp)) {
    for (int r = 0; split && r < ctx->nranks; r++) /* no tagged messages: all at once */
      if (r != ctx->rank) GCCL_CHECK(split_send_early(&call, r));
    GCCL_CHECK(board_exchange(ctx, hash_of(a, algo), sum, &agreed));
  } else {
    GCCL_CHECK(in_band_exchange(ctx, hash_of(a, algo), sum, split ? &early : NULL, &agreed));
  }
  if (agreed) return gcclSuccess;
  struct coll_desc mine, all[ctx->nranks];
  describe(ctx, a, algo, seq, &mine);
  GCCL_CHECK(prim_allgather_small(ctx->tp, &mine, sizeof mine, all));
  GCCL_CHECK(drop_early(ctx, all));
  GCCL_CHECK(compare(all, ctx->nranks));
  return err_set(gcclInvalidUsage, "call mismatch in %s: the ranks' calls differ", coll_kind_name(a->kind));
}

gcclResult_t coll_agree(struct coll_ctx* ctx, const struct coll_args* a, enum coll_algo algo, uint64_t seq) {
  if (ctx->tp->agree_in_band) return agree_in_band(ctx, a, algo, seq, NULL);
  struct coll_desc mine;
  describe(ctx, a, algo, seq, &mine);
  return agree_by_allgather(ctx, &mine);
}

gcclResult_t coll_agree_allreduce(struct coll_ctx* ctx, const struct coll_args* a, uint64_t seq) {
  return agree_in_band(ctx, a, ALGO_IN_BAND, seq, a);
}
