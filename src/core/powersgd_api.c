/* powersgd_api.c — the gcclPowerSgd* calls: PowerSGD's steps for one rank
 * (compress/powersgd_steps.c) with the sums over ranks left to the caller
 * (gccl.h says in what order). The steps write into the caller's P and Q, the
 * state keeps its own copy of the summed P, and ComputeOutput commits the call
 * as the end of a collective does (compressor_commit). */
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "compress/powersgd.h"
#include "core/argcheck.h"

static struct powersgd_shape shape_of(gcclCompressor_t c) {
  return ((const struct powersgd_state*)c->state)->shape;
}

gcclResult_t gcclPowerSgdShape(gcclCompressor_t c, size_t* rows, size_t* cols, size_t* rank) {
  const char* fn = "gcclPowerSgdShape";
  GCCL_CHECK(argcheck_powersgd_step(c, POWERSGD_IDLE, fn));
  if (rows == NULL || cols == NULL || rank == NULL) return err_set(gcclInvalidArgument, "%s: an output is NULL", fn);
  struct powersgd_shape sh = shape_of(c);
  *rows = sh.rows, *cols = sh.cols, *rank = sh.rank;
  return gcclSuccess;
}

static size_t p_bytes(gcclCompressor_t c) {
  return shape_of(c).rows * shape_of(c).rank * sizeof(float);
}

static size_t q_bytes(gcclCompressor_t c) {
  return shape_of(c).cols * shape_of(c).rank * sizeof(float);
}

gcclResult_t gcclPowerSgdComputeP(gcclCompressor_t c, const void* sendbuff, float* P) {
  const char* fn = "gcclPowerSgdComputeP";
  GCCL_CHECK(argcheck_powersgd_step(c, POWERSGD_IDLE, fn));
  GCCL_CHECK(argcheck_host_pair(sendbuff, c->count * dtype_size(c->dt), P, p_bytes(c), fn));
  compressor_abort(c); /* a call left between its steps is dropped: its state was only staged */
  return err_prefix(powersgd_compute_p(c, sendbuff, c->dt, P), fn);
}

gcclResult_t gcclPowerSgdComputeQ(gcclCompressor_t c, const float* P, float* Q) {
  const char* fn = "gcclPowerSgdComputeQ";
  GCCL_CHECK(argcheck_powersgd_step(c, POWERSGD_HAS_P, fn));
  GCCL_CHECK(argcheck_host_pair(P, p_bytes(c), Q, q_bytes(c), fn));
  powersgd_compute_q(c, P, Q);
  return gcclSuccess;
}

gcclResult_t gcclPowerSgdComputeOutput(gcclCompressor_t c, const float* Q, void* recvbuff, int nranks, gcclRedOp_t op) {
  const char* fn = "gcclPowerSgdComputeOutput";
  GCCL_CHECK(argcheck_powersgd_step(c, POWERSGD_HAS_Q, fn));
  GCCL_CHECK(argcheck_host_pair(Q, q_bytes(c), recvbuff, c->count * dtype_size(c->dt), fn));
  if (nranks < 1) return err_set(gcclInvalidArgument, "%s: nranks %d is below 1", fn, nranks);
  if (op != gcclSum && op != gcclAvg) return err_set(gcclInvalidArgument, "%s: op must be gcclSum or gcclAvg", fn);
  powersgd_compute_output(c, Q, recvbuff, c->dt, nranks);
  if (op == gcclAvg) reduce_divide(recvbuff, c->count, c->dt, nranks);
  return err_prefix(compressor_commit(c), fn);
}
