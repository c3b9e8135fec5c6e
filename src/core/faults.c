/* faults.c — GCCL_FAULT on a communicator (faults.h): read at creation, installed
 * over the rank's transport, queried by tests. */
#include "core/faults.h"

#include <stdlib.h>

#include "common/env.h"
#include "common/log.h"
#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"

gcclResult_t comm_faults_read(gcclComm_t c) {
  const char* text = env_str("GCCL_FAULT");
  if (!text) return gcclSuccess;
  struct fault_config* cfg = calloc(1, sizeof *cfg);
  if (!cfg) return err_set(gcclSystemError, "out of memory reading GCCL_FAULT");
  gcclResult_t res = fault_config_parse(cfg, text, c->nranks);
  if (res != gcclSuccess) {
    free(cfg);
    return res;
  }
  GCCL_INFO(LOG_ENV, "GCCL_FAULT set to %s", text);
  c->faults = cfg;
  return gcclSuccess;
}

gcclResult_t comm_faults_install(gcclComm_t c) {
  if (!c->faults) return gcclSuccess;
  struct transport* wrapped;
  GCCL_CHECK(fault_transport_create(&wrapped, c->tp, c->faults));
  c->tp = wrapped;
  return gcclSuccess;
}

gcclResult_t comm_faults_injected(gcclComm_t comm, uint64_t counts[FAULT_KINDS]) {
  GCCL_CHECK(argcheck_comm(comm, "comm_faults_injected"));
  if (!counts) return err_set(gcclInvalidArgument, "comm_faults_injected: counts is NULL");
  fault_transport_injected(comm->tp, counts);
  return gcclSuccess;
}
