/* powersgd.c — the low-rank allreduce: PowerSGD (Vogels, Karimireddy and Jaggi,
 * NeurIPS 2019), one power iteration per call from the last call's Q.
 *
 * Each rank reads its input plus residual as a rows x cols matrix M_r
 * (compress/powersgd.h; the last row zero-padded). With Q (cols x R) the same on
 * every rank:
 *
 *   P   = M_r Q            compute_p             rows x R
 *   P   = sum_r P          dense allreduce       (rows R floats)
 *   Q'  = M_r^T orth(P)    compute_q             cols x R
 *   Q'  = sum_r Q'         dense allreduce       (cols R floats)
 *   out = P Q'^T           compute_output        = P P^T sum_r M_r
 *
 * (divided by p for avg, by coll_run), so a call moves (rows + cols) R floats
 * instead of rows cols. When the sum has rank <= R, P spans its columns and out
 * equals it up to rounding. Error feedback as PyTorch's powerSGD_hook: e_r =
 * M_r - out / p. The residual and Q' are staged in the compressor, which
 * commits them when every rank succeeded, so a failed call changes neither.
 * The steps, their bit-identity across ranks and their handling of non-finite
 * inputs are in compress/powersgd_steps.c. */
#include "compress/powersgd.h"

#include "collectives/algorithms.h"
#include "collectives/tuner.h"
#include "common/result.h"
#include "compress/compressor.h"

/* A dense fp32 sum over ranks, in place, by the tuner's algorithm among those
 * that move messages: the direct ones would read the buffers coll_agree
 * published, which are the call's, not x. */
static gcclResult_t sum_over_ranks(struct coll_ctx* ctx, float* x, size_t n) {
  struct coll_args sum = {
      .kind = COLL_ALLREDUCE, .sendbuff = x, .recvbuff = x, .count = n, .dt = gcclFloat32, .op = gcclSum};
  return coll_run(ctx, &sum,
                  tuner_choose(COLL_ALLREDUCE, n * sizeof(float), ctx->nranks, ctx->nranks, 0, &ctx->net, ALGO_AUTO));
}

gcclResult_t allreduce_powersgd(struct coll_ctx* ctx, const struct coll_args* a) {
  struct gcclCompressor* c = a->comp;
  struct powersgd_state* st = c->state;
  struct powersgd_shape sh = st->shape;
  if (a->comp_first != 0 || a->count != c->count)
    return err_set(gcclInternalError, "powersgd: runs on whole tensors only (%zu at %zu of %zu)", a->count,
                   a->comp_first, c->count);
  GCCL_CHECK(powersgd_compute_p(c, a->sendbuff, a->dt, st->p));
  GCCL_CHECK(sum_over_ranks(ctx, st->p, sh.rows * sh.rank));
  powersgd_compute_q(c, st->p, st->q_next);
  GCCL_CHECK(sum_over_ranks(ctx, st->q_next, sh.cols * sh.rank));
  powersgd_compute_output(c, st->q_next, a->recvbuff, a->dt, ctx->nranks);
  return gcclSuccess;
}
