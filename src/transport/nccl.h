/* nccl.h — the NCCL transport: gccl's messages between the GPUs of an
 * NCCL communicator, with ncclSend / ncclRecv (built with CUDA and nccl.h).
 *
 * NCCL's point-to-point calls do not have the semantics the schedules are
 * written for (transport.h, MPI's): both sides must give the same count, a
 * kernel blocks its stream until its peer joins, and NCCL runs the kernels of
 * one communicator in order. So the transport makes private communicators from
 * the caller's, which it owns and the caller never sees:
 *   - `all`, a duplicate (ncclCommSplit with one color), for allgather_small and
 *     barrier only, always called in the same order on every rank;
 *   - one two-rank communicator per ordered pair (i -> j), on its own CUDA
 *     stream, on which i only sends and j only receives. A receive that waits for
 *     one peer therefore never holds up another peer's messages.
 * They come from 2 ncclCommSplit calls per round of a round-robin tournament
 * (p-1 rounds for even p, p for odd p): about 2p collective splits at setup. A
 * first exchange on each pair then makes NCCL connect the pair at setup, in the
 * same order on both sides, rather than inside a later ncclSend (connecting
 * blocks the host until the peer joins, which could deadlock two ranks that
 * both send first).
 *
 * Messages: an 8-byte little-endian header (the payload's size), then the
 * payload if not empty, both staged through device memory from a memory pool
 * the transport owns (stream-ordered, so nothing is allocated from the OS per
 * message once the pool has grown, and nothing synchronises the device). The
 * receiver learns the size from the header, so irecv_upto works, and checks it.
 *
 * Waits poll CUDA events; every poll also moves every peer's queue of receives
 * along. A wait gives up after the timeout; a timeout, a failed request, an
 * NCCL async error or abort break the transport, and the first call that finds
 * it broken aborts the private communicators (ncclCommAbort ends kernels stuck
 * on a peer). Peers learn of a failure only by their own timeout: there is no
 * control channel as in the MPI transport.
 *
 * Threads: one thread at a time drives a transport (every operation but abort
 * and broken, which only set and read a flag, from any thread). Each operation
 * makes the NCCL communicator's device current and restores the caller's. */
#ifndef GCCL_TRANSPORT_NCCL_H
#define GCCL_TRANSPORT_NCCL_H

#include <nccl.h>

#include "transport/transport.h"

/* Creates this rank's endpoint on the NCCL communicator `user`, which it only
 * splits (the caller keeps it and may destroy it at once). Collective over
 * user's ranks. `mine` is the caller's own setup result so far: a rank that
 * failed still takes part in every collective step, so that all ranks return an
 * error together instead of leaving the others blocked in ncclCommSplit. Every
 * wait gives up after timeout_ms. NCCL_COMM_BLOCKING=0 must not be set (the
 * caller refuses it): every NCCL call must have launched its kernels on
 * return. Errors: gcclSystemError (CUDA, NCCL, memory;
 * or another rank's setup failed), gcclRemoteError, gcclTimeout, or `mine`. */
gcclResult_t nccl_transport_create(struct transport** tp, ncclComm_t user, int64_t timeout_ms, gcclResult_t mine);

#endif
