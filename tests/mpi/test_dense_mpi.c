/* test_dense_mpi.c — every dense collective over MPI ranks, against exact references.
 *
 * Inputs are small integers, so every reduction is exact in every datatype and
 * results compare bit for bit: allreduce by ring, rhd, tree and split (GCCL_ALGO) and by
 * the tuner's choice, allgather, reducescatter, broadcast and reduce from every
 * root; several datatypes, every op; counts 0, 1, below the rank count, primes,
 * and counts the rank count does not divide; in place and out of place; and
 * calls back to back with one rank late in turn (no closing barrier over MPI).
 * --quick runs a small subset (for valgrind); --large adds allreduces long
 * enough for several of the segments of a communicator that spans nodes (run
 * with GCCL_RANKS_PER_NODE=1: 16 MiB segments). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_check.h"

static int quick;

/* ---- datatypes -------------------------------------------------------------- */

static size_t dt_size(gcclDataType_t dt) {
  switch (dt) {
    case gcclInt8:
    case gcclUint8:
      return 1;
    case gcclFloat16:
    case gcclBfloat16:
      return 2;
    case gcclInt32:
    case gcclUint32:
    case gcclFloat32:
      return 4;
    default:
      return 8;
  }
}

static int dt_unsigned(gcclDataType_t dt) {
  return dt == gcclUint8 || dt == gcclUint32 || dt == gcclUint64;
}

/* IEEE half of an integer of magnitude below 2048 (exact). */
static uint16_t half_of_int(int64_t v) {
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  uint64_t m = (uint64_t)(v < 0 ? -v : v);
  int e = 63 - __builtin_clzll(m);
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((m << (10 - e)) & 0x3ff));
}

/* Stores v (an integer, or any value for fp32/fp64) at element i. */
static void put(gcclDataType_t dt, void* buf, size_t i, double v) {
  switch (dt) {
    case gcclInt8:
      ((int8_t*)buf)[i] = (int8_t)v;
      break;
    case gcclUint8:
      ((uint8_t*)buf)[i] = (uint8_t)v;
      break;
    case gcclInt32:
      ((int32_t*)buf)[i] = (int32_t)v;
      break;
    case gcclUint32:
      ((uint32_t*)buf)[i] = (uint32_t)v;
      break;
    case gcclInt64:
      ((int64_t*)buf)[i] = (int64_t)v;
      break;
    case gcclUint64:
      ((uint64_t*)buf)[i] = (uint64_t)v;
      break;
    case gcclFloat16:
      ((uint16_t*)buf)[i] = half_of_int((int64_t)v);
      break;
    case gcclBfloat16: {
      float f = (float)v;
      uint32_t bits;
      memcpy(&bits, &f, 4);
      ((uint16_t*)buf)[i] = (uint16_t)(bits >> 16); /* exact for small integers */
      break;
    }
    case gcclFloat32:
      ((float*)buf)[i] = (float)v;
      break;
    default:
      ((double*)buf)[i] = v;
      break;
  }
}

/* ---- inputs and references ------------------------------------------------------ */

/* Rank r's input at element i: in [-4, 4] (unsigned: [0, 8]); for gcclProd one of
 * 1, 2, -1 (unsigned: 1, 2), so that products over 4 ranks stay exact. */
static int64_t input(gcclRedOp_t op, gcclDataType_t dt, int r, size_t i) {
  if (op == gcclProd) {
    int k = (int)((r + i) % 3);
    if (dt_unsigned(dt)) return k == 1 ? 2 : 1;
    return k == 0 ? 1 : k == 1 ? 2 : -1;
  }
  int64_t v = (int64_t)(((size_t)r * 7 + i * 3) % 9);
  return dt_unsigned(dt) ? v : v - 4;
}

