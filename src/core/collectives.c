/* collectives.c — the public dense collectives: build the call, check it, launch it. */
#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"
#include "core/dropin.h"

/* coll_call (coll.h) sets every field without zeroing the struct first. */
_Static_assert(offsetof(struct coll_args, device_recv) + sizeof(void*) == sizeof(struct coll_args),
               "a field after device_recv: coll_call must set it");

static gcclResult_t check(gcclComm_t comm, const struct coll_args* a, gcclStream_t stream, const char* fn) {
  gcclResult_t res = argcheck_collective(comm, a, fn);
  if (res == gcclSuccess) res = argcheck_call_stream(stream, fn);
  return comm_fail(comm, res);
}

static gcclResult_t launch(gcclComm_t comm, struct coll_args* a, gcclStream_t stream, const char* fn) {
  GCCL_CHECK(check(comm, a, stream, fn));
  return enqueue_collective(comm, a, stream);
}

/* Fields a collective does not use are fixed (op = sum, root = 0) so that the
 * agreement step compares only what matters. */

/* With GCCL_COMPRESS set, an eligible call runs compressed, with the drop-in
 * table's compressor for its buffer (dropin.h): the call gcclAllReduceCompressed
 * launches, without its checks. Those hold already: the table's compressor was
 * made for this call's count and datatype, and the drop-in routes sum and avg
 * only. So a gradient passes the public API once. */
gcclResult_t gcclAllReduce(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t datatype, gcclRedOp_t op,
                           gcclComm_t comm, gcclStream_t stream) {
  struct coll_args a = coll_call(COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0);
  GCCL_CHECK(check(comm, &a, stream, "gcclAllReduce"));
  gcclCompressor_t comp;
  gcclResult_t res = dropin_route(comm, &a, &comp);
  if (res != gcclSuccess) return comm_fail(comm, res);
  a.comp = comp; /* NULL: the call stays dense */
  return enqueue_collective(comm, &a, stream);
}

gcclResult_t gcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, gcclDataType_t datatype,
                           gcclComm_t comm, gcclStream_t stream) {
  struct coll_args a = coll_call(COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, gcclSum, 0);
  return launch(comm, &a, stream, "gcclAllGather");
}

gcclResult_t gcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, gcclDataType_t datatype,
                               gcclRedOp_t op, gcclComm_t comm, gcclStream_t stream) {
  struct coll_args a = coll_call(COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0);
  return launch(comm, &a, stream, "gcclReduceScatter");
}

gcclResult_t gcclBroadcast(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t datatype, int root,
                           gcclComm_t comm, gcclStream_t stream) {
  struct coll_args a = coll_call(COLL_BROADCAST, sendbuff, recvbuff, count, datatype, gcclSum, root);
  return launch(comm, &a, stream, "gcclBroadcast");
}

gcclResult_t gcclReduce(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t datatype, gcclRedOp_t op,
                        int root, gcclComm_t comm, gcclStream_t stream) {
  struct coll_args a = coll_call(COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root);
  return launch(comm, &a, stream, "gcclReduce");
}
