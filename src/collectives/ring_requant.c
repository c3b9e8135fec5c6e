/* ring_requant.c — placeholder until written. */
#include "../common/result.h"
#include "coll.h"

gcclResult_t allreduce_ring_requant(struct coll_ctx* ctx, const struct coll_args* a) {
  (void)ctx, (void)a;
  return err_set(gcclInternalError, "allreduce_ring_requant is not written yet");
}