/* The reduction over every rank of input(op, dt, r, i), stored at element i. */
static void put_reduced(gcclRedOp_t op, gcclDataType_t dt, int nranks, void* buf, size_t at, size_t i) {
  int64_t acc = input(op, dt, 0, i);
  for (int r = 1; r < nranks; r++) {
    int64_t v = input(op, dt, r, i);
    if (op == gcclSum || op == gcclAvg) acc += v;
    if (op == gcclProd) acc *= v;
    if (op == gcclMax) acc = v > acc ? v : acc;
    if (op == gcclMin) acc = v < acc ? v : acc;
  }
  if (op != gcclAvg) {
    put(dt, buf, at, (double)acc);
  } else if (dt == gcclFloat32) {
    put(dt, buf, at, (double)((float)acc / (float)nranks));
  } else if (dt == gcclFloat64) {
    put(dt, buf, at, (double)acc / nranks);
  } else {
    put(dt, buf, at, (double)(acc / nranks)); /* integers: C division, toward zero */
  }
}

/* gcclAvg of fp16 and bf16 rounds to the type: skipped rather than re-derived. */
static int op_applies(gcclRedOp_t op, gcclDataType_t dt) {
  return !(op == gcclAvg && (dt == gcclFloat16 || dt == gcclBfloat16));
}

static void fill_input(gcclRedOp_t op, gcclDataType_t dt, int r, void* buf, size_t first, size_t count) {
  for (size_t i = 0; i < count; i++) put(dt, buf, i, (double)input(op, dt, r, first + i));
}

static void* alloc_bytes(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return p;
}

/* Fails with the first differing element when got and want differ. */
static void expect_equal(const void* got, const void* want, gcclDataType_t dt, size_t count, const char* what,
                         size_t call_count, int in_place, int line) {
  size_t sz = dt_size(dt);
  if (!memcmp(got, want, count * sz)) return;
  size_t i = 0;
  while (i < count && !memcmp((const char*)got + i * sz, (const char*)want + i * sz, sz)) i++;
  mc_fail(__FILE__, line, "%s count %zu %s datatype %d: element %zu differs", what, call_count,
          in_place ? "in place" : "out of place", (int)dt, i);
}

/* ---- the collectives ------------------------------------------------------------- */

static void check_allreduce(gcclComm_t comm, gcclDataType_t dt, gcclRedOp_t op, size_t count, int in_place) {
  size_t bytes = count * dt_size(dt);
  void* send = alloc_bytes(bytes);
  void* recv = alloc_bytes(bytes);
  void* want = alloc_bytes(bytes);
  fill_input(op, dt, mc_rank, send, 0, count);
  for (size_t i = 0; i < count; i++) put_reduced(op, dt, mc_nranks, want, i, i);
  if (in_place) memcpy(recv, send, bytes);
  MC_OK(gcclAllReduce(in_place ? recv : send, recv, count, dt, op, comm, NULL), comm);
  expect_equal(recv, want, dt, count, "AllReduce", count, in_place, __LINE__);
  free(send);
  free(recv);
  free(want);
}

static void check_allgather(gcclComm_t comm, gcclDataType_t dt, size_t count, int in_place) {
  size_t sz = dt_size(dt), p = (size_t)mc_nranks;
  void* send = alloc_bytes(count * sz);
  void* recv = alloc_bytes(p * count * sz);
  void* want = alloc_bytes(p * count * sz);
  fill_input(gcclSum, dt, mc_rank, send, 0, count);
  for (int r = 0; r < mc_nranks; r++) fill_input(gcclSum, dt, r, (char*)want + (size_t)r * count * sz, 0, count);
  void* mine = (char*)recv + (size_t)mc_rank * count * sz;
  if (in_place) memcpy(mine, send, count * sz);
  MC_OK(gcclAllGather(in_place ? mine : send, recv, count, dt, comm, NULL), comm);
  expect_equal(recv, want, dt, p * count, "AllGather", count, in_place, __LINE__);
  free(send);
  free(recv);
  free(want);
}

