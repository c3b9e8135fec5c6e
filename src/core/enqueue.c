/* enqueue.c — where a checked collective goes: an open group, a stream, or now. */
#include "common/result.h"
#include "core/comm.h"
#include "device/device.h"

gcclResult_t enqueue_collective(gcclComm_t comm, const struct coll_args* call, gcclStream_t stream) {
  /* Device buffers are found now, in the caller's thread, and staged when the call runs. */
  struct coll_args flagged = *call;
  flagged.device = device_buffers(call, comm->nranks);
  flagged.cuda_stream = stream_cuda(stream);
  const struct coll_args* args = &flagged;
  /* Streams and groups run the call on one of gccl's worker threads, concurrently
   * with the application's own MPI calls: MPI allows that at MPI_THREAD_MULTIPLE only. */
  if ((stream || group_open()) && comm->tp->caller_thread_only)
    return comm_fail(comm, err_set(gcclInvalidUsage,
                                   "%s on a %s: streams and groups run collectives on gccl's worker threads, which "
                                   "this communicator's MPI does not allow (initialised below MPI_THREAD_MULTIPLE); "
                                   "pass a NULL stream outside groups, or call MPI_Init_thread with "
                                   "MPI_THREAD_MULTIPLE",
                                   coll_kind_name(args->kind), stream ? "stream" : "group"));
  if (group_record(comm, args, stream)) return gcclSuccess;
  if (stream) return comm_fail(comm, stream_push(stream, comm, args));
  /* Counted like stream work, so that gcclCommAbort from another thread waits for
   * this call to leave before it frees the communicator. */
  comm_pending_add(comm, +1);
  gcclResult_t res = comm_execute(comm, args);
  comm_pending_add(comm, -1);
  return res;
}
