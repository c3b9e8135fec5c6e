/* sim_api.c — gccl_sim.h: a rank's virtual clock and sent bytes under the link model. */
#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"
#include "gccl_sim.h"
#include "transport/fault.h"
#include "transport/sim.h"

/* The link-model transport of comm, or gcclInvalidUsage when comm has none. */
static gcclResult_t sim_of(gcclComm_t comm, const void* out, const char* fn, struct transport** tp) {
  GCCL_CHECK(argcheck_comm(comm, fn));
  GCCL_CHECK(comm_fail(comm, argcheck_not_null(out, fn, "the output pointer")));
  struct transport* model = fault_transport_inner(comm->tp); /* GCCL_FAULT's injector wraps it */
  if (!sim_transport_is(model))
    return comm_fail(comm, err_set(gcclInvalidUsage,
                                   "%s: the link model is off for this communicator; set GCCL_SIM_LINK_GBPS "
                                   "and/or GCCL_SIM_LINK_US before creating it",
                                   fn));
  *tp = model;
  return gcclSuccess;
}

gcclResult_t gcclCommSimTime(gcclComm_t comm, double* seconds) {
  struct transport* tp = NULL;
  GCCL_CHECK(sim_of(comm, seconds, "gcclCommSimTime", &tp));
  *seconds = sim_transport_time(tp);
  return gcclSuccess;
}

gcclResult_t gcclCommSimBytesSent(gcclComm_t comm, uint64_t* bytes) {
  struct transport* tp = NULL;
  uint64_t inter_node;
  GCCL_CHECK(sim_of(comm, bytes, "gcclCommSimBytesSent", &tp));
  sim_transport_bytes_sent(tp, bytes, &inter_node);
  return gcclSuccess;
}

gcclResult_t gcclCommSimInterNodeBytesSent(gcclComm_t comm, uint64_t* bytes) {
  struct transport* tp = NULL;
  uint64_t all;
  GCCL_CHECK(sim_of(comm, bytes, "gcclCommSimInterNodeBytesSent", &tp));
  sim_transport_bytes_sent(tp, &all, bytes);
  return gcclSuccess;
}
