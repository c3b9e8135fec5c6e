/* nccl_setup.c — the NCCL transport's private communicators (nccl.h says why it
 * has them): `all`, split from the caller's communicator, and one per ordered
 * pair of ranks, split from `all` round by round and connected at setup; closed
 * (destroyed or aborted) in the same order at the end. Each setup step is
 * agreed on by every rank, so that all fail together. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "transport/nccl_internal.h"

/* ---- the pair communicators ------------------------------------------------------ */

/* This rank's partner in round `round` of a round-robin tournament of n (even)
 * players, by the circle method: player n-1 stays put, the others rotate; every
 * pair meets exactly once in n-1 rounds. A partner >= nranks is a bye. */
static int partner_of(int x, int round, int n) {
  int m = n - 1;
  if (x == m) return round;
  if (x == round) return m;
  return ((2 * round - x) % m + m) % m;
}

static int rounds_of(int nranks) {
  return nranks + (nranks & 1) - 1;
}

/* Where this rank keeps the communicator of round `round`, direction `dir` (0:
 * the pair's lower rank sends, 1: the higher), and the peer's rank in it; NULL
 * on a bye. Rounds and directions in order are the order in which every rank
 * makes, connects and destroys them: NCCL synchronises a communicator's ranks
 * in each of these, so a rank that went another way would wait for ever. */
static ncclComm_t* pair_slot(struct nccl_tp* t, int round, int dir, int** peer_in_comm) {
  int me = t->base.rank, nranks = t->base.nranks;
  int peer = partner_of(me, round, nranks + (nranks & 1));
  if (peer >= nranks) return NULL;
  struct nt_peer* pe = &t->peers[peer];
  int sending = (dir == 0) == (me < peer);
  if (peer_in_comm) *peer_in_comm = sending ? &pe->send_to : &pe->recv_from;
  return sending ? &pe->send_comm : &pe->recv_comm;
}

void nccl_setup_close_comms(struct nccl_tp* t, int abort) {
  ncclResult_t (*fn)(ncclComm_t) = abort ? t->api->comm_abort : t->api->comm_destroy;
  for (int round = 0; round < rounds_of(t->base.nranks) && t->peers; round++)
    for (int dir = 0; dir < 2; dir++) {
      ncclComm_t* slot = pair_slot(t, round, dir, NULL);
      if (slot && *slot) fn(*slot);
      if (slot) *slot = NULL;
    }
  if (t->all) fn(t->all);
  t->all = NULL;
}

/* ---- setup ----------------------------------------------------------------------- */

/* One ncclCommSplit of parent with the transport's configuration. */
static gcclResult_t split(struct nccl_tp* t, ncclComm_t parent, int color, int key, ncclComm_t* out) {
  /* Blocking, so that every later call is synchronous; no shared resources,
   * which would serialise the pairs' kernels; few CTAs (NT_MAX_CTAS). */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  cfg.splitShare = 0;
  cfg.minCTAs = 1;
  cfg.maxCTAs = NT_MAX_CTAS;
  *out = NULL;
  /* NCCL writes the new communicator from a thread of its own when the parent is
   * non-blocking (the caller's may be): into a cell that outlives a timeout. */
  ncclComm_t* cell = calloc(1, sizeof *cell);
  if (!cell) return err_set(gcclSystemError, "out of memory splitting a communicator");
  ncclResult_t r = t->api->comm_split(parent, color, key, cell, &cfg);
  int64_t start = clock_now_ns();
  ncclComm_t made = NULL;
  while (r == ncclInProgress) {
    made = __atomic_load_n(cell, __ATOMIC_ACQUIRE);
    if (made && t->api->comm_get_async_error(made, &r) != ncclSuccess) r = ncclInternalError;
    if (r == ncclInProgress && clock_now_ns() - start >= t->timeout_ns) {
      GCCL_WARN("ncclCommSplit still running after %lld ms: abandoned", (long long)(t->timeout_ns / 1000000));
      return err_set(gcclTimeout, "ncclCommSplit did not finish within %lld ms (GCCL_TIMEOUT_MS)",
                     (long long)(t->timeout_ns / 1000000));
    }
    struct timespec nap = {0, NT_NAP_NS};
    nanosleep(&nap, NULL);
  }
  if (r != ncclSuccess) {
    if (made) t->api->comm_abort(made); /* a failed non-blocking split leaves it to the caller */
    free(cell);
    return nccl_fail(t->api, r, parent, "ncclCommSplit");
  }
  *out = *cell;
  free(cell);
  return gcclSuccess;
}

