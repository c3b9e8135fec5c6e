/* hier.c — hierarchical allreduce: reduce inside each node, allreduce across
 * nodes, gather inside each node. Dense, or compressed on the inter-node step.
 *
 * Nodes: ranks [k*L, (k+1)*L) form node k (L = ctx->local_size); every node has L
 * ranks except perhaps the last, of S <= L. The tensor is cut into L shares by the
 * FULL node size (share j = coll_chunk(count, L, j)). In node k of size Lk, share j
 * belongs to local rank j % Lk: local rank i of a full node owns share i, and
 * local rank i of a short node owns shares i, i+S, i+2S, ... So every node owns
 * every share exactly once, and share j's inter-node group holds one rank per
 * node: members[k] = k*L + j % Lk.
 *
 * p = 7, L = 3 (nodes {0,1,2} {3,4,5} {6}; shares s0 s1 s2):
 *
 *   step 1 (in each node)    step 2 (across nodes)       step 3 (in each node)
 *   r0 <- s0 of r1,r2        s0: r0 r3 r6 allreduce      r0 -> s0 to r1,r2 ...
 *   r1 <- s1 of r0,r2        s1: r1 r4 r6 allreduce      r6 keeps s0 s1 s2
 *   r2 <- s2 of r0,r1        s2: r2 r5 r6 allreduce
 *   r6 owns s0 s1 s2 alone   (r6 runs its three groups one after the other)
 *
 * Step 1 reduces each share at its owner in the fixed order of local ranks 0, 1,
 * ..., Lk-1, so a node's share sum does not depend on timing. Step 2 is a dense
 * allreduce (tuner's choice) of the share over the group's transport view
 * (transport/subset.h), or with a compressor the flat compressed algorithm the
 * tuner picks for one rank per node, run on the share with comp_first at the
 * share's offset; the compressor's residual of every element outside this rank's
 * shares is staged unchanged, so the whole tensor is staged exactly once and the
 * residual of a share lives at its owner (its node's error feedback). The node's
 * share sums go into the compressed step as fp32, which is what its frames carry.
 * Every rank of a share group ends step 2 with the same bits, and step 3 only
 * copies them, so every rank of the communicator holds the same result.
 *
 * No deadlock from a short node's rank serving several groups in turn: every
 * other member of a group belongs to that group only, and a short-node rank runs
 * its groups in increasing share order. No two groups share a pair of ranks, and
 * the steps run one after the other, so per-pair message order stays matched.
 *
 * Degenerate layouts: one rank per node (L = 1, or p = 1) is the flat allreduce
 * the tuner picks; on one node (L = p) nothing crosses a node boundary, so step 2
 * does nothing and a compressor compresses nothing (its residual stays as it was).
 *
 * Memory: the owner's share sums plus two receive buffers of one share (and, for
 * a compressed non-fp32 tensor, one fp32 share for conversion) in the workspace. */
#include <stdlib.h>
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "collectives/tuner.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "transport/subset.h"

/* One share this rank owns and its inter-node group. */
struct hier_share {
  int share;
  struct transport* tp; /* view of the communicator's transport on the group */
  struct coll_ctx ctx;  /* the group's context: rank = node index */
};

/* Per communicator: the node layout and the groups of this rank's shares. */
struct hier_state {
  int L, nodes, local, node_first, node_size;
  tp_req* reqs; /* [3 * L]: steps 1 and 3 post fewer requests than that */
  int nshares;
  struct hier_share shares[];
};

void hier_state_free(struct hier_state* st) {
  if (!st) return;
  for (int k = 0; k < st->nshares; k++) {
    if (st->shares[k].tp) tp_destroy(st->shares[k].tp);
    coll_workspace_free(&st->shares[k].ctx);
  }
  free(st->reqs);
  free(st);
}

static int node_size_of(int node, int L, int p) {
  int left = p - node * L;
  return left < L ? left : L;
}

