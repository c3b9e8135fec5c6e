/* comm.c — communicators: ids, creation, destruction, abort, queries, errors.
 * A call on a communicator runs in execute.c. */
#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "collectives/algorithms.h"
#include "common/arena.h"
#include "common/env.h"
#include "common/log.h"
#include "common/result.h"
#include "core/argcheck.h"
#include "core/dropin.h"
#include "device/device.h"
#include "transport/local.h"
#include "transport/sim.h"

#define DEFAULT_TIMEOUT_MS 300000

gcclResult_t comm_record_error(gcclComm_t comm, gcclResult_t result) {
  if (handle_live(HANDLE_COMM, comm)) {
    pthread_mutex_lock(&comm->mu);
    snprintf(comm->last_error, sizeof comm->last_error, "%s", err_last());
    pthread_mutex_unlock(&comm->mu);
  }
  return result;
}

const char* gcclGetLastError(gcclComm_t comm) {
  if (handle_live(HANDLE_COMM, comm)) return comm->last_error;
  return err_last();
}

gcclResult_t gcclGetVersion(int* version) {
  GCCL_CHECK(argcheck_not_null(version, "gcclGetVersion", "version"));
  *version = GCCL_VERSION_CODE;
  return gcclSuccess;
}

/* ---- unique ids ------------------------------------------------------------- */

static const char ID_MAGIC[8] = "gcclID01";

gcclResult_t gcclGetUniqueId(gcclUniqueId* id) {
  GCCL_CHECK(argcheck_not_null(id, "gcclGetUniqueId", "id"));
  memset(id, 0, sizeof *id);
  memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
  /* 16 random bytes and the pid make ids of concurrent jobs distinct. */
  if (getrandom(id->internal + 8, 16, 0) != 16) {
    uint64_t t = (uint64_t)clock(), p = (uint64_t)getpid();
    memcpy(id->internal + 8, &t, 8);
    memcpy(id->internal + 16, &p, 8);
  }
  int pid = getpid();
  memcpy(id->internal + 24, &pid, sizeof pid);
  return gcclSuccess;
}

int comm_unique_id_valid(const gcclUniqueId* id) {
  return memcmp(id->internal, ID_MAGIC, sizeof ID_MAGIC) == 0;
}

/* ---- creation ------------------------------------------------------------------ */

gcclResult_t comm_alloc(gcclComm_t* out, int rank, int nranks, int node_size, int network) {
  *out = NULL;
  int64_t per_node = env_int("GCCL_RANKS_PER_NODE", 0);
  int local_size = (node_size > 0 && node_size < nranks) ? node_size : nranks;
  if (per_node > 0) local_size = per_node < nranks ? (int)per_node : nranks;
  size_t scratch_bytes = network && local_size < nranks ? COLL_SCRATCH_BYTES_NETWORK : COLL_SCRATCH_BYTES;
  gcclComm_t c = calloc(1, sizeof *c);
  if (!c) return err_set(gcclSystemError, "out of memory allocating a communicator");
  c->ctx.peer_send = calloc((size_t)nranks, sizeof *c->ctx.peer_send);
  c->ctx.peer_recv = calloc((size_t)nranks, sizeof *c->ctx.peer_recv);
  c->ctx.split_early = calloc((size_t)nranks, sizeof *c->ctx.split_early);
  gcclResult_t res = arena_alloc(&c->ctx.scratch, scratch_bytes);
  if (res != gcclSuccess || !c->ctx.peer_send || !c->ctx.peer_recv || !c->ctx.split_early) {
    free(c->ctx.peer_send);
    free(c->ctx.peer_recv);
    free(c->ctx.split_early);
    arena_free(c->ctx.scratch, scratch_bytes);
    free(c);
    return res != gcclSuccess ? res : err_set(gcclSystemError, "out of memory allocating a communicator");
  }
  c->rank = rank;
  c->nranks = nranks;
  c->ctx.rank = rank;
  c->ctx.nranks = nranks;
  c->ctx.scratch_bytes = scratch_bytes;
  c->ctx.local_size = local_size;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->idle, NULL);

  int64_t t = env_int("GCCL_TIMEOUT_MS", DEFAULT_TIMEOUT_MS);
  c->timeout_ms = t > 0 ? t : INT64_MAX / 1000000; /* 0: wait for ever */
  const char* algo = env_str("GCCL_ALGO");
  c->forced_algo = algo_from_name(algo);
  if (algo && c->forced_algo == ALGO_AUTO)
    GCCL_WARN("ignoring GCCL_ALGO=%s: not an algorithm's name (README lists them)", algo);
  res = dropin_create(&c->dropin, nranks, c->ctx.local_size, !network);
  if (res == gcclSuccess) res = comm_faults_read(c);
  if (res == gcclSuccess) res = handle_add(HANDLE_COMM, c);
  if (res != gcclSuccess) {
    comm_free(c);
    return res;
  }
  *out = c;
  return gcclSuccess;
}

