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
 * rank's wall time over the iterations / iterations (MPI_Wtime).
 *
 * Open MPI 4.1's op/avx component saturates 8-bit integer sums (ompi issue #8045):
 * -c 1 reports them as wrong; `mpirun --mca op ^avx` gives the wrapped sums. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>

#include "bench_common.h"

#define MPI_CHECK(call)                                              \
  do {                                                               \
    int rc_ = (call);                                                \
    if (rc_ != MPI_SUCCESS) {                                        \
      char msg_[MPI_MAX_ERROR_STRING];                               \
      int len_ = 0;                                                  \
      MPI_Error_string(rc_, msg_, &len_);                            \
      fprintf(stderr, "mpi-baseline: %s failed: %s\n", #call, msg_); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                  \
    }                                                                \
  } while (0)

/* MPI_DATATYPE_NULL: half and bfloat16, which MPI lacks. */
static MPI_Datatype mpi_type(int t) {
  const MPI_Datatype map[T_COUNT] = {MPI_INT8_T,   MPI_UINT8_T,       MPI_INT32_T, MPI_UINT32_T, MPI_INT64_T,
                                     MPI_UINT64_T, MPI_DATATYPE_NULL, MPI_FLOAT,   MPI_DOUBLE,   MPI_DATATYPE_NULL};
  return map[t];
}

/* avg: MPI_SUM, then divide_by. */
static MPI_Op mpi_op(int op) {
  const MPI_Op map[OP_COUNT] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_SUM};
  return map[op];
}

#define DIVIDE(ctype)                                                 \
  do {                                                                \
    ctype* p_ = buf;                                                  \
    for (size_t i = 0; i < n; i++) p_[i] = (ctype)(p_[i] / (ctype)d); \
  } while (0)

/* buf[i] /= d: the average's second half (integer division for integers). */
static void divide_by(int t, void* buf, size_t n, int d) {
  /* clang-format off */
  switch (t) {
    case T_INT8: DIVIDE(int8_t); break;
    case T_UINT8: DIVIDE(uint8_t); break;
    case T_INT32: DIVIDE(int32_t); break;
    case T_UINT32: DIVIDE(uint32_t); break;
    case T_INT64: DIVIDE(int64_t); break;
    case T_UINT64: DIVIDE(uint64_t); break;
    case T_FLOAT: DIVIDE(float); break;
    default: DIVIDE(double); break;
  }
  /* clang-format on */
}

/* One size's buffers and where each mode reads its input and writes its result. */
typedef struct {
  const bench_opts* o;
  MPI_Datatype dt;
  int rank;
  size_t count, es;
  char *send, *recv;
} run_ctx;

static char* input_of(const run_ctx* c, int inplace, size_t* n) {
  *n = bench_send_elems(c->o, c->count);
  if (!inplace || c->o->coll == COLL_REDUCESCATTER) return c->send;
  return c->o->coll == COLL_ALLGATHER ? c->recv + (size_t)c->rank * c->count * c->es : c->recv;
}

/* In-place MPI_Reduce_scatter_block leaves the result at the start of the buffer. */
static char* output_of(const run_ctx* c, int inplace) {
  return inplace && c->o->coll == COLL_REDUCESCATTER ? c->send : c->recv;
}

static void run_once(const run_ctx* c, int inplace) {
  const bench_opts* o = c->o;
  int n = (int)c->count, root = o->root, is_root = c->rank == root;
  void* sb = inplace ? MPI_IN_PLACE : c->send;
  MPI_Op op = mpi_op(o->op);
  switch (o->coll) {
    case COLL_ALLREDUCE:
      MPI_CHECK(MPI_Allreduce(sb, c->recv, n, c->dt, op, MPI_COMM_WORLD));
      break;
    case COLL_ALLGATHER:
      MPI_CHECK(
          MPI_Allgather(sb, inplace ? 0 : n, inplace ? MPI_DATATYPE_NULL : c->dt, c->recv, n, c->dt, MPI_COMM_WORLD));
      break;
    case COLL_REDUCESCATTER:
      MPI_CHECK(MPI_Reduce_scatter_block(sb, output_of(c, inplace), n, c->dt, op, MPI_COMM_WORLD));
      break;
    case COLL_BROADCAST:
      if (!inplace && is_root) memcpy(c->recv, c->send, c->count * c->es);
      MPI_CHECK(MPI_Bcast(c->recv, n, c->dt, root, MPI_COMM_WORLD));
      break;
    default:
      if (inplace && !is_root) sb = c->recv;
      MPI_CHECK(MPI_Reduce(sb, c->recv, n, c->dt, op, root, MPI_COMM_WORLD));
      break;
  }
  if (o->op == OP_AVG && bench_has_op(o->coll) && (o->coll != COLL_REDUCE || is_root))
    divide_by(o->type, output_of(c, inplace), c->count, o->nranks);
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

/* A barrier the waiting ranks sleep through, so rank 0 measures memcpy alone. */
static void quiet_barrier(void) {
  MPI_Request req;
  int done = 0;
  MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
  while (!done) {
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (!done) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
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
  const char* bad = mpi_type(o.type) == MPI_DATATYPE_NULL ? "MPI has no half or bfloat16 datatype"
                    : o.root >= nranks                    ? "-R root out of range"
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
  quiet_barrier();

  bench_tables tb;
  bench_tables_init(&tb, &o);
  size_t wrong_total = 0;
  double busbw_sum = 0;
  int results = 0;
  for (size_t bytes = o.min_bytes; bytes; bytes = bench_next_size(&o, bytes)) {
    run_ctx c = {
        .o = &o, .dt = mpi_type(o.type), .rank = rank, .count = bench_count(&o, bytes), .es = bench_type_bytes[o.type]};
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
