/* sra.c — compressed scatter-reduce-allgather (placeholder until written). */
#include "../common/result.h"
#include "coll.h"

gcclResult_t allreduce_sra(struct coll_ctx* ctx, const struct coll_args* a) {
  (void)ctx, (void)a;
  return err_set(gcclInternalError, "sra is not written yet");
}
gcclResult_t reducescatter_sra(struct coll_ctx* ctx, const struct coll_args* a) {
  (void)ctx, (void)a;
  return err_set(gcclInternalError, "compressed reduce-scatter is not written yet");
}
gcclResult_t allgather_frames(struct coll_ctx* ctx, const struct coll_args* a) {
  (void)ctx, (void)a;
  return err_set(gcclInternalError, "compressed allgather is not written yet");
}