void comm_free(gcclComm_t c) {
  if (c->group_stream) gcclStreamDestroy(c->group_stream);
  device_stage_free(c->device_stage);
  if (c->tp) tp_destroy(c->tp);
  arena_free(c->ctx.scratch, c->ctx.scratch_bytes);
  coll_workspace_free(&c->ctx);
  dropin_destroy(c->dropin);
  free(c->faults);
  hier_state_free(c->ctx.hier);
  free(c->ctx.peer_send);
  free(c->ctx.peer_recv);
  free(c->ctx.split_early);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->idle);
  handle_retire(HANDLE_COMM, c);
}

gcclResult_t gcclCommInitRank(gcclComm_t* comm, int nranks, gcclUniqueId id, int rank) {
  log_init();
  GCCL_CHECK(argcheck_not_null(comm, "gcclCommInitRank", "comm"));
  *comm = NULL;
  GCCL_CHECK(argcheck_init_rank(nranks, &id, rank));
  gcclComm_t c;
  GCCL_CHECK(comm_alloc(&c, rank, nranks, nranks, 0));
  log_set_rank(rank);
  gcclResult_t res = rendezvous_join(&id, nranks, rank, c->timeout_ms, &c->tp);
  struct sim_config sim;
  if (res == gcclSuccess && sim_config_from_env(&sim, c->ctx.local_size)) {
    struct transport* wrapped;
    res = sim_transport_join(&wrapped, c->tp, &sim);
    if (res == gcclSuccess) c->tp = wrapped;
  }
  if (res == gcclSuccess) res = comm_faults_install(c); /* outermost: the link model carries what it sends */
  if (res != gcclSuccess) {
    comm_free(c);
    return res;
  }
  c->ctx.tp = c->tp;
  GCCL_INFO(LOG_INIT, "comm %p rank %d of %d ready (%s transport)", (void*)c, rank, nranks, tp_name(c->tp));
  *comm = c;
  return gcclSuccess;
}

gcclResult_t gcclCommInitAll(gcclComm_t* comms, int nranks) {
  log_init();
  GCCL_CHECK(argcheck_not_null(comms, "gcclCommInitAll", "comms"));
  GCCL_CHECK(argcheck_thread_nranks(nranks, "gcclCommInitAll"));
  struct local_world* w;
  GCCL_CHECK(local_world_create(&w, nranks));
  struct sim_world* link_model = NULL; /* GCCL_SIM_LINK_*: wraps every rank's transport */
  gcclResult_t res = gcclSuccess;
  int made = 0;
  for (; made < nranks; made++) {
    gcclComm_t c;
    GCCL_CHECK_GOTO(comm_alloc(&c, made, nranks, nranks, 0), res, fail);
    comms[made] = c;
    GCCL_CHECK_GOTO(local_transport_create(&c->tp, w, made, c->timeout_ms), res, fail_one);
    struct sim_config sim;
    if (made == 0 && sim_config_from_env(&sim, c->ctx.local_size))
      GCCL_CHECK_GOTO(sim_world_create(&link_model, nranks, &sim), res, fail_one);
    if (link_model) {
      struct transport* wrapped;
      GCCL_CHECK_GOTO(sim_transport_create(&wrapped, c->tp, link_model), res, fail_one);
      c->tp = wrapped;
    }
    GCCL_CHECK_GOTO(comm_faults_install(c), res, fail_one);
    c->ctx.tp = c->tp;
  }
  local_world_unref(w); /* the transports hold them now */
  sim_world_unref(link_model);
  return gcclSuccess;
fail_one:
  made++;
fail:
  for (int i = 0; i < made; i++) comm_free(comms[i]);
  for (int i = 0; i < nranks; i++) comms[i] = NULL;
  local_world_unref(w);
  sim_world_unref(link_model);
  return res;
}

