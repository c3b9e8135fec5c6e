/* on_board.c — step 0 of a call on the transport's board (on_board.h): every
 * rank posts the hash of its call and, for a small dense allreduce, its data;
 * every rank reads every post.
 *
 * Every rank reads the same posts, so the verdict is the same everywhere, and a
 * post of another size is a mismatch whatever the hashes say, so calls of
 * different sizes are always told apart (the 64-bit hashes of two calls of one
 * size that differ collide once in 2^64). The sum is every rank's data combined
 * in rank order by each rank (reduce_n), so every rank computes the same bits
 * without a second round. */
#include "collectives/on_board.h"

#include "collectives/in_band.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"

_Static_assert(IN_BAND_MAX_BYTES <= TP_BOARD_MAX_BYTES, "a small allreduce's data fits a post");

gcclResult_t board_exchange(struct coll_ctx* ctx, uint64_t hash, const struct coll_args* sum, int* agreed) {
  size_t bytes = sum ? sum->count * dtype_size(sum->dt) : 0;
  if (bytes > IN_BAND_MAX_BYTES)
    return err_set(gcclInternalError, "board allreduce of %zu bytes, at most %zu", bytes, IN_BAND_MAX_BYTES);
  const struct tp_post* all = NULL;
  GCCL_CHECK(tp_board_post(ctx->tp, hash, bytes ? sum->sendbuff : NULL, bytes, &all));
  *agreed = 1;
  for (int r = 0; r < ctx->nranks; r++)
    if (all[r].hash != hash || all[r].bytes != bytes) *agreed = 0;
  if (!*agreed || !bytes) return gcclSuccess;
  for (int r = 0; r < ctx->nranks; r++) ctx->peer_send[r] = all[r].data; /* the posts, in rank order */
  reduce_n(sum->recvbuff, ctx->peer_send, ctx->nranks, sum->count, sum->dt, sum->op);
  if (sum->op == gcclAvg) reduce_divide(sum->recvbuff, sum->count, sum->dt, ctx->nranks);
  return gcclSuccess;
}
