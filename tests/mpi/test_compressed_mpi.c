/* test_compressed_mpi.c — compressed collectives over MPI ranks.
 *
 * Every rank must end with the same bits (replicas of a model drift apart
 * otherwise), whatever the codec and algorithm. Inputs are multiples of 1/16 in
 * [-4, 4), which fp16 holds exactly, and so do the sums of up to 4 of them: fp16
 * and topk:ratio=1 must then be exact, and uniform:bits=8 within a few
 * quantization steps; sign, top-k and random-k at ratio 0.1 and powersgd are
 * only checked for agreement and finite results. Each algorithm is forced through GCCL_ALGO (hier
 * with GCCL_RANKS_PER_NODE=2), plus the tuner's choice (one node, and nodes of
 * one rank) and the GCCL_COMPRESS drop-in. --quick runs a small subset. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

static int quick;

static float input(int rank, size_t i) {
  return (float)((int)((size_t)rank * 37 + i * 11) % 128 - 64) / 16.0f;
}

static double exact_sum(size_t i) {
  double s = 0;
  for (int r = 0; r < mc_nranks; r++) s += input(r, i);
  return s;
}

/* How far a codec may move a sum of nranks inputs: exact, within a bound, or
 * anything finite (-1). Quantizers err by under a step per encoding (1/255 of a
 * bucket's range: 8 for inputs, 8 nranks for sums), and the ring that re-encodes
 * at every hop stacks one per hop. */
static double tolerance(const char* spec) {
  double p = mc_nranks;
  if (!strcmp(spec, "fp16") || !strcmp(spec, "topk:ratio=1")) return 0;
  if (!strncmp(spec, "uniform", 7)) return (p * 8 + p * (p + 1) / 2 * 8 * p) / 255.0 + 1e-6;
  return -1;
}

static float* floats(size_t n) {
  float* p = malloc((n ? n : 1) * sizeof *p);
  if (!p) MPI_Abort(MPI_COMM_WORLD, 2);
  return p;
}

/* Fails when got[i] is not finite or further than tol from want(first + i) (tol < 0: finite only). */
static void expect_close(const float* got, size_t first, size_t n, double tol, const char* what, const char* spec,
                         size_t count, int line) {
  for (size_t i = 0; i < n; i++) {
    double want = exact_sum(first + i), err = fabs(got[i] - want);
    if (!isfinite(got[i]) || (tol >= 0 && err > tol)) {
      mc_fail(__FILE__, line, "%s %s count %zu: element %zu is %g, the exact sum %g (tolerance %g)", what, spec, count,
              first + i, (double)got[i], want, tol);
      return;
    }
  }
}

static void check_allreduce(gcclComm_t comm, const char* spec, size_t count, int in_place) {
  gcclCompressor_t c = NULL;
  MC_OK(gcclCompressorCreate(&c, spec, count, gcclFloat32), NULL);
  if (!c) return;
  float* send = floats(count);
  float* recv = floats(count);
  for (size_t i = 0; i < count; i++) send[i] = input(mc_rank, i);
  if (in_place) memcpy(recv, send, count * sizeof *send);
  MC_OK(gcclAllReduceCompressed(in_place ? recv : send, recv, count, gcclFloat32, gcclSum, c, comm, NULL), comm);
  char what[96];
  snprintf(what, sizeof what, "AllReduceCompressed %s count %zu", spec, count);
  MC_SAME_EVERYWHERE(recv, count * sizeof *recv, what);
  expect_close(recv, 0, count, tolerance(spec), "AllReduceCompressed", spec, count, __LINE__);
  MC_OK(gcclCompressorDestroy(c), NULL);
  free(send);
  free(recv);
}