/* Builds the layout and one group view per owned share. */
static gcclResult_t hier_state_make(const struct coll_ctx* ctx, struct hier_state** out) {
  int p = ctx->nranks, L = ctx->local_size; /* 1 < L <= p */
  int node = ctx->rank / L, node_size = node_size_of(node, L, p), local = ctx->rank - node * L;
  int nshares = (L - local + node_size - 1) / node_size; /* shares local, local + Lk, ... below L */
  int nodes = (p + L - 1) / L;
  struct hier_state* st = calloc(1, sizeof *st + (size_t)nshares * sizeof(struct hier_share));
  int* members = malloc((size_t)nodes * sizeof *members);
  if (st) st->reqs = malloc(3 * (size_t)L * sizeof *st->reqs);
  if (!st || !members || !st->reqs) {
    free(members);
    hier_state_free(st);
    return err_set(gcclSystemError, "out of memory for hier's groups");
  }
  st->L = L;
  st->nodes = nodes;
  st->local = local;
  st->node_first = node * L;
  st->node_size = node_size;
  st->nshares = nshares;
  gcclResult_t res = gcclSuccess;
  for (int k = 0; k < nshares; k++) {
    struct hier_share* sh = &st->shares[k];
    sh->share = local + k * node_size;
    for (int n = 0; n < nodes; n++) members[n] = n * L + sh->share % node_size_of(n, L, p);
    res = subset_transport_create(&sh->tp, ctx->tp, members, nodes);
    if (res != gcclSuccess) break;
    sh->ctx = (struct coll_ctx){.tp = sh->tp,
                                .rank = sh->tp->rank,
                                .nranks = nodes,
                                .scratch = ctx->scratch,
                                .scratch_bytes = ctx->scratch_bytes,
                                .local_size = nodes,
                                .net = ctx->net};
  }
  free(members);
  if (res != gcclSuccess) {
    hier_state_free(st);
    return res;
  }
  *out = st;
  return gcclSuccess;
}

/* The owner of share j inside this rank's node (a parent rank). */
static int share_owner(const struct hier_state* st, int j) {
  return st->node_first + j % st->node_size;
}

/* The i-th rank of this node other than this one, in local-rank order. */
static int node_peer(const struct hier_state* st, int i) {
  return st->node_first + (i < st->local ? i : i + 1);
}

/* acc = src (first) or acc op src, for n elements: acc holds sum_dt, src dt.
 * Only the compressed path has sum_dt != dt (fp32 sums of a narrower or wider
 * tensor); it converts src through tmp. */
static void accumulate(void* acc, gcclDataType_t sum_dt, const void* src, gcclDataType_t dt, size_t n, gcclRedOp_t op,
                       int first, float* tmp) {
  if (sum_dt == dt) {
    if (first)
      memcpy(acc, src, n * dtype_size(dt));
    else
      reduce_2(acc, acc, src, n, dt, op);
    return;
  }
  if (first) {
    f32_load(acc, src, dt, n);
    return;
  }
  f32_load(tmp, src, dt, n);
  reduce_2(acc, acc, tmp, n, gcclFloat32, gcclSum);
}

/* The buffers of one call, laid out in the workspace. */
struct hier_bufs {
  char* sums; /* [nshares] share sums, sum_dt, `stride` bytes apart */
  size_t stride;
  char* recv[2]; /* step 1's receive buffers, one share of the tensor's dtype each */
  float* tmp;    /* one fp32 share, when sum_dt != dt */
};

static void hier_layout(struct prim_carver* c, struct hier_bufs* b, int nshares, size_t sum_bytes, size_t recv_bytes,
                        size_t tmp_n) {
  b->stride = prim_align64(sum_bytes);
  b->sums = prim_carve(c, (size_t)nshares * b->stride);
  b->recv[0] = prim_carve(c, recv_bytes);
  b->recv[1] = prim_carve(c, recv_bytes);
  b->tmp = PRIM_CARVE(c, float, tmp_n);
}

/* Step 1: every node member sends each share to its owner; the owner reduces its
 * shares over the node's ranks in local-rank order, receiving the next
 * contribution while it adds the current one. */
