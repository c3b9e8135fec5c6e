/* mpi-baseline.c — gccl-bench's table over the MPI library's own collectives: the
 * dense baseline a gccl result is compared against, measured the same way.
 *
 *   mpirun -np 4 mpi-baseline allreduce -b 1M -e 100M -f 10 -d float -o sum -m
 *
 * Same flags as gccl-bench except -r (ranks come from mpirun) and -a. MPI has no
 * half or bfloat16 (rejected) and no average: avg runs MPI_SUM, then divides by
 * the number of ranks locally, inside the timed call, as a user would. An
 * out-of-place broadcast copies the root's send buffer into its receive buffer,
 * then broadcasts that (MPI_Bcast has one buffer). Time per size: the slowest
 * rank's wall time over the iterations / iterations (MPI_Wtime). The calls
 * themselves are bench_mpi.h's, shared with gccl-bench --mpi's baseline row.
 *
 * Open MPI 4.1's op/avx component saturates 8-bit integer sums (ompi issue #8045):
 * -c 1 reports them as wrong; `mpirun --mca op ^avx` gives the wrapped sums. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>

#include "bench_mpi.h"

#define MPI_CHECK(call) BENCH_MPI_CHECK("mpi-baseline", call)

/* One size's buffers and where each mode reads its input and writes its result. */
typedef struct {
  const bench_opts* o;
  int rank;
  size_t count, es;
  char *send, *recv;
} run_ctx;

static char* input_of(const run_ctx* c, int inplace, size_t* n) {
  *n = bench_send_elems(c->o, c->count);
  if (!inplace || c->o->coll == COLL_REDUCESCATTER) return c->send;
  return c->o->coll == COLL_ALLGATHER ? c->recv + (size_t)c->rank * c->count * c->es : c->recv;
}

static char* output_of(const run_ctx* c, int inplace) {
  return bench_mpi_output(c->o, c->send, c->recv, inplace);
}

static void run_once(const run_ctx* c, int inplace) {
  MPI_CHECK(bench_mpi_call(c->o, MPI_COMM_WORLD, c->rank, c->o->nranks, c->send, c->recv, c->count, inplace));
}

/* Seconds per call: the slowest rank's (median of 5 with -m); valid on rank 0. */
static double time_mode(const run_ctx* c, int inplace) {
  const bench_opts* o = c->o;
  double times[5] = {0};
  int reps = o->median ? 5 : 1;
  for (int i = 0; i < o->warmup; i++) run_once(c, inplace);
  for (int rep = 0; rep < reps; rep++) {
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = MPI_Wtime();
    for (int i = 0; i < o->iters; i++) run_once(c, inplace);
    double t = (MPI_Wtime() - t0) / o->iters;
    MPI_CHECK(MPI_Reduce(&t, &times[rep], 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  }
  return bench_median(times, reps);
}

/* Wrong elements of one checked call, summed over ranks; valid on rank 0. */
static size_t check_mode(const run_ctx* c, const bench_tables* tb, int inplace) {
  size_t n_in, out_n = bench_recv_elems(c->o, c->count);
  char* in = input_of(c, inplace, &n_in);
  memset(output_of(c, inplace), 0xA5, out_n * c->es); /* poison first: a no-op must not pass */
  bench_fill_input(tb, c->o, c->rank, in, n_in);
  run_once(c, inplace);
  unsigned long long wrong = bench_check_output(tb, c->o, c->rank, output_of(c, inplace), c->count), total = 0;
  MPI_CHECK(MPI_Reduce(&wrong, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
  return (size_t)total;
}

int main(int argc, char** argv) {
  bench_opts o;
  int rank, nranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (bench_parse_args(argc, argv, 0, rank != 0, &o) != 0) {
    MPI_Finalize();
    return 2;
  }
  o.nranks = nranks;
  const char* bad = bench_mpi_type(o.type) == MPI_DATATYPE_NULL ? "MPI has no half or bfloat16 datatype"
                    : o.root >= nranks                          ? "-R root out of range"
                                                                : NULL;
  if (bad) {
    if (rank == 0) fprintf(stderr, "mpi-baseline: %s\n", bad);
    MPI_Finalize();
    return 2;
  }
  if (rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    printf("# %s\n", lib);
    if (o.op == OP_AVG && bench_has_op(o.coll)) printf("# avg = MPI_SUM, then a local divide (timed)\n");
    bench_print_params(&o, "mpi-baseline", "MPI processes");
    bench_print_table_header(&o);
    fflush(stdout);
  }
  MPI_CHECK(bench_mpi_quiet_barrier(MPI_COMM_WORLD));

  bench_tables tb;
  bench_tables_init(&tb, &o);
  size_t wrong_total = 0;
  double busbw_sum = 0;
  int results = 0;
  for (size_t bytes = o.min_bytes; bytes; bytes = bench_next_size(&o, bytes)) {
    run_ctx c = {.o = &o, .rank = rank, .count = bench_count(&o, bytes), .es = bench_type_bytes[o.type]};
    if (c.count > INT_MAX) {
      if (rank == 0) fprintf(stderr, "mpi-baseline: %zu elements exceed MPI's int count\n", c.count);
      break;
    }
    c.send = bench_alloc(bench_send_elems(&o, c.count) * c.es);
    c.recv = bench_alloc(bench_recv_elems(&o, c.count) * c.es);
    memset(c.recv, 0, bench_recv_elems(&o, c.count) * c.es); /* touch every page once, untimed */
    bench_fill_input(&tb, &o, rank, c.send, bench_send_elems(&o, c.count));

    double sec[2] = {0, 0};
    size_t wrong[2] = {0, 0};
    for (int ip = 0; ip <= o.inplace; ip++) sec[ip] = time_mode(&c, ip);
    for (int ip = 0; ip <= o.inplace && o.check; ip++) wrong[ip] = check_mode(&c, &tb, ip);
    if (rank == 0) {
      bench_print_row_start(&o, c.count);
      for (int ip = 0; ip <= o.inplace; ip++) {
        busbw_sum += bench_print_result(&o, c.count, sec[ip], wrong[ip]);
        wrong_total += wrong[ip];
        results++;
      }
      printf("\n");
      fflush(stdout);
    }
    free(c.send);
    free(c.recv);
  }
  if (rank == 0) bench_print_footer(wrong_total, busbw_sum, results);
  bench_tables_free(&tb);
  MPI_Finalize();
  return rank == 0 && wrong_total ? 1 : 0;
}
