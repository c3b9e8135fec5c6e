/* gccl_mpi.h — gccl communicators over MPI: one rank per MPI process, across
 * processes and machines. Only in builds with MPI (GCCL_HAVE_MPI in gcclConfig
 * and gccl.pc; CMake option GCCL_WITH_MPI).
 *
 * Every collective, dense and compressed, runs over it with the same schedules as
 * over thread ranks, on MPI_Isend / MPI_Irecv of a private duplicate of the
 * communicator, so gccl's messages never match the application's. Messages
 * beyond MPI's int counts travel in chunks of 1 GiB (GCCL_MPI_CHUNK_BYTES, the
 * same on every rank, changes the size).
 *
 * Thread level: calls on a NULL stream run in the calling thread, so any level
 * the application initialised MPI with works as long as it keeps that level's
 * promise (at MPI_THREAD_FUNNELED: call gccl from the main thread). Streams and
 * groups run collectives on gccl's worker threads, concurrently with the
 * application's own MPI calls: they need MPI_THREAD_MULTIPLE (gcclInvalidUsage
 * otherwise, with a message). gcclCommAbort from another thread interrupts a
 * blocked call at any level; below MPI_THREAD_MULTIPLE it only raises a flag that
 * the blocked call polls, and the destruction that follows calls MPI, so the
 * aborting thread must be one that MPI lets call it then.
 *
 * Failure: a rank whose call times out (GCCL_TIMEOUT_MS) or that aborts tells
 * every other rank at once, and their calls fail with gcclRemoteError instead of
 * waiting for their own timeout. A communicator that failed may leave messages
 * in flight; in Open MPI they can reach a communicator created right after it is
 * destroyed (context ids are reused), so after a failure create no new one from
 * the same processes without restarting them (those made before it are safe).
 *
 * Nodes: ranks that share memory (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED)
 * form a node; the hierarchical allreduce needs nodes to be equal blocks of
 * consecutive ranks (as mpirun's default --map-by slot/core places them), else it
 * treats the communicator as flat (INFO log says which). GCCL_RANKS_PER_NODE
 * overrides the detection, as for thread ranks. */
#ifndef GCCL_MPI_H
#define GCCL_MPI_H

#include <mpi.h>

#include "gccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes a gccl communicator of every rank of mpiComm (an intracommunicator);
 * collective over mpiComm: every rank calls it. The communicator's rank and size
 * are mpiComm's. mpiComm is duplicated (MPI_Comm_dup), so the caller may free it
 * at once; gcclCommDestroy frees the duplicate, and must be called before
 * MPI_Finalize. When the setup fails on one rank it fails on every rank. Errors:
 * gcclInvalidArgument (NULL comm, MPI_COMM_NULL, an intercommunicator),
 * gcclInvalidUsage (MPI not initialised, or finalised; ranks that differ in
 * GCCL_MPI_CHUNK_BYTES), gcclSystemError (an MPI call failed, or another rank's
 * setup did; gcclGetLastError(NULL) has the message). */
GCCL_API gcclResult_t gcclCommInitMpi(gcclComm_t* comm, MPI_Comm mpiComm);

#ifdef __cplusplus
}
#endif

#endif
