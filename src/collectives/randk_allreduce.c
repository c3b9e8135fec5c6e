/* randk_allreduce.c — placeholder until written. */
#include "../common/result.h"
#include "coll.h"

gcclResult_t allreduce_randk(struct coll_ctx* ctx, const struct coll_args* a) {
  (void)ctx, (void)a;
  return err_set(gcclInternalError, "allreduce_randk is not written yet");
}