static gcclResult_t node_reduce_scatter(struct coll_ctx* ctx, struct hier_state* st, const struct coll_args* a,
                                        gcclDataType_t sum_dt, gcclRedOp_t op, const struct hier_bufs* b) {
  struct transport* tp = ctx->tp;
  size_t esz = dtype_size(a->dt);
  const char* in = a->sendbuff;
  int nsend = 0;
  for (int j = 0; j < st->L; j++) {
    int owner = share_owner(st, j);
    if (owner == ctx->rank) continue;
    size_t off, len;
    coll_chunk(a->count, st->L, j, &off, &len);
    GCCL_CHECK(prim_post_send(tp, owner, in + off * esz, len * esz, &st->reqs[nsend++]));
  }
  for (int k = 0; k < st->nshares; k++) {
    size_t off, len;
    coll_chunk(a->count, st->L, st->shares[k].share, &off, &len);
    if (!len) continue;
    char* acc = b->sums + (size_t)k * b->stride;
    /* the i-th receive (i = 0 .. npeers-1) goes into recv[i % 2] */
    int npeers = st->node_size - 1, posted = 0, done = 0;
    tp_req rreq[2];
    for (; posted < npeers && posted < 2; posted++)
      GCCL_CHECK(prim_post_recv(tp, node_peer(st, posted), b->recv[posted % 2], len * esz, &rreq[posted % 2]));
    for (int s = 0; s < st->node_size; s++) {
      if (s == st->local) {
        accumulate(acc, sum_dt, in + off * esz, a->dt, len, op, s == 0, b->tmp);
        continue;
      }
      int slot = done % 2;
      GCCL_CHECK(prim_wait(tp, &rreq[slot]));
      accumulate(acc, sum_dt, b->recv[slot], a->dt, len, op, s == 0, b->tmp);
      done++;
      if (posted < npeers) {
        GCCL_CHECK(prim_post_recv(tp, node_peer(st, posted), b->recv[slot], len * esz, &rreq[slot]));
        posted++;
      }
    }
  }
  return prim_wait_all(tp, st->reqs, (size_t)nsend);
}

/* Step 2 for the dense path: an allreduce of each owned share across the nodes. */
static gcclResult_t inter_dense(struct hier_state* st, const struct coll_args* a, gcclRedOp_t op,
                                const struct hier_bufs* b) {
  if (st->nodes == 1) return gcclSuccess; /* the node's sums are the result */
  for (int k = 0; k < st->nshares; k++) {
    struct hier_share* sh = &st->shares[k];
    size_t off, len;
    coll_chunk(a->count, st->L, sh->share, &off, &len);
    char* share = b->sums + (size_t)k * b->stride;
    struct coll_args sub = {
        .kind = COLL_ALLREDUCE, .sendbuff = share, .recvbuff = share, .count = len, .dt = a->dt, .op = op};
    enum coll_algo algo =
        tuner_choose(COLL_ALLREDUCE, len * dtype_size(a->dt), st->nodes, 1, 0, &sh->ctx.net, ALGO_AUTO);
    GCCL_CHECK(coll_run(&sh->ctx, &sub, algo));
  }
  return gcclSuccess;
}

/* Step 2 with a compressor: the flat compressed allreduce of each owned share's
 * fp32 sums, then the residual of every other element staged unchanged. On one
 * node nothing crosses a node boundary: nothing is compressed and the whole
 * residual stays for a later call. */
static gcclResult_t inter_compressed(struct hier_state* st, const struct coll_args* a, const struct hier_bufs* b) {
  struct gcclCompressor* c = a->comp;
  int next_owned = 0;
  for (int j = 0; j < st->L; j++) {
    size_t off, len;
    coll_chunk(a->count, st->L, j, &off, &len);
    int owned = next_owned < st->nshares && st->shares[next_owned].share == j;
    if (owned && st->nodes > 1) {
      struct hier_share* sh = &st->shares[next_owned];
      float* share = (float*)(b->sums + (size_t)next_owned * b->stride);
      struct coll_args sub = {.kind = COLL_ALLREDUCE,
                              .sendbuff = share,
                              .recvbuff = share,
                              .count = len,
                              .dt = gcclFloat32,
                              .op = gcclSum,
                              .comp = c,
                              .comp_first = a->comp_first + off};
      enum coll_algo algo = tuner_choose_compressed(COLL_ALLREDUCE, &c->spec, len, st->nodes, 1, ALGO_AUTO);
      GCCL_CHECK(coll_run(&sh->ctx, &sub, algo));
    } else {
      GCCL_CHECK(compressor_stage_keep(c, a->comp_first + off, len));
    }
    next_owned += owned;
  }
  return gcclSuccess;
}

