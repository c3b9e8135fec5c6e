/* coll.h — a collective call as the layers above see it: its kind, algorithm,
 * arguments and context, and the entry points of dispatch.c and agree.c. The
 * algorithms are in algorithms.h, the choice of one in tuner.h, what they are
 * made of in prims.h. */
#ifndef GCCL_COLLECTIVES_COLL_H
#define GCCL_COLLECTIVES_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "gccl.h"
#include "transport/transport.h"

enum coll_kind { COLL_ALLREDUCE = 0, COLL_ALLGATHER, COLL_REDUCESCATTER, COLL_BROADCAST, COLL_REDUCE, COLL_NKINDS };

/* Dense algorithms first; the compressed ones (sra, ring-requant, sparse-ag,
 * sparse-sr, randk) run only when the call carries a compressor; hier runs both. */
enum coll_algo {
  ALGO_RING = 0,
  ALGO_RHD,
  ALGO_TREE,
  ALGO_DIRECT,
  ALGO_HIER,
  ALGO_SRA,
  ALGO_RING_REQUANT,
  ALGO_SPARSE_AG,
  ALGO_SPARSE_SR,
  ALGO_RANDK,
  ALGO_POWERSGD,
  ALGO_IN_BAND, /* a small dense allreduce riding its own agreement (coll_agree_allreduce) */
  ALGO_SPLIT,   /* a dense allreduce's chunks straight to their owners, the sums straight back (split.c) */
  ALGO_COUNT,
  ALGO_AUTO = -1
};

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
  /* Compressed collectives: the caller's compressor (its count is the call's
   * tensor: count, sendcount, or nranks * recvcount); NULL for dense calls. */
  struct gcclCompressor* comp;
  size_t comp_first; /* element of the compressor's tensor where this call's data starts
                        (0 for a user's call; a share of it inside hier) */
  unsigned device;   /* DEVICE_* (device/device.h): buffers in CUDA device memory, staged */
  void* cuda_stream; /* the cudaStream_t those buffers are ordered on (NULL: the default) */
  /* Staged calls whose codec work runs on the GPU (device/device.h decides): the
   * caller's device buffers, which the one-frame steps below read and write
   * instead of sendbuff and recvbuff; NULL otherwise. */
  const void* device_send;
  void* device_recv;
};

/* What a call does with its buffers on `rank` of nranks: the bytes its send and
 * receive buffers span (count * size must not overflow: argcheck checks), and
 * whether it reads the send buffer (broadcast: the root only) and writes the
 * receive buffer (reduce: the root only). */
struct coll_extent {
  size_t send_bytes, recv_bytes;
  int reads_send, writes_recv;
};
static inline struct coll_extent coll_extent_of(const struct coll_args* a, size_t elem_size, int rank, int nranks) {
  size_t bytes = a->count * elem_size, p = (size_t)nranks;
  struct coll_extent e = {a->kind == COLL_REDUCESCATTER ? bytes * p : bytes,
                          a->kind == COLL_ALLGATHER ? bytes * p : bytes, a->kind != COLL_BROADCAST || rank == a->root,
                          a->kind != COLL_REDUCE || rank == a->root};
  return e;
}

/* A user's call as the public functions make it: no compressor yet, host buffers
 * until enqueue looks. It sets every field (core/collectives.c asserts that
 * device_recv is the last): a new field must be added here. */
static inline struct coll_args coll_call(enum coll_kind kind, const void* sendbuff, void* recvbuff, size_t count,
                                         gcclDataType_t dt, gcclRedOp_t op, int root) {
  /* Field by field, no memset: zeroing it whole (rep stos) and then copying it
   * stalled on store forwarding, a fifth of a one-rank call's 0.12 us. */
  struct coll_args a;
  a.kind = kind;
  a.sendbuff = sendbuff;
  a.recvbuff = recvbuff;
  a.count = count;
  a.dt = dt;
  a.op = op;
  a.root = root;
  a.comp = NULL;
  a.comp_first = 0;
  a.device = 0;
  a.cuda_stream = NULL;
  a.device_send = NULL;
  a.device_recv = NULL;
  return a;
}

/* The crossovers of a dense allreduce across nodes, from what a communicator
 * measured of the network between them at creation (tuner_net_from_link); a zero
 * field keeps the tuner's default, which was tuned on shared memory. */
