/* gccl_nccl.h — gccl communicators over NCCL: one rank per GPU of an NCCL
 * communicator, in one process or many (only in builds with CUDA where nccl.h
 * was found; NCCL 2.18 or later at run time).
 *
 * What moves over NCCL: every message of gccl's schedules (dense chunks,
 * compressed frames) goes between the GPUs with ncclSend / ncclRecv, and the
 * agreement that opens each collective with ncclAllGather. The schedules, the
 * codecs and the reductions run on the host, as for the other transports, so
 * buffers may be host or device memory (device buffers are staged through
 * pinned host memory, see gccl_cuda.h), and each message is staged through
 * device memory to travel: host -> device, NCCL, device -> host. This buys
 * NCCL's links (NVLink, InfiniBand, its network plugins) for compressed
 * collectives, not NCCL's speed for dense ones: for a dense allreduce of device
 * buffers call ncclAllReduce.
 *
 * Private communicators: gcclCommInitNccl splits the given communicator into a
 * duplicate (for the agreements) and one two-rank communicator per ordered pair
 * of ranks, p(p-1) in all, each GPU holding 2(p-1) of them plus the duplicate;
 * every pair gets its own CUDA stream, so a message that waits for one peer never
 * holds up another. That takes about 2p collective ncclCommSplit calls and one
 * exchange per pair at setup (seconds for a few GPUs), and each communicator
 * takes NCCL's per-communicator device memory. Each is limited to 2 CTAs, so the
 * kernels that may wait at once all fit on the GPU beside the application's. The
 * caller's ncclComm_t is only split, never used afterwards, and stays the
 * caller's: it may be destroyed before or after the gccl communicator. libgccl
 * calls the NCCL the process has loaded (libnccl.so.2, or NCCL linked into the
 * program), found with dlopen: it has no link-time dependency on NCCL.
 *
 * Failure: a call that waits longer than GCCL_TIMEOUT_MS for a peer returns
 * gcclTimeout, and one that finds an NCCL error returns it (gcclSystemError or
 * gcclRemoteError, with NCCL's text in gcclGetLastError); the communicator is
 * then broken (later calls fail at once) and its private NCCL communicators are
 * aborted. Its peers are not told: they fail at their own timeout.
 * gcclCommAbort from another thread interrupts a blocked call.
 *
 * CUDA streams: the transport uses 2(p-1)+2 streams per GPU. CUDA feeds a
 * process's streams through CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8
 * unless set, at most 32), and streams that share a queue can wait for each
 * other, while a pair's receive waits for its peer: beyond 4 ranks set
 * CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts (a warning says so), and
 * never run it with 1, which some frameworks set.
 *
 * Threads: calls on a NULL stream run in the calling thread, streams and groups
 * on gccl's worker threads; each call makes the NCCL communicator's device the
 * current one while it runs and restores the thread's own afterwards. */
#ifndef GCCL_NCCL_H
#define GCCL_NCCL_H

#include <nccl.h>

#include "gccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes a gccl communicator of every rank of `nccl`; collective over it: every
 * rank calls it (from its own thread or process), on the communicator's GPU or
 * any other current device. The rank and size are nccl's; the ranks form one
 * node for the hierarchical algorithms unless GCCL_RANKS_PER_NODE says
 * otherwise. When the setup fails on one rank it fails on every rank. Errors:
 * gcclInvalidArgument (comm or nccl NULL), gcclInvalidUsage (NCCL older than
 * 2.18, NCCL_COMM_BLOCKING=0), gcclSystemError (libnccl.so.2 not found, a CUDA
 * or NCCL call failed, another rank's setup did), gcclTimeout;
 * gcclGetLastError(NULL) has the message. gcclCommDestroy frees the private communicators, streams and device
 * memory; like ncclCommDestroy, which it calls, it waits for the other ranks on
 * the same node to destroy theirs, so call it on every rank (after a failure,
 * or with gcclCommAbort, they are aborted instead, without waiting). The
 * environment must not set NCCL_COMM_BLOCKING=0 (gcclInvalidUsage). */
GCCL_API gcclResult_t gcclCommInitNccl(gcclComm_t* comm, ncclComm_t nccl);

#ifdef __cplusplus
}
#endif

#endif
