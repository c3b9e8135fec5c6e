/* hier.c — placeholder until written. */
#include "../common/result.h"
#include "coll.h"

gcclResult_t allreduce_hier(struct coll_ctx* ctx, const struct coll_args* a) {
  (void)ctx, (void)a;
  return err_set(gcclInternalError, "allreduce_hier is not written yet");
}