static void check_reducescatter(gcclComm_t comm, gcclDataType_t dt, gcclRedOp_t op, size_t count, int in_place) {
  size_t sz = dt_size(dt), p = (size_t)mc_nranks;
  void* send = alloc_bytes(p * count * sz);
  void* recv = alloc_bytes(count * sz);
  void* want = alloc_bytes(count * sz);
  fill_input(op, dt, mc_rank, send, 0, p * count);
  size_t first = (size_t)mc_rank * count;
  for (size_t i = 0; i < count; i++) put_reduced(op, dt, mc_nranks, want, i, first + i);
  void* out = in_place ? (char*)send + first * sz : recv;
  MC_OK(gcclReduceScatter(send, out, count, dt, op, comm, NULL), comm);
  expect_equal(out, want, dt, count, "ReduceScatter", count, in_place, __LINE__);
  free(send);
  free(recv);
  free(want);
}

static void check_broadcast(gcclComm_t comm, gcclDataType_t dt, size_t count, int root, int in_place) {
  size_t bytes = count * dt_size(dt);
  void* send = alloc_bytes(bytes);
  void* recv = alloc_bytes(bytes);
  void* want = alloc_bytes(bytes);
  fill_input(gcclSum, dt, root, want, 0, count);
  fill_input(gcclSum, dt, mc_rank, send, 0, count); /* only the root's counts */
  memset(recv, 0x5a, bytes);
  if (in_place && mc_rank == root) memcpy(recv, send, bytes);
  MC_OK(gcclBroadcast(in_place ? recv : send, recv, count, dt, root, comm, NULL), comm);
  expect_equal(recv, want, dt, count, "Broadcast", count, in_place, __LINE__);
  free(send);
  free(recv);
  free(want);
}

static void check_reduce(gcclComm_t comm, gcclDataType_t dt, gcclRedOp_t op, size_t count, int root, int in_place) {
  size_t bytes = count * dt_size(dt);
  void* send = alloc_bytes(bytes);
  void* recv = alloc_bytes(bytes);
  void* want = alloc_bytes(bytes);
  fill_input(op, dt, mc_rank, send, 0, count);
  if (in_place) {
    memcpy(recv, send, bytes);
    memcpy(want, send, bytes); /* a non-root's buffer keeps its input */
  } else {
    memset(recv, 0x5a, bytes);
    memset(want, 0x5a, bytes); /* a non-root's receive buffer is not written */
  }
  if (mc_rank == root)
    for (size_t i = 0; i < count; i++) put_reduced(op, dt, mc_nranks, want, i, i);
  MC_OK(gcclReduce(in_place ? recv : send, recv, count, dt, op, root, comm, NULL), comm);
  expect_equal(recv, want, dt, count, "Reduce", count, in_place, __LINE__);
  free(send);
  free(recv);
  free(want);
}

/* ---- the plan ---------------------------------------------------------------------- */

static const gcclDataType_t dtypes[] = {gcclInt8,     gcclUint32,  gcclInt64,  gcclFloat16,
                                        gcclBfloat16, gcclFloat32, gcclFloat64};
static const gcclRedOp_t ops[] = {gcclSum, gcclProd, gcclMax, gcclMin, gcclAvg};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])
#define NOPS (sizeof ops / sizeof ops[0])

/* 0, 1, below p, primes, not divisible by p. */
static size_t counts[8];
static int ncounts;

static void plan_counts(void) {
  size_t all[] = {0, 1, (size_t)(mc_nranks > 1 ? mc_nranks - 1 : 2), 7, 13, 1001, 4099};
  size_t few[] = {0, 1, 13};
  size_t* src = quick ? few : all;
  ncounts = quick ? 3 : 7;
  memcpy(counts, src, (size_t)ncounts * sizeof *counts);
}

