/* bench_mpi.h — the MPI library's collectives as the benchmarks call them: the
 * dense baseline of mpi-baseline and of gccl-bench --mpi, called the same way in
 * both so that their numbers agree.
 *
 * Header-only, like bench_common.h. MPI has no half or bfloat16 (bench_mpi_type
 * gives MPI_DATATYPE_NULL) and no average: avg runs MPI_SUM, then divides by the
 * number of ranks locally, inside the call, as a user would. An out-of-place
 * broadcast copies the root's send buffer into its receive buffer, then
 * broadcasts that (MPI_Bcast has one buffer). In place, MPI_Reduce_scatter_block
 * leaves a rank's share at the start of the send buffer. */
#ifndef GCCL_BENCH_MPI_H
#define GCCL_BENCH_MPI_H

#include <mpi.h>

#include "bench_common.h"

/* Aborts the job with MPI's message when `call` fails; prog names the benchmark. */
#define BENCH_MPI_CHECK(prog, call)                              \
  do {                                                           \
    int rc_ = (call);                                            \
    if (rc_ != MPI_SUCCESS) {                                    \
      char msg_[MPI_MAX_ERROR_STRING];                           \
      int len_ = 0;                                              \
      MPI_Error_string(rc_, msg_, &len_);                        \
      fprintf(stderr, "%s: %s failed: %s\n", prog, #call, msg_); \
      MPI_Abort(MPI_COMM_WORLD, 1);                              \
    }                                                            \
  } while (0)

/* MPI_DATATYPE_NULL: half and bfloat16, which MPI lacks. */
static inline MPI_Datatype bench_mpi_type(int t) {
  const MPI_Datatype map[T_COUNT] = {MPI_INT8_T,   MPI_UINT8_T,       MPI_INT32_T, MPI_UINT32_T, MPI_INT64_T,
                                     MPI_UINT64_T, MPI_DATATYPE_NULL, MPI_FLOAT,   MPI_DOUBLE,   MPI_DATATYPE_NULL};
  return map[t];
}

/* avg: MPI_SUM, then bench_mpi_divide. */
static inline MPI_Op bench_mpi_op(int op) {
  const MPI_Op map[OP_COUNT] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_SUM};
  return map[op];
}

#define BENCH_MPI_DIVIDE(ctype)                                       \
  do {                                                                \
    ctype* p_ = buf;                                                  \
    for (size_t i = 0; i < n; i++) p_[i] = (ctype)(p_[i] / (ctype)d); \
  } while (0)

/* buf[i] /= d: the average's second half (integer division for integers). */
static inline void bench_mpi_divide(int t, void* buf, size_t n, int d) {
  /* clang-format off */
  switch (t) {
    case T_INT8: BENCH_MPI_DIVIDE(int8_t); break;
    case T_UINT8: BENCH_MPI_DIVIDE(uint8_t); break;
    case T_INT32: BENCH_MPI_DIVIDE(int32_t); break;
    case T_UINT32: BENCH_MPI_DIVIDE(uint32_t); break;
    case T_INT64: BENCH_MPI_DIVIDE(int64_t); break;
    case T_UINT64: BENCH_MPI_DIVIDE(uint64_t); break;
    case T_FLOAT: BENCH_MPI_DIVIDE(float); break;
    default: BENCH_MPI_DIVIDE(double); break;
  }
  /* clang-format on */
}

/* Where a call's result lies: the receive buffer, except in-place reduce-scatter. */
static inline char* bench_mpi_output(const bench_opts* o, char* send, char* recv, int inplace) {
  return inplace && o->coll == COLL_REDUCESCATTER ? send : recv;
}

/* One call of o->coll on comm, count elements per rank's argument (as gccl-bench
 * counts them; at most INT_MAX), from a rank's two buffers. In place, the input
 * lies where gccl-bench's input_of puts it. Returns the MPI error code. */
static inline int bench_mpi_call(const bench_opts* o, MPI_Comm comm, int rank, int nranks, char* send, char* recv,
                                 size_t count, int inplace) {
  int n = (int)count, root = o->root, is_root = rank == root, rc;
  MPI_Datatype dt = bench_mpi_type(o->type);
  void* sb = inplace ? MPI_IN_PLACE : send;
  MPI_Op op = bench_mpi_op(o->op);
  switch (o->coll) {
    case COLL_ALLREDUCE:
      rc = MPI_Allreduce(sb, recv, n, dt, op, comm);
      break;
    case COLL_ALLGATHER:
      rc = MPI_Allgather(sb, inplace ? 0 : n, inplace ? MPI_DATATYPE_NULL : dt, recv, n, dt, comm);
      break;
    case COLL_REDUCESCATTER:
      rc = MPI_Reduce_scatter_block(sb, bench_mpi_output(o, send, recv, inplace), n, dt, op, comm);
      break;
    case COLL_BROADCAST:
      if (!inplace && is_root) memcpy(recv, send, count * bench_type_bytes[o->type]);
      rc = MPI_Bcast(recv, n, dt, root, comm);
      break;
    default:
      if (inplace && !is_root) sb = recv;
      rc = MPI_Reduce(sb, recv, n, dt, op, root, comm);
      break;
  }
  if (rc == MPI_SUCCESS && o->op == OP_AVG && bench_has_op(o->coll) && (o->coll != COLL_REDUCE || is_root))
    bench_mpi_divide(o->type, bench_mpi_output(o, send, recv, inplace), count, nranks);
  return rc;
}

/* A barrier the waiting ranks sleep through (1 ms naps), so that rank 0 measures
 * memcpy alone on a machine with fewer cores than ranks. Returns the MPI error code. */
static inline int bench_mpi_quiet_barrier(MPI_Comm comm) {
  MPI_Request req;
  int done = 0, rc = MPI_Ibarrier(comm, &req);
  while (rc == MPI_SUCCESS && !done) {
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !done) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return rc;
}

#endif /* GCCL_BENCH_MPI_H */
