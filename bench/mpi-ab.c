/* mpi-ab.c — float sum allreduce, Open MPI against gccl, in alternated blocks of
 * calls within one run: the comparison this machine's noise allows (its speed
 * drifts by 2-3x within minutes, so rows timed one after another can mislead).
 *
 *   mpirun -np 4 mpi-ab gccl [-b 4 -e 64M -f 2 -r 11 -t 2]
 *   mpirun -np 4 -x LD_PRELOAD=.../libgccl-mpi-preload.so mpi-ab interposer
 *   mpirun -np 4 mpi-ab create [-r N]     (gcclCommInitMpi's time, N times)
 *
 * Per size, -r rounds; each round times a block of MPI's own allreduce
 * (PMPI_Allreduce, which no interposer sees) and a block of the other side:
 *   gccl        gcclAllReduce over gcclCommInitMpi(MPI_COMM_WORLD);
 *   interposer  MPI_Allreduce, which libgccl-mpi-preload.so takes when preloaded
 *               (GCCL_COMPRESS decides what it does with it).
 * A block runs enough calls for about 2 ms (-t MS; the count set from a first
 * call and agreed by all ranks); its time is the slowest rank's. On the 1 Gbit/s
 * test bed, whose token bucket passes 256 KB (2 ms of the link) at the veth's
 * speed, a road that sends more in fewer messages can ride it within 2 ms blocks
 * and not within 20 (bench/netns-testbed.sh). Before the rounds, -w
 * untimed calls of the other side (default 16: the interposer's trials of its
 * two roads, src/mpi_preload/route.h, are over by then). Printed per size: the
 * median time per call of each side over the rounds, and the median of the
 * rounds' ratios other/MPI (> 1: slower than MPI), and the largest difference
 * between the two sides' results relative to the largest sum. Inputs are small
 * integers, so every dense sum is exact: any difference is a wrong result unless
 * GCCL_COMPRESS names a codec. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "gccl.h"
#include "gccl_mpi.h"

#define CHECK(what, cond)                           \
  do {                                              \
    if (!(cond)) {                                  \
      fprintf(stderr, "mpi-ab: %s failed\n", what); \
      MPI_Abort(MPI_COMM_WORLD, 1);                 \
    }                                               \
  } while (0)

enum side { SIDE_GCCL, SIDE_INTERPOSER };

struct run {
  enum side side;
  gcclComm_t comm; /* SIDE_GCCL */
  float *send, *want, *got;
};

