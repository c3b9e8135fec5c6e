/* coll.h — collectives as schedules over transport primitives, and their dispatch. */
#ifndef GCCL_COLLECTIVES_COLL_H
#define GCCL_COLLECTIVES_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "gccl.h"
#include "../transport/transport.h"

enum coll_kind { COLL_ALLREDUCE = 0, COLL_ALLGATHER, COLL_REDUCESCATTER, COLL_BROADCAST, COLL_REDUCE, COLL_NKINDS };

enum coll_algo { ALGO_RING = 0, ALGO_RHD, ALGO_TREE, ALGO_DIRECT, ALGO_COUNT, ALGO_AUTO = -1 };

/* One collective call, as the user made it. `count` is the per-call count of the
 * public API: count (allreduce, broadcast, reduce), sendcount (allgather),
 * recvcount (reducescatter). op is gcclSum and root 0 where they do not apply. */
struct coll_args {
  enum coll_kind kind;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  gcclDataType_t dt;
  gcclRedOp_t op;
  int root;
};

/* What an algorithm may use: the transport, the communicator's scratch, and (for
 * direct algorithms on a shared address space) every rank's buffers. */
struct coll_ctx {
  struct transport* tp;
  int rank;
  int nranks;
  void* scratch; /* allocated once per communicator; the same size on every rank,
                    since algorithms derive message sizes from it */
  size_t scratch_bytes;
  const void** peer_send; /* [nranks], filled by coll_agree when tp->shares_address_space */
  void** peer_recv;       /* [nranks] */
};

/* Scratch bytes each communicator allocates (split by algorithms as they need). */
#define COLL_SCRATCH_BYTES ((size_t)4 << 20)

/* Step 0 of every collective: all ranks exchange a descriptor of their call and
 * check that kind, count, datatype, op, root and algorithm agree. On a mismatch
 * every rank returns gcclInvalidUsage with the same message naming the first
 * field and ranks that differ. Also publishes buffer addresses into ctx. */
gcclResult_t coll_agree(struct coll_ctx* ctx, const struct coll_args* args, enum coll_algo algo, uint64_t seq);

/* Runs the collective with the given algorithm (an algorithm the collective does
 * not have is gcclInternalError: the tuner never asks for one). */
gcclResult_t coll_run(struct coll_ctx* ctx, const struct coll_args* args, enum coll_algo algo);

/* The algorithm for a call: `forced` (from GCCL_ALGO) when the collective has it,
 * else chosen by size and rank count. Deterministic: the same on every rank. */
enum coll_algo tuner_choose(enum coll_kind kind, size_t bytes, int nranks, int shares_address_space,
                            enum coll_algo forced);
/* Parses "ring", "rhd", "tree", "direct" (case-insensitive); ALGO_AUTO otherwise. */
enum coll_algo algo_from_name(const char* name);
const char* algo_name(enum coll_algo algo);
const char* coll_kind_name(enum coll_kind kind);
/* Whether collective `kind` has algorithm `algo`. */
int coll_has_algo(enum coll_kind kind, enum coll_algo algo, int shares_address_space);

/* The algorithms. Each is a schedule over tp_* primitives (direct ones read
 * peers' buffers through ctx->peer_send / peer_recv and synchronise with
 * barriers). All handle count 0, in place and out of place, nranks 1..N. */
gcclResult_t allreduce_ring(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t allreduce_rhd(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t allreduce_tree(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t allreduce_direct(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t allgather_ring(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t allgather_direct(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t reducescatter_ring(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t reducescatter_direct(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t broadcast_tree(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t broadcast_direct(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t reduce_tree(struct coll_ctx* ctx, const struct coll_args* a);
gcclResult_t reduce_direct(struct coll_ctx* ctx, const struct coll_args* a);

/* Splits count elements into nranks near-equal chunks: chunk r starts at
 * *offset and holds *len elements (the first count % nranks chunks hold one more). */
static inline void coll_chunk(size_t count, int nranks, int r, size_t* offset, size_t* len) {
  size_t base = count / (size_t)nranks, extra = count % (size_t)nranks;
  *offset = (size_t)r * base + ((size_t)r < extra ? (size_t)r : extra);
  *len = base + ((size_t)r < extra ? 1 : 0);
}

#endif
