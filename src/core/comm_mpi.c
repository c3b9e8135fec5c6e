/* comm_mpi.c — gcclCommInitMpi: a communicator of the processes of an MPI
 * communicator, one rank each, over the MPI transport (gccl_mpi.h). */
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"
#include "core/dropin.h"
#include "core/in_band_limit.h"
#include "core/link_probe.h"
#include "gccl_mpi.h"
#include "transport/mpi.h"
#include "transport/sim.h"

static const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

/* The ranks per node for the hierarchical algorithms, which need nodes to be equal
 * blocks of consecutive ranks (the last may be smaller): the block size when the
 * ranks that share memory form such blocks, else nranks (one flat node). Each
 * rank learns the lowest rank of its node; the nodes are blocks of L when rank r's
 * lowest is r - r % L for every r, L being the size of rank 0's node. *one_node:
 * every rank shares this node's memory (whatever the blocks). Collective. */
static gcclResult_t detect_node_size(MPI_Comm comm, int rank, int nranks, int* node_size, int* one_node) {
  *node_size = nranks;
  MPI_Comm node;
  int rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "gcclCommInitMpi: MPI_Comm_split_type");
  int lowest = rank, here = 0;
  MPI_Comm_size(node, &here);
  *one_node = here == nranks; /* the same answer on every rank */
  rc = MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "gcclCommInitMpi: MPI_Allreduce on the node");
  int* lowest_of = malloc((size_t)nranks * sizeof *lowest_of);
  if (!lowest_of) return err_set(gcclSystemError, "gcclCommInitMpi: out of memory for %d ranks", nranks);
  rc = MPI_Allgather(&lowest, 1, MPI_INT, lowest_of, 1, MPI_INT, comm);
  if (rc != MPI_SUCCESS) {
    free(lowest_of);
    return mpi_error(rc, "gcclCommInitMpi: MPI_Allgather of the nodes");
  }
  int block = 0;
  while (block < nranks && lowest_of[block] == 0) block++;
  int misplaced = -1;
  for (int r = 0; r < nranks && misplaced < 0; r++)
    if (lowest_of[r] != r - r % block) misplaced = r;
  if (misplaced < 0) {
    *node_size = block;
  } else {
    GCCL_INFO(LOG_INIT,
              "ranks that share memory are not blocks of %d consecutive ranks (rank %d is on the node of rank %d): "
              "one flat node for the hierarchical algorithms (GCCL_RANKS_PER_NODE overrides)",
              block, misplaced, lowest_of[misplaced]);
  }
  free(lowest_of);
  return gcclSuccess;
}

/* A name for the communicator, the same on every rank: rank 0 draws it. */
static gcclResult_t agree_comm_id(MPI_Comm comm, int rank, uint64_t* id) {
  *id = 0;
  if (rank == 0 && getrandom(id, sizeof *id, 0) != (ssize_t)sizeof *id) *id = (uint64_t)clock_now_ns();
  int rc = MPI_Bcast(id, 1, MPI_UINT64_T, 0, comm);
  return rc == MPI_SUCCESS ? gcclSuccess : mpi_error(rc, "gcclCommInitMpi: MPI_Bcast of the communicator's id");
}

/* What every rank tells the others once its part of the setup is done. */
struct setup_report {
  int32_t result;       /* gcclResult_t of this rank's setup */
  int32_t local_size;   /* ranks per node (GCCL_RANKS_PER_NODE): hier's nodes and the scratch size follow it */
  uint64_t chunk_bytes; /* GCCL_MPI_CHUNK_BYTES: must agree, or messages split differently */
  int32_t measures;     /* GCCL_COMPRESS=auto: (dropin_measures): all ranks time the link, or none */
  int32_t pad;
};

/* Every rank learns whether all ranks succeeded, so that they fail together
 * instead of leaving the others waiting on a communicator that one lacks, and
 * that the settings every rank must share agree. */
