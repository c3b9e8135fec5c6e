/* coll.h — collectives as schedules over transport primitives, and their dispatch. */
#ifndef GCCL_COLLECTIVES_COLL_H
#define GCCL_COLLECTIVES_COLL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../transport/transport.h"
#include "gccl.h"

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
 * until enqueue looks. */
static inline struct coll_args coll_call(enum coll_kind kind, const void* sendbuff, void* recvbuff, size_t count,
                                         gcclDataType_t dt, gcclRedOp_t op, int root) {
  struct coll_args a;
  memset(&a, 0, sizeof a);
  a.kind = kind;
  a.sendbuff = sendbuff;
  a.recvbuff = recvbuff;
  a.count = count;
  a.dt = dt;
  a.op = op;
  a.root = root;
  return a;
}

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
  /* Topology: ranks [k*local_size, (k+1)*local_size) form node k (the last node
   * may be smaller). GCCL_RANKS_PER_NODE, else nranks (one node). */
  int local_size;
  /* Grow-only workspace for frames (coll_workspace); sizes differ between ranks. */
  void* work;
  size_t work_bytes;
  struct hier_state* hier; /* hier.c's views and sub-contexts, made on first use */
};

/* Points *out at a workspace of at least `bytes` (64-byte aligned, pre-touched),
 * growing the communicator's workspace when needed; what it held is lost. */
gcclResult_t coll_workspace(struct coll_ctx* ctx, size_t bytes, void** out);
/* Frees the workspace (communicator destruction). */
void coll_workspace_free(struct coll_ctx* ctx);

/* Waits for *req if one is pending (>= 0) and marks it done (-1): for schedules
 * that keep one slot per peer, some of them unused. */
static inline gcclResult_t coll_wait(struct transport* tp, tp_req* req) {
  tp_req r = *req;
  *req = -1;
  return r < 0 ? gcclSuccess : tp->ops->wait(tp, r);
}

/* Rounds a byte count up to a multiple of 64, for laying frames out in a workspace. */
static inline size_t coll_align64(size_t bytes) {
  return (bytes + 63) & ~(size_t)63;
}

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

/* Runs the collective with the given algorithm (an algorithm the collective does
 * not have is gcclInternalError: the tuner never asks for one). */
gcclResult_t coll_run(struct coll_ctx* ctx, const struct coll_args* args, enum coll_algo algo);

/* The algorithm for a call: `forced` (from GCCL_ALGO) when the collective has it,
 * else chosen by size, rank count and topology (local_size ranks per node; pass
 * nranks for one node). Deterministic: the same on every rank. */
enum coll_algo tuner_choose(enum coll_kind kind, size_t bytes, int nranks, int local_size, int shares_address_space,
                            enum coll_algo forced);
/* The same for a call with a compressor of spec `spec` on a tensor of `count`
 * elements: by codec, rank count, topology (local_size ranks per node), for fp16
 * and bf16 by count, and for top-k by density and `global`. */
struct codec_spec;
enum coll_algo tuner_choose_compressed(enum coll_kind kind, const struct codec_spec* spec, size_t count, int nranks,
                                       int local_size, enum coll_algo forced);
/* Parses an algorithm's name (algo_name's, case-insensitive); ALGO_AUTO otherwise. */
enum coll_algo algo_from_name(const char* name);
const char* algo_name(enum coll_algo algo);
const char* coll_kind_name(enum coll_kind kind);
/* Whether collective `kind` has algorithm `algo`, dense or (compressed != 0) with
 * a compressor. */
int coll_has_algo(enum coll_kind kind, enum coll_algo algo, int shares_address_space);
int coll_has_compressed_algo(enum coll_kind kind, enum coll_algo algo);

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
/* hier.c: dense, or compressed on the inter-node step when a->comp is set. */
gcclResult_t allreduce_hier(struct coll_ctx* ctx, const struct coll_args* a);
/* Frees ctx->hier (communicator destruction). */
void hier_state_free(struct hier_state* state);

/* Compressed (a->comp set; op sum or avg, divided afterwards by coll_run). They
 * stage the compressor's residual for the whole tensor and leave commit or
 * abort to the caller. */
gcclResult_t allreduce_sra(struct coll_ctx* ctx, const struct coll_args* a);          /* sra.c */
gcclResult_t reducescatter_sra(struct coll_ctx* ctx, const struct coll_args* a);      /* sra.c */
gcclResult_t allgather_frames(struct coll_ctx* ctx, const struct coll_args* a);       /* sra.c */
gcclResult_t allreduce_ring_requant(struct coll_ctx* ctx, const struct coll_args* a); /* ring_requant.c */
/* Elements per segment of ring-requant's frames (at most 4 segments a chunk); tests
 * shrink it to cut small tensors into segments. */
extern size_t ring_requant_segment_elems;
gcclResult_t allreduce_sparse_ag(struct coll_ctx* ctx, const struct coll_args* a); /* sparse.c */
gcclResult_t allreduce_sparse_sr(struct coll_ctx* ctx, const struct coll_args* a); /* sparse.c */
gcclResult_t allreduce_randk(struct coll_ctx* ctx, const struct coll_args* a);     /* randk_allreduce.c */

/* The steps of the one-frame schedules (sparse-ag, sparse-sr, randk, the
 * compressed allgather) that touch the caller's buffers, on the GPU when
 * a->device_send / a->device_recv are set (one_frame.c):
 *  - the rank's whole input as one fp32 frame with error feedback (EF_ADD, stage
 *    0) into frame[0, cap);
 *  - the fp32 output: elements [at, at + n) cleared (out: recvbuff's, or an fp32
 *    sum the schedule keeps for other dtypes), a validated frame of n elements
 *    added into them, or written there as frame_decode_f32_to does. */
gcclResult_t coll_encode_input(const struct coll_args* a, void* frame, size_t cap, size_t* frame_bytes);
gcclResult_t coll_output_clear(const struct coll_args* a, float* out, size_t n);
gcclResult_t coll_output_add(const struct coll_args* a, const void* frame, size_t frame_bytes, float* out, size_t n);
gcclResult_t coll_output_frame(const struct coll_args* a, const void* frame, size_t frame_bytes, size_t at, size_t n,
                               float* stage);

/* Splits count elements into nranks near-equal chunks: chunk r starts at
 * *offset and holds *len elements (the first count % nranks chunks hold one more). */
static inline void coll_chunk(size_t count, int nranks, int r, size_t* offset, size_t* len) {
  size_t base = count / (size_t)nranks, extra = count % (size_t)nranks;
  *offset = (size_t)r * base + ((size_t)r < extra ? (size_t)r : extra);
  *len = base + ((size_t)r < extra ? 1 : 0);
}

#endif
