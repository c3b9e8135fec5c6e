/* execute.h — running one collective call on a communicator: agree, run, barrier,
 * then commit or abort the compressor's error feedback. */
#ifndef GCCL_CORE_EXECUTE_H
#define GCCL_CORE_EXECUTE_H

#include "collectives/coll.h"
#include "gccl.h"

/* Runs the checked call `args` on comm now, in the calling thread (the caller's,
 * or a stream's worker): the tuner's algorithm, the agreement of every rank on
 * the call, the schedule, and a barrier, so that the call succeeds on every rank
 * or on none. Only then is a compressor's staged residual committed; on any
 * failure it is left as it was, the transport is aborted (peers mid-call return
 * too) and a broken communicator records its async error. Device buffers are
 * staged through pinned host memory around the same steps. On failure the message
 * is in the communicator's last error. */
gcclResult_t execute_collective(gcclComm_t comm, const struct coll_args* args);

#endif
