/* test_faults_mpi.c — collectives under injected faults (GCCL_FAULT) on MPI ranks.
 *
 * Cases, each on its own communicator with GCCL_TIMEOUT_MS=1000:
 *   flip      a bit of a compressed frame (sra, uniform 8-bit) flipped
 *   truncate  a ring frame of phase 2 cut to its header (sra, fp16)
 *   drop      a message of a dense ring allreduce lost
 *   stop      a rank stops responding in the middle of a compressed allreduce
 * Every rank's call must fail (gcclCorruptData on the receiver of a corrupt frame,
 * and on the next too when the ring forwarded it first; gcclTimeout or
 * gcclRemoteError for a lost message or a silent rank) within the timeout
 * plus 3 s, leaving sendbuff and the residual as they were; then the same call on
 * a fresh communicator gives the bits a clean run gives, on every rank. All
 * communicators are made before any fails: Open MPI reuses a freed communicator's
 * context id, and a broken one's messages still in flight would reach its successor. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/faults.h"
#include "mpi_check.h"

#define N 6000
#define TIMEOUT_S 1.0
/* Well below the fresh communicators' 20 s, so a wait that ignores the timeout
 * still fails the check; 1 s of slack failed once while CI's other tests kept
 * both cores busy. */
#define SLACK_S 3.0

enum { CASE_FLIP, CASE_TRUNCATE, CASE_DROP, CASE_STOP, CASES };

static const struct {
  const char* name;
  const char* fault;
  const char* algo;
  const char* spec; /* NULL: dense */
  int corrupt;      /* a rank must report gcclCorruptData */
} cases[CASES] = {
    {"flip", "flip:rank=1,send=1,byte=70,bit=2", "sra", "uniform:bits=8,ef=1", 1},
    {"truncate", "truncate:rank=2,send=3,bytes=64", "sra", "fp16:ef=1", 1},
    {"drop", "drop:rank=1,send=2", "ring", NULL, 0},
    {"stop", "stop:rank=2,op=5", "sra", "uniform:bits=8,ef=1", 0},
};

static gcclComm_t make_comm(const char* fault, const char* algo, const char* timeout_ms) {
  const char* const env[][2] = {
      {"GCCL_FAULT", fault}, {"GCCL_ALGO", algo}, {"GCCL_TIMEOUT_MS", timeout_ms}, {NULL, NULL}};
  return mc_comm_with(MPI_COMM_WORLD, env);
}

static gcclCompressor_t make_compressor(const char* spec, const float* residual) {
  gcclCompressor_t c = NULL;
  if (!spec) return NULL;
  MC_OK(gcclCompressorCreate(&c, spec, N, gcclFloat32), NULL);
  if (c) MC_OK(gcclCompressorSetResidual(c, residual), NULL);
  return c;
}

static gcclResult_t allreduce(const float* in, float* out, gcclCompressor_t c, gcclComm_t comm) {
  if (!c) return gcclAllReduce(in, out, N, gcclFloat32, gcclSum, comm, NULL);
  return gcclAllReduceCompressed(in, out, N, gcclFloat32, gcclSum, c, comm, NULL);
}

