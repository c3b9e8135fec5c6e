/* test_failures_mpi.c — a rank that aborts or never arrives: no hang, and the
 * other ranks learn it promptly.
 *
 * Abort: the last rank calls gcclCommAbort while the others are in an
 * allreduce; they fail with gcclRemoteError long before their 20 s timeout.
 * Skip: rank 0 skips an allreduce on a communicator with a 1.5 s timeout; the
 * others fail with gcclTimeout or gcclRemoteError within the timeout (plus
 * slack), and rank 0 then finds the communicator broken. Both communicators are
 * made before either failure: Open MPI reuses a freed communicator's context id,
 * and a broken one's messages still in flight would reach its successor. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mpi_check.h"

#define N 4096
#define SKIP_TIMEOUT_S 1.5

static gcclComm_t comm_with_timeout(const char* timeout_ms) {
  mc_setenv("GCCL_TIMEOUT_MS", timeout_ms);
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  mc_setenv("GCCL_TIMEOUT_MS", NULL);
  return comm;
}

static void check_abort(gcclComm_t comm, float* x) {
  int aborter = mc_nranks - 1;
  double start = mc_now();
  if (mc_rank == aborter) {
    struct timespec nap = {0, 200 * 1000000}; /* let the others enter the allreduce */
    nanosleep(&nap, NULL);
    MC_OK(gcclCommAbort(comm), NULL);
    return;
  }
  gcclResult_t res = gcclAllReduce(x, x, N, gcclFloat32, gcclSum, comm, NULL);
  double took = mc_now() - start;
  /* gcclInvalidUsage when the abort arrived before the call began (the
   * communicator is then known to be broken). */
  MC_CHECK(res == gcclRemoteError || res == gcclInvalidUsage, "an allreduce beside an abort returned %s: %s",
           gcclGetErrorString(res), gcclGetLastError(comm));
  MC_CHECK(took < 5, "the abort took %.1f s to reach rank %d (timeout 20 s)", took, mc_rank);
  gcclResult_t async = gcclSuccess;
  MC_OK(gcclCommGetAsyncError(comm, &async), comm);
  MC_CHECK(async == gcclRemoteError, "gcclCommGetAsyncError after a peer's abort gave %s", gcclGetErrorString(async));
  MC_OK(gcclCommDestroy(comm), NULL);
}

static void check_skip(gcclComm_t comm, float* x) {
  double start = mc_now();
  gcclResult_t res = gcclSuccess;
  if (mc_rank != 0) {
    res = gcclAllReduce(x, x, N, gcclFloat32, gcclSum, comm, NULL);
    double took = mc_now() - start;
    MC_CHECK(res == gcclTimeout || res == gcclRemoteError, "an allreduce without rank 0 returned %s: %s",
             gcclGetErrorString(res), gcclGetLastError(comm));
    MC_CHECK(took < SKIP_TIMEOUT_S + 3, "rank %d failed after %.1f s (timeout %.1f s)", mc_rank, took, SKIP_TIMEOUT_S);
  }
  /* At least one rank saw the timeout itself; the others may have heard of it first. */
  int timed_out = res == gcclTimeout, any = 0;
  MPI_Allreduce(&timed_out, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  MC_CHECK(any, "no rank reported gcclTimeout");
  /* Rank 0 hears of it from the control message the failing ranks sent. */
  if (mc_rank == 0) {
    gcclResult_t async = gcclSuccess;
    MC_OK(gcclCommGetAsyncError(comm, &async), comm);
    MC_CHECK(async == gcclRemoteError, "rank 0's communicator reports %s after its peers failed",
             gcclGetErrorString(async));
    MC_FAILS(gcclAllReduce(x, x, N, gcclFloat32, gcclSum, comm, NULL), gcclInvalidUsage, comm);
  }
  MC_OK(gcclCommDestroy(comm), NULL);
}

int main(int argc, char** argv) {
  int level = mc_init(&argc, &argv);
  if (mc_nranks < 2 || level != MPI_THREAD_MULTIPLE) {
    if (mc_rank == 0) printf("test_failures_mpi needs 2 ranks or more at MPI_THREAD_MULTIPLE: skipped\n");
    return mc_finish("test_failures_mpi");
  }
  gcclComm_t aborted = comm_with_timeout("20000");
  gcclComm_t skipped = comm_with_timeout("1500");
  float* x = calloc(N, sizeof *x);
  if (aborted) check_abort(aborted, x);
  MPI_Barrier(MPI_COMM_WORLD);
  if (skipped) check_skip(skipped, x);
  free(x);
  return mc_finish("test_failures_mpi");
}