static gcclResult_t setup_agree(MPI_Comm comm, int nranks, gcclResult_t mine, const struct setup_report* settings) {
  struct setup_report me = *settings;
  me.result = mine;
  struct setup_report* all = malloc((size_t)nranks * sizeof *all);
  if (!all) return err_set(gcclSystemError, "gcclCommInitMpi: out of memory for %d ranks", nranks);
  int rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, comm);
  gcclResult_t res = rc != MPI_SUCCESS ? mpi_error(rc, "gcclCommInitMpi: MPI_Allgather of the setup") : mine;
  for (int r = 0; r < nranks && res == gcclSuccess; r++) {
    if (all[r].result != gcclSuccess)
      res = err_set(gcclSystemError, "gcclCommInitMpi: rank %d could not create its part of the communicator (%s)", r,
                    gcclGetErrorString((gcclResult_t)all[r].result));
    else if (all[r].chunk_bytes != all[0].chunk_bytes)
      res = err_set(gcclInvalidUsage,
                    "gcclCommInitMpi: GCCL_MPI_CHUNK_BYTES differs between ranks: rank 0 splits messages at %llu "
                    "bytes, rank %d at %llu",
                    (unsigned long long)all[0].chunk_bytes, r, (unsigned long long)all[r].chunk_bytes);
    else if (all[r].local_size != all[0].local_size)
      res = err_set(gcclInvalidUsage,
                    "gcclCommInitMpi: the ranks per node differ between ranks (GCCL_RANKS_PER_NODE): rank 0 has %d, "
                    "rank %d has %d",
                    (int)all[0].local_size, r, (int)all[r].local_size);
    else if (all[r].measures != all[0].measures)
      res =
          err_set(gcclInvalidUsage, "gcclCommInitMpi: GCCL_COMPRESS differs between ranks: rank 0 %s auto:, rank %d %s",
                  all[0].measures ? "uses" : "does not use", r, all[r].measures ? "does" : "does not");
  }
  free(all);
  return res;
}

gcclResult_t gcclCommInitMpi(gcclComm_t* comm, MPI_Comm mpiComm) {
  log_init();
  GCCL_CHECK(argcheck_not_null(comm, "gcclCommInitMpi", "comm"));
  *comm = NULL;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return err_set(gcclInvalidUsage, "gcclCommInitMpi: MPI is already finalized");
  if (!initialized) return err_set(gcclInvalidUsage, "gcclCommInitMpi: MPI is not initialised (call MPI_Init_thread)");
  GCCL_CHECK(argcheck_mpi_comm(mpiComm));
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);

  /* gccl's messages live on a duplicate, so they never match the application's. */
  MPI_Comm dup;
  int rc;
  if ((rc = MPI_Comm_dup(mpiComm, &dup)) != MPI_SUCCESS) return mpi_error(rc, "gcclCommInitMpi: MPI_Comm_dup");
  int rank = 0, nranks = 1, node_size = 1, one_node = 0;
  uint64_t comm_id = 0;
  gcclResult_t res = gcclSuccess;
  if ((rc = MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
      (rc = MPI_Comm_rank(dup, &rank)) != MPI_SUCCESS || (rc = MPI_Comm_size(dup, &nranks)) != MPI_SUCCESS)
    res = mpi_error(rc, "gcclCommInitMpi: setting up the duplicate communicator");
  if (res == gcclSuccess) res = detect_node_size(dup, rank, nranks, &node_size, &one_node);
  if (res == gcclSuccess) res = agree_comm_id(dup, rank, &comm_id);
  if (res != gcclSuccess) {
    MPI_Comm_free(&dup);
    return res;
  }

  /* This rank's part; a failure is reported to every rank below. */
  gcclComm_t c = NULL;
  struct transport* mpi_tp = NULL;
  res = comm_alloc(&c, rank, nranks, node_size, 1);
  if (res == gcclSuccess) {
    log_set_rank(rank);
    res = mpi_transport_create(&c->tp, dup, comm_id, c->timeout_ms, level, one_node);
    mpi_tp = c->tp; /* comm_faults_install may wrap it */
  }
  struct setup_report settings = {0};
  if (res == gcclSuccess) {
    settings = (struct setup_report){.local_size = c->ctx.local_size,
                                     .chunk_bytes = mpi_transport_chunk_bytes(c->tp),
                                     .measures = dropin_measures(c)};
    res = comm_faults_install(c);
  }
  gcclResult_t all = setup_agree(dup, nranks, res, &settings);
  if (res == gcclSuccess) res = all;
  /* On every rank or none: under GCCL_FAULT, whose decorator offers no board, none. */
  if (res == gcclSuccess && one_node) res = mpi_transport_add_board(mpi_tp, c->tp == mpi_tp);
  if (res == gcclSuccess) {
    c->ctx.tp = c->tp;
    res = link_measure(c); /* on every rank, or (setup_agree) on none */
    if (res == gcclSuccess) res = in_band_limit_measure(c);
    if (res == gcclSuccess) res = dropin_measure(c);
  }
  if (res != gcclSuccess) {
    int owned = c && c->tp; /* the transport frees the duplicate */
    if (c) comm_free(c);
    if (!owned) MPI_Comm_free(&dup);
    return res;
  }
  struct sim_config sim;
  if (sim_config_from_env(&sim, c->ctx.local_size))
    GCCL_WARN("GCCL_SIM_LINK_* ignored: the link model serves thread ranks; MPI ranks use the real network");
  GCCL_INFO(LOG_INIT, "comm %p rank %d of %d ready (mpi transport, %d ranks per node, %s)", (void*)c, rank, nranks,
            c->ctx.local_size, thread_level_name(level));
  *comm = c;
  return gcclSuccess;
}