static void other_allreduce(struct run* r, float* out, size_t count) {
  if (r->side == SIDE_GCCL)
    CHECK("gcclAllReduce", gcclAllReduce(r->send, out, count, gcclFloat32, gcclSum, r->comm, NULL) == gcclSuccess);
  else
    CHECK("MPI_Allreduce", MPI_Allreduce(r->send, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
}

static void mpi_allreduce(struct run* r, float* out, size_t count) {
  CHECK("PMPI_Allreduce", PMPI_Allreduce(r->send, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
}

/* Seconds per call of `calls` calls, the slowest rank's. */
static double time_block(struct run* r, int other, size_t count, int calls) {
  PMPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < calls; i++) {
    if (other)
      other_allreduce(r, r->got, count);
    else
      mpi_allreduce(r, r->want, count);
  }
  double t = (MPI_Wtime() - t0) / calls, slowest = 0;
  PMPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

/* mpi-ab create: gcclCommInitMpi's time, the slowest rank's, `n` times in one
 * process (the first pays what a process measures once, GCCL_COMPRESS=auto:'s
 * codec rates). */
static void time_creation(int rank, int n) {
  for (int i = 0; i < n; i++) {
    gcclComm_t comm = NULL;
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    CHECK("gcclCommInitMpi", gcclCommInitMpi(&comm, MPI_COMM_WORLD) == gcclSuccess);
    double t = MPI_Wtime() - t0, slowest = 0;
    PMPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("# mpi-ab create: communicator %d made in %.1f ms (slowest rank)\n", i + 1, slowest * 1e3);
    gcclCommDestroy(comm);
  }
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  struct run r = {0};
  size_t min_bytes = 4, max_bytes = 64 << 10;
  double factor = 2;
  int rounds = 11, warmup = 16;
  double block_s = 2e-3;
  if (argc < 2 || (strcmp(argv[1], "gccl") && strcmp(argv[1], "interposer") && strcmp(argv[1], "create"))) {
    if (rank == 0)
      fprintf(stderr,
              "usage: mpi-ab gccl|interposer [-b MIN] [-e MAX] [-f FACTOR] [-r ROUNDS (1-101)] [-w WARMUP] [-t MS]\n"
              "       mpi-ab create [-r ROUNDS]\n");
    MPI_Finalize();
    return 2;
  }
  if (!strcmp(argv[1], "create")) {
    int n = argc > 3 && !strcmp(argv[2], "-r") ? atoi(argv[3]) : 3;
    time_creation(rank, n > 0 ? n : 3);
    MPI_Finalize();
    return 0;
  }
  r.side = strcmp(argv[1], "gccl") ? SIDE_INTERPOSER : SIDE_GCCL;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) min_bytes = bench_parse_size(argv[i + 1]);
    if (!strcmp(argv[i], "-e")) max_bytes = bench_parse_size(argv[i + 1]);
    if (!strcmp(argv[i], "-f")) factor = atof(argv[i + 1]);
    if (!strcmp(argv[i], "-r")) rounds = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-w")) warmup = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-t")) block_s = atof(argv[i + 1]) * 1e-3;
  }
  CHECK("the arguments (-r at most 101)", min_bytes >= 4 && max_bytes >= min_bytes && factor > 1 && rounds >= 1 &&
                                              rounds <= 101 && warmup >= 1 && block_s > 0);
  if (r.side == SIDE_GCCL) CHECK("gcclCommInitMpi", gcclCommInitMpi(&r.comm, MPI_COMM_WORLD) == gcclSuccess);
  size_t max_count = max_bytes / 4;
  r.send = malloc(max_count * sizeof(float));
  r.want = malloc(max_count * sizeof(float));
  r.got = malloc(max_count * sizeof(float));
  CHECK("malloc", r.send && r.want && r.got);
  /* A codec named in GCCL_COMPRESS may change the sums: their error is reported, not a failure. */
  const char* codec = getenv("GCCL_COMPRESS");
  int lossy = codec && *codec && strcmp(codec, "none") != 0;
  for (size_t i = 0; i < max_count; i++) r.send[i] = (float)((i * 7 + (size_t)rank * 3) % 17);
  if (rank == 0)
    printf(
        "# mpi-ab %s: float sum allreduce, %d ranks, %d alternated rounds per size; us per call (medians)\n"
        "# %10s %12s %12s %8s\n",
        argv[1], nranks, rounds, "bytes", "MPI", argv[1], "x MPI");
  double mpi_t[101], other_t[101], ratio[101];
  for (double b = (double)min_bytes; b <= (double)max_bytes * 1.0001; b *= factor) {
    size_t count = (size_t)b / 4;
    /* Calls per block: about -t ms of MPI's allreduce, as rank 0 timed its first call. */
    mpi_allreduce(&r, r.want, count);
    int calls = (int)(block_s / (time_block(&r, 0, count, 1) + 1e-9));
    calls = calls < 1 ? 1 : calls > 2000 ? 2000 : calls;
    PMPI_Bcast(&calls, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int w = 0; w < warmup; w++) other_allreduce(&r, r.got, count); /* also makes the interposer's communicator */
    for (int k = 0; k < rounds; k++) {
      mpi_t[k] = time_block(&r, 0, count, calls);
      other_t[k] = time_block(&r, 1, count, calls);
      ratio[k] = other_t[k] / mpi_t[k];
    }
    double err = 0, scale = 0, worst = 0;
    for (size_t i = 0; i < count; i++) {
      double e = fabs((double)r.got[i] - (double)r.want[i]);
      err = e > err || e != e ? e : err;
      scale = fabs((double)r.want[i]) > scale ? fabs((double)r.want[i]) : scale;
    }
    err = scale > 0 ? err / scale : err;
    PMPI_Allreduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      printf("  %10zu %12.3f %12.3f %8.2f %9.2g%s\n", count * 4, bench_median(mpi_t, rounds) * 1e6,
             bench_median(other_t, rounds) * 1e6, bench_median(ratio, rounds), worst,
             worst == 0 || lossy ? "" : "  WRONG RESULT");
    fflush(stdout);
  }
  if (r.comm) gcclCommDestroy(r.comm);
  free(r.send);
  free(r.want);
  free(r.got);
  MPI_Finalize();
  return 0;
}