/* ---- destruction ------------------------------------------------------------------ */

/* A waiter counts itself in idle_waiters, then reads pending, under mu; the
 * call that drops pending to 0 then reads idle_waiters (both sequentially
 * consistent). So either the waiter sees 0, or the dropper sees the waiter and
 * signals under mu, which the waiter holds from its read until it sleeps. */
static void wait_idle(gcclComm_t c) {
  pthread_mutex_lock(&c->mu);
  atomic_fetch_add(&c->idle_waiters, 1);
  while (atomic_load(&c->pending) > 0) pthread_cond_wait(&c->idle, &c->mu);
  atomic_fetch_sub(&c->idle_waiters, 1);
  pthread_mutex_unlock(&c->mu);
}

void comm_pending_add(gcclComm_t c, int delta) {
  if (atomic_fetch_add(&c->pending, delta) + delta != 0 || atomic_load(&c->idle_waiters) == 0) return;
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->idle);
  pthread_mutex_unlock(&c->mu);
}

gcclResult_t gcclCommDestroy(gcclComm_t comm) {
  GCCL_CHECK(argcheck_comm(comm, "gcclCommDestroy"));
  wait_idle(comm); /* stream work still queued would use the freed comm */
  comm_free(comm);
  return gcclSuccess;
}

gcclResult_t gcclCommAbort(gcclComm_t comm) {
  GCCL_CHECK(argcheck_comm(comm, "gcclCommAbort"));
  /* Break the transport first: every blocked rank, this one's other threads
   * included, returns gcclRemoteError, so the queued work drains quickly. */
  tp_abort(comm->tp, gcclRemoteError);
  atomic_store(&comm->async_error, gcclRemoteError);
  wait_idle(comm);
  comm_free(comm);
  return gcclSuccess;
}

/* ---- queries ------------------------------------------------------------------------ */

gcclResult_t gcclCommCount(gcclComm_t comm, int* count) {
  GCCL_CHECK(argcheck_comm(comm, "gcclCommCount"));
  GCCL_CHECK(comm_fail(comm, argcheck_not_null(count, "gcclCommCount", "count")));
  *count = comm->nranks;
  return gcclSuccess;
}

gcclResult_t gcclCommUserRank(gcclComm_t comm, int* rank) {
  GCCL_CHECK(argcheck_comm(comm, "gcclCommUserRank"));
  GCCL_CHECK(comm_fail(comm, argcheck_not_null(rank, "gcclCommUserRank", "rank")));
  *rank = comm->rank;
  return gcclSuccess;
}

gcclResult_t gcclCommGetAsyncError(gcclComm_t comm, gcclResult_t* asyncError) {
  GCCL_CHECK(argcheck_comm(comm, "gcclCommGetAsyncError"));
  GCCL_CHECK(comm_fail(comm, argcheck_not_null(asyncError, "gcclCommGetAsyncError", "asyncError")));
  gcclResult_t e = (gcclResult_t)atomic_load(&comm->async_error);
  if (e == gcclSuccess) {
    tp_hear_peers(comm->tp);
    e = tp_broken(comm->tp);
  }
  *asyncError = e;
  return gcclSuccess;
}

/* ---- state -------------------------------------------------------------------------- */

gcclResult_t comm_check_usable(gcclComm_t comm, const char* fn) {
  gcclResult_t broken = tp_broken(comm->tp);
  if (broken != gcclSuccess)
    return err_set(gcclInvalidUsage, "%s: the communicator is in an error state (%s); destroy it", fn,
                   gcclGetErrorString(broken));
  return gcclSuccess;
}
