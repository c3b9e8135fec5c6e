/* enqueue.c — where a checked collective goes: an open group, a stream, or now. */
#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"
#include "core/execute.h"
#include "device/device.h"

gcclResult_t enqueue_collective(gcclComm_t comm, struct coll_args* args, gcclStream_t stream) {
  /* Device buffers are found now, in the caller's thread, and staged when the call runs. */
  args->device = device_buffers(args, comm->nranks);
  args->cuda_stream = stream_cuda(stream);
  GCCL_CHECK(comm_fail(comm, argcheck_worker_thread(comm, args->kind, stream)));
  if (group_record(comm, args, stream)) return gcclSuccess;
  if (stream) return comm_fail(comm, stream_push(stream, comm, args));
  /* Counted like stream work, so that gcclCommAbort from another thread waits for
   * this call to leave before it frees the communicator. */
  comm_pending_add(comm, +1);
  gcclResult_t res = execute_collective(comm, args);
  comm_pending_add(comm, -1);
  return res;
}
