/* test_errors_mpi.c — gcclCommInitMpi's argument checks, sub-communicators,
 * calls that ranks disagree on, and streams and groups at each MPI thread level.
 *
 * Run with --thread=serialized or --thread=funneled to check that streams and
 * groups are refused below MPI_THREAD_MULTIPLE while plain calls work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

#define N 1000

/* ---- creation -------------------------------------------------------------------- */

static void check_init_arguments(void) {
  gcclComm_t comm = (gcclComm_t)(uintptr_t)1;
  MC_FAILS(gcclCommInitMpi(NULL, MPI_COMM_WORLD), gcclInvalidArgument, NULL);
  MC_FAILS(gcclCommInitMpi(&comm, MPI_COMM_NULL), gcclInvalidArgument, NULL);
  MC_CHECK(comm == NULL, "a failed gcclCommInitMpi left *comm set");
  if (mc_nranks < 2) return;
  /* An intercommunicator between the even and the odd ranks. */
  MPI_Comm half, inter;
  MPI_Comm_split(MPI_COMM_WORLD, mc_rank % 2, mc_rank, &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, mc_rank % 2 ? 0 : 1, 7, &inter);
  MC_FAILS(gcclCommInitMpi(&comm, inter), gcclInvalidArgument, NULL);
  MC_CHECK(strstr(gcclGetLastError(NULL), "intercommunicator") != NULL, "the message does not say why: %s",
           gcclGetLastError(NULL));
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
}

/* A destroyed or aborted MPI communicator is refused by every function, at once,
 * without a message to any peer; the MPI communicator it came from is untouched. */
static void check_dead_handles(void) {
  gcclComm_t dead[2] = {mc_comm(MPI_COMM_WORLD), mc_comm(MPI_COMM_WORLD)};
  if (!dead[0] || !dead[1]) return;
  MC_OK(gcclCommDestroy(dead[0]), NULL);
  MC_OK(gcclCommAbort(dead[1]), NULL);
  for (int i = 0; i < 2; i++) {
    float x[4] = {1, 2, 3, 4};
    int n = -1;
    MC_FAILS(gcclAllReduce(x, x, 4, gcclFloat32, gcclSum, dead[i], NULL), gcclInvalidArgument, NULL);
    MC_CHECK(strstr(gcclGetLastError(NULL), "not a live communicator") != NULL, "the message does not say why: %s",
             gcclGetLastError(NULL));
    MC_FAILS(gcclBroadcast(x, x, 4, gcclFloat32, 0, dead[i], NULL), gcclInvalidArgument, NULL);
    MC_FAILS(gcclCommCount(dead[i], &n), gcclInvalidArgument, NULL);
    MC_CHECK(n == -1, "gcclCommCount wrote through a destroyed communicator");
    MC_FAILS(gcclCommDestroy(dead[i]), gcclInvalidArgument, NULL);
    MC_FAILS(gcclCommAbort(dead[i]), gcclInvalidArgument, NULL);
  }
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MC_CHECK(sum == mc_nranks, "MPI_COMM_WORLD after the dead handles: %d", sum);
}

/* Settings every rank must share: when the last rank's differs, creation fails
 * on every rank with gcclInvalidUsage and a message naming it, and a
 * communicator made afterwards works. */
static void check_setting_disagrees(const char* name, const char* value) {
  if (mc_nranks < 2) return;
  mc_setenv(name, mc_rank == mc_nranks - 1 ? value : NULL);
  gcclComm_t comm = (gcclComm_t)(uintptr_t)1;
  gcclResult_t res = gcclCommInitMpi(&comm, MPI_COMM_WORLD);
  mc_setenv(name, NULL);
  MC_CHECK(res == gcclInvalidUsage, "%s=%s on the last rank only: creation returned %s", name, value,
           gcclGetErrorString(res));
  MC_CHECK(comm == NULL, "a failed gcclCommInitMpi left *comm set");
  MC_CHECK(strstr(gcclGetLastError(NULL), name) != NULL, "the message does not name %s: %s", name,
           gcclGetLastError(NULL));
  if (res == gcclSuccess) MC_OK(gcclCommDestroy(comm), NULL);
  comm = mc_comm(MPI_COMM_WORLD);
  if (!comm) return;
  float x = 1;
  MC_OK(gcclAllReduce(&x, &x, 1, gcclFloat32, gcclSum, comm, NULL), comm);
  MC_CHECK(x == (float)mc_nranks, "an allreduce after the failed creation gave %g", (double)x);
  MC_OK(gcclCommDestroy(comm), NULL);
}

