/* split.h — the split allreduce's first round sent while the call's agreement
 * runs (split.c; agree.c is the caller). allreduce_split itself is in
 * algorithms.h. */
#ifndef GCCL_COLLECTIVES_SPLIT_H
#define GCCL_COLLECTIVES_SPLIT_H

#include "collectives/coll.h"

/* The call whose first round leaves early, and its communicator. */
struct split_early {
  struct coll_ctx* ctx;
  const struct coll_args* call;
};

/* Before the agreement: no early send is pending yet; allreduce_split will take
 * the ones posted from here on (ctx->split_early) as its first round. */
void split_early_begin(struct coll_ctx* ctx);
/* Posts the first round's message to peer (arg: a struct split_early*). */
gcclResult_t split_send_early(void* arg, int peer);
/* After a mismatch: receives and drops what peer sent this rank early, peer's
 * call being an allreduce_split of count elements of dt. */
gcclResult_t split_drop(struct coll_ctx* ctx, int peer, size_t count, gcclDataType_t dt);
/* After a mismatch: waits for this rank's early sends (its peers drop them). */
gcclResult_t split_settle(struct coll_ctx* ctx);

#endif