/* Every rank's `mine`, learnt by all: the first failure, or gcclSuccess. */
static gcclResult_t agree(struct nccl_tp* t, gcclResult_t mine, const char* step) {
  int32_t me = (int32_t)mine;
  int32_t* all = malloc((size_t)t->base.nranks * sizeof *all);
  if (!all) return err_set(gcclSystemError, "gcclCommInitNccl: out of memory for %d ranks", t->base.nranks);
  gcclResult_t res = nccl_tp_gather(t, &me, sizeof me, all, "the setup");
  for (int r = 0; r < t->base.nranks && res == gcclSuccess && mine == gcclSuccess; r++)
    if (all[r] != gcclSuccess)
      res = err_set(gcclSystemError, "gcclCommInitNccl: rank %d could not %s (%s)", r, step,
                    gcclGetErrorString((gcclResult_t)all[r]));
  free(all);
  return mine != gcclSuccess ? mine : res;
}

/* Two splits of `all` per round, in the common order: the pair's lower ->
 * higher communicator, then higher -> lower, each with its sender first. Every
 * split is made even after one failed, since the other ranks wait in each. */
static gcclResult_t split_pairs(struct nccl_tp* t) {
  int me = t->base.rank, n = t->base.nranks + (t->base.nranks & 1);
  gcclResult_t res = gcclSuccess;
  for (int round = 0; round < rounds_of(t->base.nranks); round++) {
    int peer = partner_of(me, round, n);
    for (int dir = 0; dir < 2; dir++) {
      int* peer_in_comm = NULL;
      ncclComm_t* slot = pair_slot(t, round, dir, &peer_in_comm);
      ncclComm_t bye = NULL;
      int sending = slot && slot == &t->peers[peer].send_comm;
      gcclResult_t r =
          split(t, t->all, slot ? (me < peer ? me : peer) : NCCL_SPLIT_NOCOLOR, sending ? 0 : 1, slot ? slot : &bye);
      if (r == gcclSuccess && slot) {
        int in_pair = 0;
        ncclResult_t nr = t->api->comm_user_rank(*slot, &in_pair);
        *peer_in_comm = 1 - in_pair;
        if (nr != ncclSuccess) r = nccl_fail(t->api, nr, *slot, "ncclCommUserRank");
      }
      if (res == gcclSuccess) res = r;
    }
  }
  return res;
}

/* A one-byte message each way on every pair, round by round, lower -> higher
 * first: NCCL connects a pair on its first message, which blocks the host until
 * the peer connects too, so it must happen here, in the same order everywhere
 * (and every round is run even after a failure: the partners wait in it). */
static gcclResult_t connect_pairs(struct nccl_tp* t) {
  int me = t->base.rank, n = t->base.nranks + (t->base.nranks & 1);
  gcclResult_t res = gcclSuccess;
  for (int round = 0; round < rounds_of(t->base.nranks); round++) {
    int peer = partner_of(me, round, n);
    for (int dir = 0; dir < 2; dir++) {
      ncclComm_t* slot = pair_slot(t, round, dir, NULL);
      if (!slot) continue;
      struct nt_peer* pe = &t->peers[peer];
      gcclResult_t r = slot == &pe->send_comm
                           ? nccl_wire_move(t, 1, t->small_in, 1, pe->send_to, pe->send_comm, pe->send_stream)
                           : nccl_wire_move(t, 0, pe->hdr, 1, pe->recv_from, pe->recv_comm, pe->recv_stream);
      if (res == gcclSuccess) res = r;
    }
  }
  if (res != gcclSuccess) return res;
  if (!nccl_tp_settle(t, deadline_after(t->timeout_ns, t->timeout_ns)))
    return err_set(gcclTimeout, "rank %d waited %lld ms for its peers to connect (GCCL_TIMEOUT_MS)", me,
                   (long long)(t->timeout_ns / 1000000));
  return nccl_tp_check_async(t);
}