/* A communicator of the even (odd) ranks in reverse order, its MPI communicator
 * freed at once: gccl keeps its own duplicate. */
static void check_subcommunicator(void) {
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, mc_rank % 2, -mc_rank, &sub);
  int sub_rank, sub_size;
  MPI_Comm_rank(sub, &sub_rank);
  MPI_Comm_size(sub, &sub_size);
  gcclComm_t comm = mc_comm(sub);
  MPI_Comm_free(&sub);
  if (!comm) return;
  int rank = -1, count = -1;
  MC_OK(gcclCommUserRank(comm, &rank), comm);
  MC_OK(gcclCommCount(comm, &count), comm);
  MC_CHECK(rank == sub_rank && count == sub_size, "rank %d of %d, MPI says %d of %d", rank, count, sub_rank, sub_size);
  int64_t x = mc_rank, want = 0;
  for (int r = mc_rank % 2; r < mc_nranks; r += 2) want += r;
  MC_OK(gcclAllReduce(&x, &x, 1, gcclInt64, gcclSum, comm, NULL), comm);
  MC_CHECK(x == want, "the sum of the world ranks of the sub-communicator is %lld, not %lld", (long long)x,
           (long long)want);
  MC_OK(gcclCommDestroy(comm), NULL);

  gcclComm_t self = mc_comm(MPI_COMM_SELF);
  if (!self) return;
  float v = 3;
  MC_OK(gcclAllReduce(&v, &v, 1, gcclFloat32, gcclSum, self, NULL), self);
  MC_CHECK(v == 3, "an allreduce on MPI_COMM_SELF gave %g", (double)v);
  MC_OK(gcclCommDestroy(self), NULL);
}

/* ---- ranks that disagree ------------------------------------------------------------- */

/* After the mismatch every rank returned gcclInvalidUsage naming `word`, and the
 * communicator still works. */
static void expect_mismatch(gcclComm_t comm, gcclResult_t res, const char* word, int line) {
  if (res != gcclInvalidUsage)
    mc_fail(__FILE__, line, "a mismatched call returned %s, not invalid usage (%s)", gcclGetErrorString(res),
            gcclGetLastError(comm));
  else if (!strstr(gcclGetLastError(comm), word))
    mc_fail(__FILE__, line, "the mismatch message does not name the %s: %s", word, gcclGetLastError(comm));
  float x = 1;
  MC_OK(gcclAllReduce(&x, &x, 1, gcclFloat32, gcclSum, comm, NULL), comm);
  MC_CHECK(x == (float)mc_nranks, "the communicator is unusable after a mismatch");
}

static void check_mismatches(void) {
  if (mc_nranks < 2) return;
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  if (!comm) return;
  float* a = calloc(100 * N, sizeof *a);
  float* b = calloc(100 * N, sizeof *b);
  int odd = mc_rank == mc_nranks - 1; /* the rank that disagrees */

  expect_mismatch(comm, gcclAllReduce(a, b, odd ? N + 1 : N, gcclFloat32, gcclSum, comm, NULL), "count", __LINE__);
  expect_mismatch(comm, gcclAllReduce(a, b, N, odd ? gcclInt32 : gcclFloat32, gcclSum, comm, NULL), "datatype",
                  __LINE__);
  expect_mismatch(comm, gcclAllReduce(a, b, N, gcclFloat32, odd ? gcclMax : gcclSum, comm, NULL), "op", __LINE__);
  expect_mismatch(comm, gcclBroadcast(a, b, N, gcclFloat32, odd ? 1 : 0, comm, NULL), "root", __LINE__);
  expect_mismatch(
      comm,
      odd ? gcclAllGather(a, b, N, gcclFloat32, comm, NULL) : gcclAllReduce(a, b, N, gcclFloat32, gcclSum, comm, NULL),
      "collective", __LINE__);

  /* Small allreduces agree in band (collectives/in_band.c, or on_board.c on the
   * board of one node; mpi_errors_noboard_np4 runs without it): one rank's call of
   * 64 floats, of 600 (halved with 4 ranks), or on the usual path (100000),
   * against 10 floats; an allreduce against a broadcast. The receive buffer
   * keeps what it held. */
  const size_t odd_counts[] = {64, 600, 100 * N};
  for (int k = 0; k < 3; k++) {
    for (size_t i = 0; i < 4 * N; i++) b[i] = -1;
    expect_mismatch(comm, gcclAllReduce(a, b, odd ? odd_counts[k] : 10, gcclFloat32, gcclSum, comm, NULL), "count",
                    __LINE__);
    MC_CHECK(b[0] == -1 && b[9] == -1, "a mismatched allreduce wrote its receive buffer (count %zu)", odd_counts[k]);
  }
  /* Ranks 0 and 3 halve (600 floats), 1 and 2 double (10): had halving met its
   * partners in another order than doubling, 0, 2, 3 and 1 would each wait for
   * the next (a timeout, not a mismatch). */
  if (mc_nranks >= 4)
    expect_mismatch(comm,
                    gcclAllReduce(a, b, mc_rank == 0 || mc_rank == 3 ? 600 : 10, gcclFloat32, gcclSum, comm, NULL),
                    "count", __LINE__);
  expect_mismatch(comm,
                  odd ? gcclBroadcast(a, b, 10, gcclFloat32, 0, comm, NULL)
                      : gcclAllReduce(a, b, 10, gcclFloat32, gcclSum, comm, NULL),
                  "collective", __LINE__);

  gcclCompressor_t c = NULL;
  MC_OK(gcclCompressorCreate(&c, odd ? "topk:ratio=0.2" : "topk:ratio=0.1", N, gcclFloat32), NULL);
  expect_mismatch(comm, gcclAllReduceCompressed(a, b, N, gcclFloat32, gcclSum, c, comm, NULL), "compressor", __LINE__);
  /* Compressed here, dense there. */
  gcclResult_t res = odd ? gcclAllReduce(a, b, N, gcclFloat32, gcclSum, comm, NULL)
                         : gcclAllReduceCompressed(a, b, N, gcclFloat32, gcclSum, c, comm, NULL);
  expect_mismatch(comm, res, "compressor", __LINE__);
  MC_OK(gcclCompressorDestroy(c), NULL);

  gcclResult_t async = gcclInternalError;
  MC_OK(gcclCommGetAsyncError(comm, &async), comm);
  MC_CHECK(async == gcclSuccess, "mismatches left the communicator in error %s", gcclGetErrorString(async));
  free(a);
  free(b);
  MC_OK(gcclCommDestroy(comm), NULL);
}