/* Allreduce with GCCL_ALGO=algo (NULL: the tuner's choice). */
static void allreduce_cases(const char* algo) {
  mc_setenv("GCCL_ALGO", algo);
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  mc_setenv("GCCL_ALGO", NULL);
  if (!comm) return;
  for (size_t d = 0; d < NDTYPES; d++)
    for (size_t o = 0; o < NOPS; o++) {
      if (!op_applies(ops[o], dtypes[d]) || (quick && d % 3)) continue;
      for (int c = 0; c < ncounts; c++)
        for (int in_place = 0; in_place < 2; in_place++) check_allreduce(comm, dtypes[d], ops[o], counts[c], in_place);
    }
  /* The in-band allreduce (the tuner's choice up to 64 KiB over MPI) at its
   * edges: 240 and 256 bytes, 2 KiB and past it (doubling, halving with 4 ranks
   * and more), 4000 bytes and past (halving with 2), 64 KiB and one element more
   * (the usual path). */
  if (!algo && !quick) {
    const size_t edges[] = {60, 64, 65, 512, 513, 999, 1001, 1024, 16383, 16384, 16385};
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
      check_allreduce(comm, gcclFloat32, gcclSum, edges[e], (int)(e % 2));
      check_allreduce(comm, gcclFloat64, gcclMax, edges[e] / 2, 0);
      check_allreduce(comm, gcclBfloat16, gcclSum, edges[e] * 2, 1);
      check_allreduce(comm, gcclInt32, gcclAvg, edges[e], 0);
    }
  }
  /* Large enough for every algorithm's pipelined steps and the tuner's large-message path. */
  if (!quick) {
    check_allreduce(comm, gcclFloat32, gcclSum, 300007, 0);
    check_allreduce(comm, gcclInt32, gcclMax, 1 << 20, 1);
  }
  MC_OK(gcclCommDestroy(comm), NULL);
}

/* Values whose sums round (not integers): every rank must still get the same
 * bits, whichever operand order its steps took. Up to the in-band path's 64 KiB,
 * fp32, bf16 and fp16 (which round at every partial sum). */
static void identical_across_ranks(void) {
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  if (!comm) return;
  const size_t counts_rounding[] = {3, 64, 1000, 16384};
  const gcclDataType_t types[] = {gcclFloat32, gcclBfloat16, gcclFloat16};
  for (size_t c = 0; c < sizeof counts_rounding / sizeof *counts_rounding; c++)
    for (size_t t = 0; t < 3; t++) {
      size_t n = counts_rounding[c], sz = dt_size(types[t]);
      float* src = alloc_bytes(n * sizeof(float));
      unsigned char* buf = alloc_bytes(n * sz);
      unsigned char* first = alloc_bytes(n * sz);
      for (size_t i = 0; i < n; i++) src[i] = 1.0f / (float)(3 + (i * 7 + (size_t)mc_rank * 13) % 101);
      for (size_t i = 0; i < n; i++) {
        if (sz == 4) {
          memcpy(buf + 4 * i, &src[i], 4);
        } else {
          uint32_t bits;
          memcpy(&bits, &src[i], 4);
          uint16_t h = types[t] == gcclBfloat16 ? (uint16_t)(bits >> 16) : (uint16_t)(0x3000 + (bits >> 13 & 0x3ff));
          memcpy(buf + 2 * i, &h, 2);
        }
      }
      MC_OK(gcclAllReduce(buf, buf, n, types[t], gcclSum, comm, NULL), comm);
      if (mc_rank == 0) memcpy(first, buf, n * sz);
      MPI_Bcast(first, (int)(n * sz), MPI_BYTE, 0, MPI_COMM_WORLD);
      MC_CHECK(!memcmp(first, buf, n * sz), "count %zu datatype %d: rank %d's sums differ from rank 0's", n,
               (int)types[t], mc_rank);
      free(src);
      free(buf);
      free(first);
    }
  MC_OK(gcclCommDestroy(comm), NULL);
}

/* Every rank's chunk of the ring over two 16 MiB segments (the second one
 * short), and as many for rhd's halves, tree's pieces and split's chunks (two
 * segments of 16 MiB / (p - 1) at p = 3). */
static void large_cases(void) {
  const char* algos[] = {"ring", "rhd", "tree", "split"};
  for (int a = 0; a < 4; a++) {
    mc_setenv("GCCL_ALGO", algos[a]);
    gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
    mc_setenv("GCCL_ALGO", NULL);
    if (!comm) return;
    check_allreduce(comm, gcclFloat32, gcclSum, (size_t)mc_nranks * 6000000 + 7, a == 1);
    MC_OK(gcclCommDestroy(comm), NULL);
  }
}

