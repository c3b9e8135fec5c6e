/* dispatch.c — the algorithms each collective has, by name, and running one:
 * the algorithm, then gcclAvg's division. */

#include <strings.h>

#include "collectives/algorithms.h"
#include "common/reduce.h"
#include "common/result.h"

static const char* const algo_names[ALGO_COUNT] = {"ring",     "rhd",          "tree",      "direct",    "hier",
                                                   "sra",      "ring-requant", "sparse-ag", "sparse-sr", "randk",
                                                   "powersgd", "in-band",      "split"};

const char* algo_name(enum coll_algo algo) {
  return (algo >= 0 && algo < ALGO_COUNT) ? algo_names[algo] : "auto";
}

enum coll_algo algo_from_name(const char* name) {
  if (name)
    for (int a = 0; a < ALGO_COUNT; a++)
      if (!strcasecmp(name, algo_names[a])) return (enum coll_algo)a;
  return ALGO_AUTO;
}

const char* coll_kind_name(enum coll_kind kind) {
  static const char* const names[COLL_NKINDS] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce"};
  return (kind >= 0 && kind < COLL_NKINDS) ? names[kind] : "unknown collective";
}

static coll_algorithm* const algorithms[COLL_NKINDS][ALGO_COUNT] = {
    [COLL_ALLREDUCE] = {[ALGO_RING] = allreduce_ring,
                        [ALGO_RHD] = allreduce_rhd,
                        [ALGO_TREE] = allreduce_tree,
                        [ALGO_DIRECT] = allreduce_direct,
                        [ALGO_HIER] = allreduce_hier,
                        [ALGO_SPLIT] = allreduce_split},
    [COLL_ALLGATHER] = {[ALGO_RING] = allgather_ring, [ALGO_DIRECT] = allgather_direct},
    [COLL_REDUCESCATTER] = {[ALGO_RING] = reducescatter_ring, [ALGO_DIRECT] = reducescatter_direct},
    [COLL_BROADCAST] = {[ALGO_TREE] = broadcast_tree, [ALGO_DIRECT] = broadcast_direct},
    [COLL_REDUCE] = {[ALGO_TREE] = reduce_tree, [ALGO_DIRECT] = reduce_direct},
};

/* With a compressor. */
static coll_algorithm* const compressed[COLL_NKINDS][ALGO_COUNT] = {
    [COLL_ALLREDUCE] = {[ALGO_SRA] = allreduce_sra,
                        [ALGO_RING_REQUANT] = allreduce_ring_requant,
                        [ALGO_SPARSE_AG] = allreduce_sparse_ag,
                        [ALGO_SPARSE_SR] = allreduce_sparse_sr,
                        [ALGO_RANDK] = allreduce_randk,
                        [ALGO_POWERSGD] = allreduce_powersgd,
                        [ALGO_HIER] = allreduce_hier},
    [COLL_ALLGATHER] = {[ALGO_SRA] = allgather_frames},
    [COLL_REDUCESCATTER] = {[ALGO_SRA] = reducescatter_sra},
};

int coll_has_compressed_algo(enum coll_kind kind, enum coll_algo algo) {
  if (kind < 0 || kind >= COLL_NKINDS || algo < 0 || algo >= ALGO_COUNT) return 0;
  return compressed[kind][algo] != NULL;
}

int coll_has_algo(enum coll_kind kind, enum coll_algo algo, int shares_address_space) {
  if (kind < 0 || kind >= COLL_NKINDS || algo < 0 || algo >= ALGO_COUNT) return 0;
  if (algo == ALGO_DIRECT && !shares_address_space) return 0; /* direct reads peers' memory */
  return algorithms[kind][algo] != NULL;
}

gcclResult_t coll_run(struct coll_ctx* ctx, const struct coll_args* a, enum coll_algo algo) {
  int ok = a->kind >= 0 && a->kind < COLL_NKINDS && algo >= 0 && algo < ALGO_COUNT;
  coll_algorithm* fn = !ok ? NULL : a->comp ? compressed[a->kind][algo] : algorithms[a->kind][algo];
  if (!fn) return err_set(gcclInternalError, "%s has no %s algorithm", coll_kind_name(a->kind), algo_name(algo));
  if (a->count == 0) return gcclSuccess;
  GCCL_CHECK(fn(ctx, a));
  /* gcclAvg: the algorithms summed; every rank divides the same sums the same way. */
  if (a->op == gcclAvg) {
    int holds_result =
        a->kind == COLL_ALLREDUCE || a->kind == COLL_REDUCESCATTER || (a->kind == COLL_REDUCE && ctx->rank == a->root);
    if (holds_result) reduce_divide(a->recvbuff, a->count, a->dt, ctx->nranks);
  }
  return gcclSuccess;
}