/* GCCL_ALGO=split: each allreduce sends its first round while the agreement runs
 * (collectives/split.c). After a mismatch the receive buffer keeps what it held
 * and no message of the call is left to meet the next (expect_mismatch's
 * allreduce, itself on split, and the in-place one after it). Counts that differ
 * in their chunks' sizes, a datatype of another size, an empty call, a call that
 * sends nothing early (an allgather), and 300000 floats, whose chunks go after a
 * handshake (and in many messages under mpi_errors_chunked_noboard_np3). */
static void check_split_mismatches(void) {
  if (mc_nranks < 2) return;
  mc_setenv("GCCL_ALGO", "split");
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  mc_setenv("GCCL_ALGO", NULL);
  if (!comm) return;
  size_t big = 300 * N;
  float* a = calloc(big + 1, sizeof *a);
  float* b = calloc(big + 1, sizeof *b);
  int odd = mc_rank == mc_nranks - 1;
  const size_t counts[][2] = {{N, N + 1}, {N, 1}, {N, 0}, {0, N}, {big, N}, {big, big + 1}};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    for (size_t i = 0; i <= big; i++) b[i] = -1;
    size_t n = counts[k][odd];
    expect_mismatch(comm, gcclAllReduce(a, b, n, gcclFloat32, gcclSum, comm, NULL), "count", __LINE__);
    MC_CHECK(b[0] == -1 && b[n ? n - 1 : 0] == -1, "a mismatched split allreduce wrote its receive buffer (count %zu)",
             n);
    for (size_t i = 0; i < N; i++) a[i] = (float)(i % 3);
    MC_OK(gcclAllReduce(a, a, N, gcclFloat32, gcclSum, comm, NULL), comm);
    MC_CHECK(a[1] == (float)mc_nranks && a[N - 1] == (float)(((N - 1) % 3) * (size_t)mc_nranks),
             "the split allreduce after a mismatch summed wrong");
  }
  expect_mismatch(comm, gcclAllReduce(a, b, N, odd ? gcclInt8 : gcclFloat32, gcclSum, comm, NULL), "datatype",
                  __LINE__);
  expect_mismatch(
      comm,
      odd ? gcclAllGather(a, b, N, gcclFloat32, comm, NULL) : gcclAllReduce(a, b, N, gcclFloat32, gcclSum, comm, NULL),
      "collective", __LINE__);
  free(a);
  free(b);
  MC_OK(gcclCommDestroy(comm), NULL);
}

/* ---- streams and groups ---------------------------------------------------------------- */

static void fill(float* x, float v) {
  for (int i = 0; i < N; i++) x[i] = v;
}

static int all_equal(const float* x, float v) {
  for (int i = 0; i < N; i++)
    if (x[i] != v) return 0;
  return 1;
}