/* Every rank's block, decoded alike everywhere; fp16 gives the inputs back. */
static void check_allgather(gcclComm_t comm, const char* spec, size_t count) {
  gcclCompressor_t c = NULL;
  MC_OK(gcclCompressorCreate(&c, spec, count, gcclFloat32), NULL);
  if (!c) return;
  size_t p = (size_t)mc_nranks;
  float* send = floats(count);
  float* recv = floats(p * count);
  for (size_t i = 0; i < count; i++) send[i] = input(mc_rank, i);
  MC_OK(gcclAllGatherCompressed(send, recv, count, gcclFloat32, c, comm, NULL), comm);
  MC_SAME_EVERYWHERE(recv, p * count * sizeof *recv, "AllGatherCompressed");
  for (size_t r = 0; r < p; r++)
    for (size_t i = 0; i < count; i++) {
      float want = input((int)r, i), got = recv[r * count + i];
      int ok = !strcmp(spec, "fp16") ? got == want : isfinite(got) && fabsf(got - want) <= 8.0f / 255 + 1e-6f;
      if (!ok) {
        mc_fail(__FILE__, __LINE__, "AllGatherCompressed %s count %zu: rank %zu's element %zu is %g, not %g", spec,
                count, r, i, (double)got, (double)want);
        r = p;
        break;
      }
    }
  MC_OK(gcclCompressorDestroy(c), NULL);
  free(send);
  free(recv);
}

static void check_reducescatter(gcclComm_t comm, const char* spec, size_t count) {
  size_t p = (size_t)mc_nranks;
  gcclCompressor_t c = NULL;
  MC_OK(gcclCompressorCreate(&c, spec, p * count, gcclFloat32), NULL);
  if (!c) return;
  float* send = floats(p * count);
  float* recv = floats(count);
  for (size_t i = 0; i < p * count; i++) send[i] = input(mc_rank, i);
  MC_OK(gcclReduceScatterCompressed(send, recv, count, gcclFloat32, gcclSum, c, comm, NULL), comm);
  expect_close(recv, (size_t)mc_rank * count, count, tolerance(spec), "ReduceScatterCompressed", spec, count, __LINE__);
  MC_OK(gcclCompressorDestroy(c), NULL);
  free(send);
  free(recv);
}

/* Dense allreduce of exact integers (GCCL_ALGO=hier runs it through the hierarchy). */
static void check_dense_allreduce(gcclComm_t comm, size_t count) {
  int32_t* buf = malloc((count ? count : 1) * sizeof *buf);
  for (size_t i = 0; i < count; i++) buf[i] = (int32_t)((size_t)mc_rank * 5 + i) % 17 - 8;
  MC_OK(gcclAllReduce(buf, buf, count, gcclInt32, gcclSum, comm, NULL), comm);
  for (size_t i = 0; i < count; i++) {
    int32_t want = 0;
    for (int r = 0; r < mc_nranks; r++) want += (int32_t)((size_t)r * 5 + i) % 17 - 8;
    if (buf[i] != want) {
      mc_fail(__FILE__, __LINE__, "dense AllReduce count %zu: element %zu is %d, not %d", count, i, buf[i], want);
      break;
    }
  }
  free(buf);
}

/* ---- the plan ---------------------------------------------------------------------- */

static const char* const quantizers[] = {"fp16", "uniform:bits=8", "sign"};
static const char* const sparse[] = {"topk:ratio=0.1", "topk:ratio=1"};
static const char* const all_specs[] = {"fp16",         "uniform:bits=8",  "sign",           "topk:ratio=0.1",
                                        "topk:ratio=1", "randk:ratio=0.1", "powersgd:rank=2"};
#define NUM_ALL_SPECS (sizeof all_specs / sizeof all_specs[0])

static size_t counts[6];
static int ncounts;

static void plan_counts(void) {
  size_t all[] = {1, (size_t)(mc_nranks > 1 ? mc_nranks - 1 : 2), 13, 4099, 100003};
  size_t few[] = {1, 13, 4099};
  ncounts = quick ? 3 : 5;
  memcpy(counts, quick ? few : all, (size_t)ncounts * sizeof *counts);
}

/* sra with parts longer than one decode slice (sra.c: 2^18 elements, MPI's
 * progress between slices) and its ring's first receive posted before phase 1's
 * sum: fp16 and uniform decode by slices, sign sums by blocks. */
static void long_part_cases(void) {
  mc_setenv("GCCL_ALGO", "sra");
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  mc_setenv("GCCL_ALGO", NULL);
  if (!comm) return;
  size_t count = (size_t)mc_nranks * 300001 + 5;
  for (int s = 0; s < 3; s++) check_allreduce(comm, quantizers[s], count, s % 2);
  MC_OK(gcclCommDestroy(comm), NULL);
}

