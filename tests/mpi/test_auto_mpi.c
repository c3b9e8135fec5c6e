/* test_auto_mpi.c — GCCL_COMPRESS=auto:SPEC on MPI ranks: it measures the link
 * at creation and every rank decides alike (core/dropin.h, core/link_probe.c).
 *
 *   one node      every rank on one node (as detected): calls stay dense
 *   named slow    GCCL_RANKS_PER_NODE=1, GCCL_LINK_GBPS=0.01: a 4 MiB call compresses
 *   named fast    the same at 100000 Gbit/s: it stays dense
 *   measured      GCCL_RANKS_PER_NODE=1, the link timed at creation: whatever it
 *                 decides, every rank decided the same and the call succeeded
 *   disagreeing   auto: on one rank only: creation fails on every rank, naming
 *                 GCCL_COMPRESS
 * The drop-in's counters (an internal) say what each call did. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dropin.h"
#include "mpi_check.h"

#define COUNT ((size_t)1 << 20) /* 4 MiB of floats */
#define SPEC "auto:uniform:bits=8"

/* One allreduce of COUNT floats on a fresh communicator made with the
 * environment as set; returns whether it ran compressed, the same on every rank. */
static int one_call(const char* ranks_per_node, const char* link_gbps) {
  const char* const env[][2] = {
      {"GCCL_COMPRESS", SPEC}, {"GCCL_RANKS_PER_NODE", ranks_per_node}, {"GCCL_LINK_GBPS", link_gbps}, {NULL, NULL}};
  gcclComm_t comm = mc_comm_with(MPI_COMM_WORLD, env);
  if (!comm) return -1;
  float* buf = malloc(COUNT * sizeof *buf);
  for (size_t i = 0; i < COUNT; i++) buf[i] = (float)((i + (size_t)mc_rank) % 5);
  MC_OK(gcclAllReduce(buf, buf, COUNT, gcclFloat32, gcclSum, comm, NULL), comm);
  struct dropin_stats st;
  MC_CHECK(dropin_get_stats(comm, &st), "the drop-in is off under GCCL_COMPRESS=%s", SPEC);
  MC_CHECK(st.compressed + st.dense == 1, "one call counted %llu times",
           (unsigned long long)(st.compressed + st.dense));
  int compressed = st.compressed == 1, lo = 0, hi = 0;
  MPI_Allreduce(&compressed, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&compressed, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MC_CHECK(lo == hi, "the ranks decided differently (ranks per node %s, link %s)",
           ranks_per_node ? ranks_per_node : "-", link_gbps ? link_gbps : "measured");
  free(buf);
  MC_OK(gcclCommDestroy(comm), NULL);
  return compressed;
}

static void disagreeing(void) {
  if (mc_nranks < 2) return;
  mc_setenv("GCCL_COMPRESS", mc_rank == 1 ? SPEC : NULL);
  gcclComm_t comm = NULL;
  gcclResult_t res = gcclCommInitMpi(&comm, MPI_COMM_WORLD);
  mc_setenv("GCCL_COMPRESS", NULL);
  MC_CHECK(res == gcclInvalidUsage, "creation with auto: on rank 1 only returned %s", gcclGetErrorString(res));
  MC_CHECK(res != gcclSuccess || !comm, "a communicator was made");
  if (res == gcclInvalidUsage)
    MC_CHECK(strstr(gcclGetLastError(NULL), "GCCL_COMPRESS") != NULL, "the message does not name GCCL_COMPRESS: %s",
             gcclGetLastError(NULL));
  if (comm) gcclCommDestroy(comm);
}

int main(int argc, char** argv) {
  mc_init(&argc, &argv);
  MC_CHECK(one_call(NULL, NULL) == 0, "auto: compressed a call with every rank on one node");
  if (mc_nranks > 1) {
    MC_CHECK(one_call("1", "0.01") == 1, "auto: stayed dense on a link named 10 Mbit/s");
    MC_CHECK(one_call("1", "100000") == 0, "auto: compressed on a link named 100 Tbit/s");
    MC_CHECK(one_call("1", NULL) >= 0, "auto: with the link measured, the call failed");
  }
  disagreeing();
  return mc_finish("test_auto_mpi");
}
