/* argcheck.c — every public collective checks its arguments here, before anything runs. */
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/result.h"
#include "comm.h"

gcclResult_t argcheck_comm(gcclComm_t comm, const char* fn) {
  if (!comm) return err_set(gcclInvalidArgument, "%s: comm is NULL", fn);
  if (!handle_live(HANDLE_COMM, comm))
    return err_set(gcclInvalidArgument, "%s: comm %p is not a live communicator (destroyed, aborted, or never created)",
                   fn, (void*)comm);
  return gcclSuccess;
}

static int has_op(enum coll_kind k) {
  return k == COLL_ALLREDUCE || k == COLL_REDUCESCATTER || k == COLL_REDUCE;
}
static int has_root(enum coll_kind k) {
  return k == COLL_BROADCAST || k == COLL_REDUCE;
}

/* Any overlap other than the in-place layout of the collective would make the
 * result depend on the algorithm's order of reads and writes. */
static gcclResult_t check_overlap(const struct coll_args* a, size_t send_bytes, size_t recv_bytes, size_t in_place_off,
                                  const char* fn) {
  uintptr_t s = (uintptr_t)a->sendbuff, r = (uintptr_t)a->recvbuff;
  if (!send_bytes || !recv_bytes || !s || !r) return gcclSuccess;
  int overlap = s < r + recv_bytes && r < s + send_bytes;
  int in_place = (a->kind == COLL_ALLGATHER)       ? s == r + in_place_off
                 : (a->kind == COLL_REDUCESCATTER) ? r == s + in_place_off
                                                   : s == r;
  if (overlap && !in_place)
    return err_set(gcclInvalidArgument, "%s: sendbuff and recvbuff overlap without being in place (in place means %s)",
                   fn,
                   a->kind == COLL_ALLGATHER       ? "sendbuff == recvbuff + rank*sendcount*size"
                   : a->kind == COLL_REDUCESCATTER ? "recvbuff == sendbuff + rank*recvcount*size"
                                                   : "sendbuff == recvbuff");
  return gcclSuccess;
}

gcclResult_t argcheck_collective(gcclComm_t comm, const struct coll_args* a, const char* fn) {
  GCCL_CHECK(argcheck_comm(comm, fn));
  if ((int)a->dt < 0 || a->dt >= gcclNumTypes)
    return err_set(gcclInvalidArgument, "%s: datatype %d is not a gcclDataType_t", fn, (int)a->dt);
  if (has_op(a->kind) && ((int)a->op < 0 || a->op >= gcclNumOps))
    return err_set(gcclInvalidArgument, "%s: op %d is not a gcclRedOp_t", fn, (int)a->op);
  if (has_root(a->kind) && (a->root < 0 || a->root >= comm->nranks))
    return err_set(gcclInvalidArgument, "%s: root %d is not in [0, %d)", fn, a->root, comm->nranks);

  size_t size = dtype_size(a->dt), p = (size_t)comm->nranks;
  if (a->count > SIZE_MAX / size / p)
    return err_set(gcclInvalidArgument, "%s: count %zu of %s overflows the addressable size", fn, a->count,
                   dtype_name(a->dt));
  size_t bytes = a->count * size;
  struct coll_extent e = coll_extent_of(a, size, comm->rank, comm->nranks);
  if (bytes && e.reads_send && !a->sendbuff) return err_set(gcclInvalidArgument, "%s: sendbuff is NULL", fn);
  if (bytes && e.writes_recv && !a->recvbuff) return err_set(gcclInvalidArgument, "%s: recvbuff is NULL", fn);
  if (e.reads_send && e.writes_recv)
    GCCL_CHECK(check_overlap(a, e.send_bytes, e.recv_bytes, (size_t)comm->rank * bytes, fn));
  /* The kernels read and write whole elements (vector loads assume it). */
  if (bytes && e.reads_send && (uintptr_t)a->sendbuff % size)
    return err_set(gcclInvalidArgument, "%s: sendbuff %p is not aligned to its %s elements (%zu bytes)", fn,
                   a->sendbuff, dtype_name(a->dt), size);
  if (bytes && e.writes_recv && (uintptr_t)a->recvbuff % size)
    return err_set(gcclInvalidArgument, "%s: recvbuff %p is not aligned to its %s elements (%zu bytes)", fn,
                   a->recvbuff, dtype_name(a->dt), size);
  return comm_check_usable(comm, fn); /* refused at once, queued on a stream or not */
}
