/* enqueue.c — where a checked collective goes: an open group, a stream, or now. */
#include "comm.h"

gcclResult_t enqueue_collective(gcclComm_t comm, const struct coll_args* args, gcclStream_t stream) {
  if (group_record(comm, args, stream)) return gcclSuccess;
  if (stream) return comm_fail(comm, stream_push(stream, comm, args));
  /* Counted like stream work, so that gcclCommAbort from another thread waits for
   * this call to leave before it frees the communicator. */
  comm_pending_add(comm, +1);
  gcclResult_t res = comm_execute(comm, args);
  comm_pending_add(comm, -1);
  return res;
}