/* One rank per node: the flat allreduce the tuner picks, summing (gcclAvg's
 * division is left to the outer coll_run). */
static gcclResult_t allreduce_flat(struct coll_ctx* ctx, const struct coll_args* a, gcclRedOp_t op) {
  struct coll_args sum = *a;
  sum.op = op;
  size_t bytes = a->count * dtype_size(a->dt);
  enum coll_algo algo =
      a->comp ? tuner_choose_compressed(COLL_ALLREDUCE, &a->comp->spec, a->count, ctx->nranks, ctx->nranks, ALGO_AUTO)
              : tuner_choose(COLL_ALLREDUCE, bytes, ctx->nranks, ctx->nranks,
                             ctx->tp->shares_address_space ? TUNER_SHARED_ADDRESS : 0u, &ctx->net, ALGO_AUTO);
  return coll_run(ctx, &sum, algo);
}

/* Step 3: each owner writes its shares into recvbuff (converted from fp32 sums on
 * the compressed path) and sends them to the other node members, which receive
 * each share from its owner straight into place. */
static gcclResult_t node_allgather(struct coll_ctx* ctx, struct hier_state* st, const struct coll_args* a,
                                   gcclDataType_t sum_dt, const struct hier_bufs* b) {
  struct transport* tp = ctx->tp;
  size_t esz = dtype_size(a->dt);
  char* out = a->recvbuff;
  int nreq = 0;
  for (int k = 0; k < st->nshares; k++) {
    size_t off, len;
    coll_chunk(a->count, st->L, st->shares[k].share, &off, &len);
    const char* sum = b->sums + (size_t)k * b->stride;
    if (sum_dt == a->dt)
      memcpy(out + off * esz, sum, len * esz);
    else
      f32_store(out + off * esz, a->dt, (const float*)sum, len);
  }
  /* per pair, sends and receives both go in increasing share order */
  for (int j = 0; j < st->L; j++) {
    size_t off, len;
    coll_chunk(a->count, st->L, j, &off, &len);
    int owner = share_owner(st, j);
    if (owner != ctx->rank) {
      GCCL_CHECK(prim_post_recv(tp, owner, out + off * esz, len * esz, &st->reqs[nreq++]));
      continue;
    }
    for (int s = 0; s < st->node_size; s++)
      if (st->node_first + s != ctx->rank)
        GCCL_CHECK(prim_post_send(tp, st->node_first + s, out + off * esz, len * esz, &st->reqs[nreq++]));
  }
  return prim_wait_all(tp, st->reqs, (size_t)nreq);
}

gcclResult_t allreduce_hier(struct coll_ctx* ctx, const struct coll_args* a) {
  /* gcclAvg sums here; coll_run divides once by the communicator's size */
  gcclRedOp_t op = a->op == gcclAvg ? gcclSum : a->op;
  if (ctx->local_size == 1) return allreduce_flat(ctx, a, op);
  if (!ctx->hier) GCCL_CHECK(hier_state_make(ctx, &ctx->hier));
  struct hier_state* st = ctx->hier;
  gcclDataType_t sum_dt = a->comp ? gcclFloat32 : a->dt;
  size_t first, longest; /* share 0 is the longest */
  coll_chunk(a->count, st->L, 0, &first, &longest);
  size_t sum_bytes = longest * dtype_size(sum_dt), recv_bytes = longest * dtype_size(a->dt);
  size_t tmp_n = sum_dt != a->dt ? longest : 0;
  struct hier_bufs b;
  struct prim_carver carver = {0};
  hier_layout(&carver, &b, st->nshares, sum_bytes, recv_bytes, tmp_n);
  GCCL_CHECK(prim_carve_workspace(ctx, &carver));
  hier_layout(&carver, &b, st->nshares, sum_bytes, recv_bytes, tmp_n);

  GCCL_CHECK(node_reduce_scatter(ctx, st, a, sum_dt, op, &b));
  GCCL_CHECK(a->comp ? inter_compressed(st, a, &b) : inter_dense(st, a, op, &b));
  return node_allgather(ctx, st, a, sum_dt, &b);
}