/* Every rank on its own node (GCCL_RANKS_PER_NODE=1): the tuner sends fp16 round
 * ring-requant, and uniform is forced onto it. Chunks of over 2^20 elements go as
 * several segments (ring_requant.c), so up to 2K frames per neighbour are in
 * flight at once and must match in the order they were sent. */
static void segmented_ring_cases(void) {
  size_t count = (size_t)mc_nranks * (3u << 19) + 3;
  for (int forced = 0; forced < 2; forced++) {
    mc_setenv("GCCL_RANKS_PER_NODE", "1");
    mc_setenv("GCCL_ALGO", forced ? "ring-requant" : NULL);
    gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
    mc_setenv("GCCL_RANKS_PER_NODE", NULL);
    mc_setenv("GCCL_ALGO", NULL);
    if (!comm) return;
    for (int in_place = 0; in_place < 2; in_place++)
      check_allreduce(comm, forced ? "uniform:bits=8" : "fp16", count, in_place);
    MC_OK(gcclCommDestroy(comm), NULL);
  }
}

/* Allreduce of each spec on a communicator made with GCCL_ALGO=algo (and
 * GCCL_RANKS_PER_NODE=ranks_per_node when not NULL). */
static void allreduce_cases(const char* algo, const char* ranks_per_node, const char* const* specs, size_t nspecs) {
  mc_setenv("GCCL_ALGO", algo);
  mc_setenv("GCCL_RANKS_PER_NODE", ranks_per_node);
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  mc_setenv("GCCL_ALGO", NULL);
  mc_setenv("GCCL_RANKS_PER_NODE", NULL);
  if (!comm) return;
  for (size_t s = 0; s < nspecs; s++)
    for (int c = 0; c < ncounts; c++) check_allreduce(comm, specs[s], counts[c], c % 2);
  if (algo && !strcmp(algo, "hier"))
    for (int c = 0; c < ncounts; c++) check_dense_allreduce(comm, counts[c] * 3);
  MC_OK(gcclCommDestroy(comm), NULL);
}

/* GCCL_COMPRESS=fp16 sends plain gcclAllReduce calls through the codec: still exact here. */
static void dropin_cases(void) {
  mc_setenv("GCCL_COMPRESS", "fp16");
  mc_setenv("GCCL_COMPRESS_MIN_BYTES", "0");
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  mc_setenv("GCCL_COMPRESS", NULL);
  mc_setenv("GCCL_COMPRESS_MIN_BYTES", NULL);
  if (!comm) return;
  size_t count = 10007;
  float* buf = floats(count);
  for (size_t i = 0; i < count; i++) buf[i] = input(mc_rank, i);
  MC_OK(gcclAllReduce(buf, buf, count, gcclFloat32, gcclSum, comm, NULL), comm);
  MC_SAME_EVERYWHERE(buf, count * sizeof *buf, "drop-in AllReduce");
  expect_close(buf, 0, count, 0, "drop-in AllReduce", "fp16", count, __LINE__);
  free(buf);
  MC_OK(gcclCommDestroy(comm), NULL);
}

int main(int argc, char** argv) {
  mc_init(&argc, &argv);
  quick = mc_flag("--quick");
  plan_counts();
  allreduce_cases(NULL, NULL, all_specs, NUM_ALL_SPECS);
  if (!quick) {
    allreduce_cases("sra", NULL, quantizers, 3);
    long_part_cases();
    allreduce_cases("ring-requant", NULL, quantizers, 2);
    segmented_ring_cases();
    allreduce_cases("sparse-ag", NULL, sparse, 2);
    allreduce_cases("sparse-sr", NULL, sparse, 2);
  }
  /* Two nodes of two (or a node of two and one of one) at 3 and 4 ranks; nodes of
   * one rank each at 2. */
  if (mc_nranks >= 2) allreduce_cases("hier", mc_nranks >= 3 ? "2" : "1", all_specs, quick ? 2 : NUM_ALL_SPECS);

  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  if (comm) {
    const char* gather_specs[] = {"fp16", "uniform:bits=8"};
    for (int s = 0; s < 2; s++)
      for (int c = 0; c < ncounts; c++) {
        check_allgather(comm, gather_specs[s], counts[c]);
        check_reducescatter(comm, gather_specs[s], counts[c]);
      }
    MC_OK(gcclCommDestroy(comm), NULL);
  }
  dropin_cases();
  return mc_finish("test_compressed_mpi");
}