/* Calls back to back with one rank late in turn, so that the others run ahead
 * into the next call: a dense allreduce, reduce-scatter or allgather over MPI
 * ends without the closing barrier (core/execute.c), and its peers' next
 * messages (the in-band exchange's, received with any tag; the next schedule's)
 * must wait for the late rank and never be taken for this call's. Every result
 * is checked, then a mismatched call must fail on every rank and leave the
 * communicator usable. */
static void calls_back_to_back(const char* algo) {
  mc_setenv("GCCL_ALGO", algo);
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  mc_setenv("GCCL_ALGO", NULL);
  if (!comm) return;
  const size_t sizes[] = {300007, 16, 70001, 1, 4099, 131072};
  for (int i = 0; i < 24; i++) {
    struct timespec late = {0, 2000000};
    if (mc_rank == i % mc_nranks) nanosleep(&late, NULL);
    size_t n = sizes[i % 6];
    switch (i % 4) {
      case 0:
      case 3:
        check_allreduce(comm, i % 3 ? gcclFloat32 : gcclInt32, gcclSum, n, i % 2);
        break;
      case 1:
        check_reducescatter(comm, gcclFloat32, gcclSum, n / (size_t)mc_nranks + 1, 0);
        break;
      case 2:
        check_allgather(comm, gcclInt8, n / (size_t)mc_nranks + 1, 1);
        break;
    }
  }
  if (mc_nranks > 1) {
    size_t n = mc_rank == 1 ? 300008 : 300007;
    float* buf = alloc_bytes(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
    gcclResult_t res = gcclAllReduce(buf, buf, n, gcclFloat32, gcclSum, comm, NULL);
    MC_CHECK(res == gcclInvalidUsage, "a call of another count on rank 1 returned %d, not gcclInvalidUsage", (int)res);
    MC_CHECK(buf[0] == 1.0f && buf[n - 1] == 1.0f, "a mismatched call wrote the receive buffer");
    free(buf);
    check_allreduce(comm, gcclFloat32, gcclSum, 300007, 0);
  }
  MC_OK(gcclCommDestroy(comm), NULL);
}

static void other_collective_cases(void) {
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  if (!comm) return;
  for (size_t d = 0; d < NDTYPES; d++) {
    if (quick && d % 3) continue;
    for (int c = 0; c < ncounts; c++)
      for (int in_place = 0; in_place < 2; in_place++) {
        check_allgather(comm, dtypes[d], counts[c], in_place);
        for (size_t o = 0; o < NOPS; o++)
          if (op_applies(ops[o], dtypes[d])) check_reducescatter(comm, dtypes[d], ops[o], counts[c], in_place);
        for (int root = 0; root < mc_nranks; root++) {
          check_broadcast(comm, dtypes[d], counts[c], root, in_place);
          gcclRedOp_t op = ops[(size_t)root % NOPS]; /* root 4 of 5 ranks or more: gcclAvg */
          check_reduce(comm, dtypes[d], op_applies(op, dtypes[d]) ? op : gcclSum, counts[c], root, in_place);
        }
      }
  }
  if (!quick) {
    check_allgather(comm, gcclFloat32, 100003, 0);
    check_reducescatter(comm, gcclFloat32, gcclSum, 100003, 1);
    check_broadcast(comm, gcclFloat64, 100003, mc_nranks - 1, 0);
    check_reduce(comm, gcclInt32, gcclSum, 100003, 0, 0);
  }
  MC_OK(gcclCommDestroy(comm), NULL);
}

int main(int argc, char** argv) {
  mc_init(&argc, &argv);
  quick = mc_flag("--quick");
  int large = mc_flag("--large");
  plan_counts();
  const char* algos[] = {NULL, "ring", "rhd", "tree", "split"};
  for (int a = 0; a < 5; a++)
    if (!quick || a < 2) allreduce_cases(algos[a]);
  other_collective_cases();
  const char* back_to_back[] = {NULL, "ring", "rhd", "tree", "split"};
  for (int a = 0; a < 5; a++)
    if (!quick || a == 0) calls_back_to_back(back_to_back[a]);
  identical_across_ranks();
  if (large) large_cases();
  return mc_finish("test_dense_mpi");
}