int main(int argc, char** argv) {
  int level = mc_init(&argc, &argv);
  if (mc_nranks != 3 || level != MPI_THREAD_MULTIPLE) {
    if (mc_rank == 0) printf("test_faults_mpi needs 3 ranks at MPI_THREAD_MULTIPLE: skipped\n");
    return mc_finish("test_faults_mpi");
  }
  float* in = malloc(N * sizeof *in);
  float* in0 = malloc(N * sizeof *in0);
  float* residual = malloc(N * sizeof *residual);
  float* e = malloc(N * sizeof *e);
  float* out = malloc(N * sizeof *out);
  float* ref = malloc(N * sizeof *ref);
  for (int i = 0; i < N; i++) {
    in[i] = (float)((i % 97) - 48) * 0.01f * (float)(mc_rank + 1);
    residual[i] = (float)((i % 13) - 6) * 0.001f;
  }
  memcpy(in0, in, N * sizeof *in);

  gcclComm_t faulted[CASES], fresh[CASES], clean[CASES];
  for (int k = 0; k < CASES; k++) {
    faulted[k] = make_comm(cases[k].fault, cases[k].algo, "1000");
    fresh[k] = make_comm(NULL, cases[k].algo, "20000");
    clean[k] = make_comm(NULL, cases[k].algo, "20000");
  }
  uint64_t injected[FAULT_KINDS] = {0}, survived = 0;
  for (int k = 0; k < CASES; k++) {
    if (!faulted[k] || !fresh[k] || !clean[k]) continue;
    MPI_Barrier(MPI_COMM_WORLD);
    /* What the call gives without the fault, from the same state. */
    gcclCompressor_t twin = make_compressor(cases[k].spec, residual);
    MC_OK(allreduce(in, ref, twin, clean[k]), clean[k]);
    if (twin) gcclCompressorDestroy(twin);

    gcclCompressor_t c = make_compressor(cases[k].spec, residual);
    double start = mc_now();
    gcclResult_t res = allreduce(in, out, c, faulted[k]);
    double took = mc_now() - start;
    uint64_t n[FAULT_KINDS];
    MC_OK(comm_faults_injected(faulted[k], n), faulted[k]);
    for (int f = 0; f < FAULT_KINDS; f++) injected[f] += n[f];
    int failed = res != gcclSuccess, corrupt = res == gcclCorruptData, all_failed = 0, corrupt_ranks = 0;
    MPI_Allreduce(&failed, &all_failed, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    MPI_Allreduce(&corrupt, &corrupt_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MC_CHECK(failed, "%s: rank %d's call succeeded beside a failed one", cases[k].name, mc_rank);
    MC_CHECK(took < TIMEOUT_S + SLACK_S, "%s: rank %d failed after %.2f s (timeout %.1f s)", cases[k].name, mc_rank,
             took, TIMEOUT_S);
    if (cases[k].corrupt)
      MC_CHECK(corrupt_ranks >= 1, "%s: no rank reported gcclCorruptData", cases[k].name);
    else
      MC_CHECK(res == gcclTimeout || res == gcclRemoteError, "%s: rank %d returned %s: %s", cases[k].name, mc_rank,
               gcclGetErrorString(res), gcclGetLastError(faulted[k]));
    MC_CHECK(memcmp(in, in0, N * sizeof *in) == 0, "%s: sendbuff changed by a failed call", cases[k].name);
    if (c) {
      MC_OK(gcclCompressorGetResidual(c, e), NULL);
      MC_CHECK(memcmp(e, residual, N * sizeof *e) == 0, "%s: residual changed by a failed call", cases[k].name);
    }
    /* The same call on a fresh communicator: the clean run's bits. */
    MC_OK(allreduce(in, out, c, fresh[k]), fresh[k]);
    MC_CHECK(memcmp(out, ref, N * sizeof *out) == 0, "%s: the call again differs from a clean run", cases[k].name);
    MC_SAME_EVERYWHERE(out, N * sizeof *out, cases[k].name);
    if (c) gcclCompressorDestroy(c);
    survived += mc_all(all_failed && memcmp(out, ref, N * sizeof *out) == 0);
  }
  for (int k = 0; k < CASES; k++) {
    if (faulted[k]) MC_OK(gcclCommDestroy(faulted[k]), NULL);
    if (fresh[k]) MC_OK(gcclCommDestroy(fresh[k]), NULL);
    if (clean[k]) MC_OK(gcclCommDestroy(clean[k]), NULL);
  }
  uint64_t total[FAULT_KINDS];
  MPI_Reduce(injected, total, FAULT_KINDS, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (mc_rank == 0) {
    printf("[ faults ] injected:");
    for (int f = 0; f < FAULT_KINDS; f++)
      printf(" %s %llu", fault_kind_name((enum fault_kind)f), (unsigned long long)total[f]);
    printf("; cases survived %llu of %d\n", (unsigned long long)survived, CASES);
  }
  MC_CHECK(survived == CASES, "%llu of %d cases survived", (unsigned long long)survived, CASES);
  free(in);
  free(in0);
  free(residual);
  free(e);
  free(out);
  free(ref);
  return mc_finish("test_faults_mpi");
}
