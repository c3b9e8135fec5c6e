/* dispatch.c — runs a collective with a chosen algorithm, then gcclAvg's division. */
#include "../common/reduce.h"
#include "../common/result.h"
#include "coll.h"

typedef gcclResult_t (*coll_fn)(struct coll_ctx*, const struct coll_args*);

static const coll_fn algorithms[COLL_NKINDS][ALGO_COUNT] = {
    [COLL_ALLREDUCE] = {[ALGO_RING] = allreduce_ring, [ALGO_RHD] = allreduce_rhd, [ALGO_TREE] = allreduce_tree,
                        [ALGO_DIRECT] = allreduce_direct},
    [COLL_ALLGATHER] = {[ALGO_RING] = allgather_ring, [ALGO_DIRECT] = allgather_direct},
    [COLL_REDUCESCATTER] = {[ALGO_RING] = reducescatter_ring, [ALGO_DIRECT] = reducescatter_direct},
    [COLL_BROADCAST] = {[ALGO_TREE] = broadcast_tree, [ALGO_DIRECT] = broadcast_direct},
    [COLL_REDUCE] = {[ALGO_TREE] = reduce_tree, [ALGO_DIRECT] = reduce_direct},
};

int coll_has_algo(enum coll_kind kind, enum coll_algo algo, int shares_address_space) {
  if (kind < 0 || kind >= COLL_NKINDS || algo < 0 || algo >= ALGO_COUNT) return 0;
  if (algo == ALGO_DIRECT && !shares_address_space) return 0; /* direct reads peers' memory */
  return algorithms[kind][algo] != NULL;
}

gcclResult_t coll_run(struct coll_ctx* ctx, const struct coll_args* a, enum coll_algo algo) {
  coll_fn fn = (a->kind >= 0 && a->kind < COLL_NKINDS && algo >= 0 && algo < ALGO_COUNT) ? algorithms[a->kind][algo]
                                                                                         : NULL;
  if (!fn) return err_set(gcclInternalError, "%s has no %s algorithm", coll_kind_name(a->kind), algo_name(algo));
  if (a->count == 0) return gcclSuccess;
  GCCL_CHECK(fn(ctx, a));
  /* gcclAvg: the algorithms summed; every rank divides the same sums the same way. */
  if (a->op == gcclAvg) {
    int holds_result = a->kind == COLL_ALLREDUCE || a->kind == COLL_REDUCESCATTER ||
                       (a->kind == COLL_REDUCE && ctx->rank == a->root);
    if (holds_result) reduce_divide(a->recvbuff, a->count, a->dt, ctx->nranks);
  }
  return gcclSuccess;
}
