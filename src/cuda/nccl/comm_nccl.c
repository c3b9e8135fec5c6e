/* comm_nccl.c — gcclCommInitNccl: a communicator of the ranks of an NCCL
 * communicator, over the NCCL transport (gccl_nccl.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"
#include "cuda/nccl/nccl_api.h"
#include "gccl_nccl.h"
#include "transport/nccl.h"
#include "transport/sim.h"

/* The timeout of a rank whose comm_alloc failed (it has no GCCL_TIMEOUT_MS
 * read): comm.c's default. It only bounds that rank's share of the agreement. */
#define INIT_FALLBACK_TIMEOUT_MS 300000

gcclResult_t gcclCommInitNccl(gcclComm_t* comm, ncclComm_t nccl) {
  log_init();
  GCCL_CHECK(argcheck_not_null(comm, "gcclCommInitNccl", "comm"));
  *comm = NULL;
  GCCL_CHECK(argcheck_not_null(nccl, "gcclCommInitNccl", "nccl"));
  /* It would override the blocking configuration of the transport's private
   * communicators, whose calls must have launched their kernels on return. */
  const char* blocking = getenv("NCCL_COMM_BLOCKING");
  if (blocking && strcmp(blocking, "0") == 0)
    return err_set(gcclInvalidUsage, "gcclCommInitNccl: NCCL_COMM_BLOCKING=0 is set; gccl needs blocking NCCL calls");
  const struct nccl_api* api = NULL;
  GCCL_CHECK(nccl_api_get(&api));
  int rank = 0, nranks = 0;
  ncclResult_t r = api->comm_user_rank(nccl, &rank);
  if (r == ncclSuccess) r = api->comm_count(nccl, &nranks);
  if (r != ncclSuccess) return nccl_fail(api, r, nccl, "gcclCommInitNccl: querying the NCCL communicator");

  /* This rank's part; a failure still takes part in the transport's collective
   * setup, so that every rank fails with it. One node: no node detection (the
   * GPUs of one NCCL communicator may span nodes; GCCL_RANKS_PER_NODE says so). */
  gcclComm_t c = NULL;
  gcclResult_t res = comm_alloc(&c, rank, nranks, nranks, 0);
  if (res == gcclSuccess) log_set_rank(rank);
  struct transport* tp = NULL;
  gcclResult_t made = nccl_transport_create(&tp, nccl, c ? c->timeout_ms : INIT_FALLBACK_TIMEOUT_MS, res);
  if (res == gcclSuccess) res = made;
  if (res != gcclSuccess) {
    if (c) comm_free(c);
    return res;
  }
  c->tp = tp;
  res = comm_faults_install(c); /* GCCL_FAULT */
  if (res != gcclSuccess) {
    comm_free(c);
    return res;
  }
  c->ctx.tp = c->tp;
  struct sim_config sim;
  if (sim_config_from_env(&sim, c->ctx.local_size))
    GCCL_WARN("GCCL_SIM_LINK_* ignored: the link model serves thread ranks; NCCL ranks use the real links");
  GCCL_INFO(LOG_INIT, "comm %p rank %d of %d ready (nccl transport, NCCL %d, %d ranks per node)", (void*)c, rank,
            nranks, api->version, c->ctx.local_size);
  *comm = c;
  return gcclSuccess;
}