struct tuner_net {
  size_t rhd_max_bytes;     /* rhd up to here, the ring above */
  size_t halving_min_bytes; /* the in-band allreduce halves above here (at q = 2, past the eager limit only) */
  size_t in_band_max_bytes; /* p not a power of two: in band up to here, split above (core/in_band_limit.c) */
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
  const void** peer_send; /* [nranks], filled by coll_agree when tp->shares_address_space (on a board: its posts) */
  void** peer_recv;       /* [nranks] */
  /* Topology: ranks [k*local_size, (k+1)*local_size) form node k (the last node
   * may be smaller). GCCL_RANKS_PER_NODE, else nranks (one node). */
  int local_size;
  /* Grow-only workspace for frames (coll_workspace); sizes differ between ranks. */
  void* work;
  size_t work_bytes;
  struct hier_state* hier; /* hier.c's views and sub-contexts, made on first use */
  struct tuner_net net;    /* zeros unless the ranks span nodes of a network */
  /* allreduce_split's first round, posted during the agreement (split.h): its
   * requests by peer [nranks], pending while split_early_posted. */
  tp_req* split_early;
  int split_early_posted;
};

/* Points *out at a workspace of at least `bytes` (64-byte aligned, pre-touched),
 * growing the communicator's workspace when needed; what it held is lost. */
gcclResult_t coll_workspace(struct coll_ctx* ctx, size_t bytes, void** out);
/* Frees the workspace (communicator destruction). */
void coll_workspace_free(struct coll_ctx* ctx);

/* Scratch bytes each communicator allocates (split by algorithms as they need:
 * the ring's, rhd's and tree's segments are half of it or less). */
#define COLL_SCRATCH_BYTES ((size_t)4 << 20)
/* ... and an MPI communicator whose ranks span nodes. Every message there pays a
 * handshake (Open MPI's rendezvous) whose answer queues behind the data already
 * on the link, so segments must be long: on the 1 Gbit/s test bed gccl's dense
 * ring ran at 0.88x Open MPI's ring with 2 MiB segments, 0.95x with 8 MiB and
 * 0.95-1.01x with 16 MiB (BENCHMARKS.md). */
#define COLL_SCRATCH_BYTES_NETWORK ((size_t)32 << 20)

/* Step 0 of every collective: all ranks exchange a descriptor of their call and
 * check that kind, count, datatype, op, root and algorithm agree. On a mismatch
 * every rank returns gcclInvalidUsage with the same message naming the first
 * field and ranks that differ. Also publishes buffer addresses into ctx. */
gcclResult_t coll_agree(struct coll_ctx* ctx, const struct coll_args* args, enum coll_algo algo, uint64_t seq);

/* A dense allreduce of at most IN_BAND_MAX_BYTES (collectives/in_band.h) on a
 * transport that agrees in band: agreement and data in one exchange, the whole
 * call (ALGO_IN_BAND). On a mismatch, coll_agree's error and an untouched receive
 * buffer on every rank. */
gcclResult_t coll_agree_allreduce(struct coll_ctx* ctx, const struct coll_args* args, uint64_t seq);

/* Runs the collective with the given algorithm (an algorithm the collective does
 * not have is gcclInternalError: the tuner never asks for one). */
gcclResult_t coll_run(struct coll_ctx* ctx, const struct coll_args* args, enum coll_algo algo);

/* Parses an algorithm's name (algo_name's, case-insensitive); ALGO_AUTO otherwise. */
enum coll_algo algo_from_name(const char* name);
const char* algo_name(enum coll_algo algo);
const char* coll_kind_name(enum coll_kind kind);
/* Whether collective `kind` has algorithm `algo`, dense or (compressed != 0) with
 * a compressor. */
int coll_has_algo(enum coll_kind kind, enum coll_algo algo, int shares_address_space);
int coll_has_compressed_algo(enum coll_kind kind, enum coll_algo algo);

/* The largest power of two up to p (p >= 1): the ranks a halving-doubling
 * schedule pairs; the other p - q fold into them first. */
static inline int coll_pow2_floor(int p) {
  int q = 1;
  while (q <= p / 2) q *= 2;
  return q;
}

/* Splits count elements into nranks near-equal chunks: chunk r starts at
 * *offset and holds *len elements (the first count % nranks chunks hold one more). */
static inline void coll_chunk(size_t count, int nranks, int r, size_t* offset, size_t* len) {
  size_t base = count / (size_t)nranks, extra = count % (size_t)nranks;
  *offset = (size_t)r * base + ((size_t)r < extra ? (size_t)r : extra);
  *len = base + ((size_t)r < extra ? 1 : 0);
}

/* Segment j, of at most seg elements, of a piece of len elements starting at
 * element `at`: *off its first element, *n its length (0 past the piece's end). */
static inline void coll_segment(size_t at, size_t len, size_t seg, size_t j, size_t* off, size_t* n) {
  size_t start = j * seg;
  *off = at + start;
  *n = start >= len ? 0 : (len - start < seg ? len - start : seg);
}

#endif