/* What allgather_small, and so the agreement, needs. */
static gcclResult_t setup_gather(struct nccl_tp* t) {
  cudaError_t e = cudaStreamCreateWithFlags(&t->all_stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&t->copy_stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&t->all_ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return cuda_fail(e, "creating streams");
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = t->device;
  if ((e = cudaMemPoolCreate(&t->mem, &props)) != cudaSuccess) return cuda_fail(e, "creating a memory pool");
  t->have_mem = 1;
  uint64_t keep = UINT64_MAX; /* memory freed to the pool stays there for the next messages */
  if ((e = cudaMemPoolSetAttribute(t->mem, cudaMemPoolAttrReleaseThreshold, &keep)) != cudaSuccess)
    return cuda_fail(e, "configuring a memory pool");
  size_t n = (size_t)t->base.nranks;
  e = cudaMallocFromPoolAsync((void**)&t->scratch, TP_SMALL_MAX * (1 + n) + NT_HEADER_BYTES * n, t->mem,
                              t->copy_stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(t->copy_stream);
  if (e != cudaSuccess) return cuda_fail(e, "allocating device memory");
  t->small_in = t->scratch;
  t->small_out = t->scratch + TP_SMALL_MAX;
  for (size_t p = 0; p < n; p++) t->peers[p].hdr = t->scratch + TP_SMALL_MAX * (1 + n) + NT_HEADER_BYTES * p;
  return gcclSuccess;
}

static gcclResult_t setup_rest(struct nccl_tp* t) {
  GCCL_CHECK(nccl_wire_pool_grow(t, 32 + 4 * t->base.nranks)); /* linear algorithms post one request per peer */
  for (int p = 0; p < t->base.nranks; p++) {
    if (p == t->base.rank) continue;
    cudaError_t e = cudaStreamCreateWithFlags(&t->peers[p].send_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&t->peers[p].recv_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cuda_fail(e, "creating streams");
  }
  return gcclSuccess;
}

/* CUDA feeds a process's streams to the GPU through CUDA_DEVICE_MAX_CONNECTIONS
 * hardware queues (8 unless set, at most 32); streams that share a queue can
 * wait for each other's work, and the pair streams' kernels wait on peers. */
static void warn_queues(int nranks) {
  int streams = 2 * (nranks - 1) + 2;
  const char* env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  int queues = env ? atoi(env) : 8;
  if (streams > queues)
    GCCL_WARN(
        "NCCL transport: %d CUDA streams per GPU share %d hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): a "
        "receive waiting for one peer may hold up other messages; set CUDA_DEVICE_MAX_CONNECTIONS=32",
        streams, queues);
}

gcclResult_t nccl_setup(struct nccl_tp* t, ncclComm_t user, gcclResult_t mine) {
  warn_queues(t->base.nranks);
  int64_t start = clock_now_ns();
  GCCL_CHECK(split(t, user, 0, t->base.rank, &t->all));
  GCCL_CHECK(setup_gather(t)); /* without it this rank cannot agree: the others time out */
  gcclResult_t res = mine != gcclSuccess ? mine : setup_rest(t);
  GCCL_CHECK(agree(t, res, "set up its part of the communicator"));
  GCCL_CHECK(agree(t, split_pairs(t), "split the pair communicators"));
  GCCL_CHECK(agree(t, connect_pairs(t), "connect its pairs"));
  GCCL_INFO(LOG_INIT, "NCCL transport on device %d: %d pair communicators from %d splits in %.1f ms", t->device,
            2 * (t->base.nranks - 1), 1 + 2 * rounds_of(t->base.nranks), (clock_now_ns() - start) / 1e6);
  return gcclSuccess;
}
