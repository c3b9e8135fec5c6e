/* mpi.h — the MPI transport: one rank per MPI process, over MPI point-to-point
 * messages and non-blocking collectives (built only with GCCL_HAVE_MPI).
 *
 * Failure: every wait polls, so it ends with gcclTimeout after the timeout, or
 * with gcclRemoteError as soon as this rank's transport is broken; a rank that
 * fails or aborts sends a control message to every peer, which breaks theirs.
 *
 * Threads: below MPI_THREAD_MULTIPLE only the thread that calls gccl may drive
 * the transport (base.caller_thread_only is set) and abort from another thread
 * only raises the flag that the waiting thread polls: that thread then tells the
 * peers. At MPI_THREAD_MULTIPLE abort tells them itself, from any thread.
 *
 * Messages longer than the chunk size (1 GiB, at most INT_MAX: MPI counts are
 * ints; GCCL_MPI_CHUNK_BYTES overrides it, and must be the same on every rank)
 * travel as a sequence of full chunks ended by a shorter one, possibly empty.
 * split_far (transport.h) makes the chunks to and from other nodes pieces of the
 * size it names: Open MPI's TCP sends a piece under its eager limit without a
 * handshake, so no handshake waits behind the other direction's data. */
#ifndef GCCL_TRANSPORT_MPI_H
#define GCCL_TRANSPORT_MPI_H

#include <mpi.h>

#include "transport/transport.h"

#define MPI_TP_CHUNK_BYTES_DEFAULT ((size_t)1 << 30)

/* Creates this process's endpoint on `comm`, a private communicator that the
 * transport takes over on success: it sets MPI_ERRORS_RETURN on it and frees it
 * at destroy (unless MPI is finalized by then). comm_id names the communicator,
 * the same on every rank and new for each one: control messages carry it. Every
 * wait gives up after timeout_ms milliseconds. thread_level is MPI_Query_thread's
 * answer. one_node: every rank runs on this node (MPI moves the data through shared
memory, in the polls: waits poll longer before they nap). Local: no collective call.
On failure comm is left to the caller.
 * Errors: gcclSystemError (out of memory, an MPI call failed). */
gcclResult_t mpi_transport_create(struct transport** tp, MPI_Comm comm, uint64_t comm_id, int64_t timeout_ms,
                                  int thread_level, int one_node);

/* Gives the transport a board in shared memory (board.h): step 0 of every call
 * and a small allreduce's data then travel there, not in MPI messages. Only when
 * every rank runs on this node. Not when some rank passes wanted = 0 (its
 * transport is wrapped and would not use it) or sets GCCL_MPI_BOARD=0, nor when a
 * rank cannot map shared memory: then no rank has it, since every rank must agree
 * the same way, and GCCL_DEBUG=INFO says why. Collective: every rank calls it
 * once every rank made its transport. Errors: an MPI call's (mpi_error). */
gcclResult_t mpi_transport_add_board(struct transport* tp, int wanted);

/* The chunk size the transport splits messages at (the same on every rank). */
size_t mpi_transport_chunk_bytes(const struct transport* tp);
/* The size messages to and from `peer` are split at now: split_far's pieces
 * for a rank of another node, else the chunk size. */
size_t mpi_transport_chunk_to(const struct transport* tp, int peer);

/* Records the failure of MPI call `call` (returned `rc`, not MPI_SUCCESS) with
 * MPI's text for it and returns gcclSystemError, or gcclInternalError when rc is
 * of class MPI_ERR_TRUNCATE (a message longer than its receive). */
gcclResult_t mpi_error(int rc, const char* call);

#endif