/* MPI_THREAD_MULTIPLE: collectives on a stream, beside the application's own MPI
 * calls, and in a group over two communicators. */
static void check_streams_and_groups(void) {
  gcclComm_t one = mc_comm(MPI_COMM_WORLD), two = mc_comm(MPI_COMM_WORLD);
  gcclStream_t s = NULL;
  MC_OK(gcclStreamCreate(&s), NULL);
  if (!one || !two || !s) return;
  float p = (float)mc_nranks;
  float* x = malloc(N * sizeof *x);
  float* y = malloc(N * sizeof *y);
  fill(x, 1);
  for (int k = 0; k < 3; k++) MC_OK(gcclAllReduce(x, x, N, gcclFloat32, gcclSum, one, s), one);
  int ranks = 0, world = 1;
  MPI_Allreduce(&world, &ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); /* while the stream runs */
  MC_OK(gcclStreamSynchronize(s), one);
  MC_CHECK(ranks == mc_nranks, "the application's MPI_Allreduce gave %d", ranks);
  MC_CHECK(all_equal(x, p * p * p), "three allreduces on a stream gave %g, not %g", (double)x[0], (double)(p * p * p));

  fill(x, 1);
  fill(y, 2);
  MC_OK(gcclGroupStart(), NULL);
  MC_OK(gcclAllReduce(x, x, N, gcclFloat32, gcclSum, one, NULL), one);
  MC_OK(gcclAllReduce(y, y, N, gcclFloat32, gcclMax, two, NULL), two);
  MC_OK(gcclGroupEnd(), NULL);
  MC_CHECK(all_equal(x, p) && all_equal(y, 2), "a group over two communicators gave %g and %g", (double)x[0],
           (double)y[0]);
  MC_OK(gcclStreamDestroy(s), NULL);
  MC_OK(gcclCommDestroy(one), NULL);
  MC_OK(gcclCommDestroy(two), NULL);
  free(x);
  free(y);
}

/* Below MPI_THREAD_MULTIPLE: streams and groups are refused with a message that
 * says what to do; calls on the NULL stream work. */
static void check_streams_refused(void) {
  gcclComm_t comm = mc_comm(MPI_COMM_WORLD);
  gcclStream_t s = NULL;
  MC_OK(gcclStreamCreate(&s), NULL);
  if (!comm || !s) return;
  float* x = malloc(N * sizeof *x);
  fill(x, 1);
  MC_FAILS(gcclAllReduce(x, x, N, gcclFloat32, gcclSum, comm, s), gcclInvalidUsage, comm);
  MC_CHECK(strstr(gcclGetLastError(comm), "MPI_THREAD_MULTIPLE") != NULL, "the message does not say why: %s",
           gcclGetLastError(comm));
  MC_OK(gcclGroupStart(), NULL);
  MC_FAILS(gcclAllReduce(x, x, N, gcclFloat32, gcclSum, comm, NULL), gcclInvalidUsage, comm);
  MC_OK(gcclGroupEnd(), NULL);
  MC_OK(gcclAllReduce(x, x, N, gcclFloat32, gcclSum, comm, NULL), comm);
  MC_CHECK(all_equal(x, (float)mc_nranks), "an allreduce after the refusals gave %g", (double)x[0]);
  MC_OK(gcclStreamDestroy(s), NULL);
  MC_OK(gcclCommDestroy(comm), NULL);
  free(x);
}

int main(int argc, char** argv) {
  gcclComm_t comm = NULL;
  gcclResult_t before_init = gcclCommInitMpi(&comm, MPI_COMM_WORLD);
  int level = mc_init(&argc, &argv);
  MC_CHECK(before_init == gcclInvalidUsage, "gcclCommInitMpi before MPI_Init returned %s",
           gcclGetErrorString(before_init));
  check_init_arguments();
  check_dead_handles();
  check_setting_disagrees("GCCL_RANKS_PER_NODE", "1");
  check_setting_disagrees("GCCL_MPI_CHUNK_BYTES", "4096");
  check_subcommunicator();
  check_mismatches();
  check_split_mismatches();
  if (level == MPI_THREAD_MULTIPLE)
    check_streams_and_groups();
  else
    check_streams_refused();
  int status = mc_finish("test_errors_mpi");
  gcclResult_t after = gcclCommInitMpi(&comm, MPI_COMM_WORLD);
  if (after != gcclInvalidUsage) {
    fprintf(stderr, "gcclCommInitMpi after MPI_Finalize returned %s\n", gcclGetErrorString(after));
    status = 1;
  }
  return status;
}
