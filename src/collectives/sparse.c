/* sparse.c — placeholder until written. */
#include "../common/result.h"
#include "coll.h"

gcclResult_t allreduce_sparse_ag(struct coll_ctx* ctx, const struct coll_args* a) {
  (void)ctx, (void)a;
  return err_set(gcclInternalError, "allreduce_sparse_ag is not written yet");
}
gcclResult_t allreduce_sparse_sr(struct coll_ctx* ctx, const struct coll_args* a) {
  (void)ctx, (void)a;
  return err_set(gcclInternalError, "allreduce_sparse_sr is not written yet");
}
