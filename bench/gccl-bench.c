/* gccl-bench.c — nccl-tests for gccl: times one dense collective over a range of
 * sizes, every rank a thread of this process, and prints nccl-tests' table.
 *
 *   gccl-bench allreduce -r 4 -b 8 -e 128M -f 2 -d float -o sum -n 20 -w 5 -c 1
 *
 * Each rank's thread makes its communicator with gcclCommInitRank (one id from
 * gcclGetUniqueId), then for each size: allocates and touches its buffers,
 * warms up, and times -n calls from a barrier-aligned start. The reported time
 * is the slowest rank's wall time / iterations (median of 5 such timings with
 * -m), out-of-place then in-place. With -c 1 one more call per mode, on fresh
 * inputs, is compared element by element with an exact CPU reference. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "bench_common.h"
#include "gccl.h"

#define MAX_REPS 5 /* timings per size in median mode */

/* What the rank threads share. Written by main before they start, except the
 * per-rank result slots, which rank 0 reads after a barrier. */
typedef struct {
  bench_opts o;
  bench_tables tb;
  gcclUniqueId id;
  pthread_barrier_t barrier;
  double* times;      /* [MAX_REPS][nranks] seconds per call */
  size_t* wrong;      /* [nranks] wrong elements of the last check */
  size_t wrong_total; /* rank 0 only, from here on */
  double busbw_sum;
  int results;
} shared_state;

/* One rank's view of one size. */
typedef struct {
  shared_state* sh;
  int rank;
  gcclComm_t comm;
  size_t count, es;
  char *send, *recv;
} rank_ctx;

static void check_gccl(const rank_ctx* c, gcclResult_t r, const char* what) {
  if (r == gcclSuccess) return;
  fprintf(stderr, "gccl-bench: rank %d: %s failed: %s: %s\n", c->rank, what, gcclGetErrorString(r),
          gcclGetLastError(c->comm));
  exit(1);
}

static void barrier(shared_state* sh) {
  pthread_barrier_wait(&sh->barrier);
}

/* Where a mode reads its input (n elements of it) and writes its result. */
static char* input_of(const rank_ctx* c, int inplace, size_t* n) {
  int coll = c->sh->o.coll;
  *n = bench_send_elems(&c->sh->o, c->count);
  if (!inplace || coll == COLL_REDUCESCATTER) return c->send;
  return coll == COLL_ALLGATHER ? c->recv + (size_t)c->rank * c->count * c->es : c->recv;
}

static char* output_of(const rank_ctx* c, int inplace) {
  if (inplace && c->sh->o.coll == COLL_REDUCESCATTER) return c->send + (size_t)c->rank * c->count * c->es;
  return c->recv;
}

static void run_once(const rank_ctx* c, int inplace) {
  const bench_opts* o = &c->sh->o;
  size_t n_in;
  const char* in = input_of(c, inplace, &n_in);
  char* out = output_of(c, inplace);
  gcclDataType_t dt = (gcclDataType_t)o->type;
  gcclRedOp_t op = (gcclRedOp_t)o->op;
  gcclResult_t r;
  switch (o->coll) {
    case COLL_ALLREDUCE:
      r = gcclAllReduce(in, out, c->count, dt, op, c->comm, NULL);
      break;
    case COLL_ALLGATHER:
      r = gcclAllGather(in, out, c->count, dt, c->comm, NULL);
      break;
    case COLL_REDUCESCATTER:
      r = gcclReduceScatter(in, out, c->count, dt, op, c->comm, NULL);
      break;
    case COLL_BROADCAST:
      r = gcclBroadcast(in, out, c->count, dt, o->root, c->comm, NULL);
      break;
    default:
      r = gcclReduce(in, out, c->count, dt, op, o->root, c->comm, NULL);
      break;
  }
  check_gccl(c, r, bench_coll_names[o->coll]);
}

/* Seconds per call, the slowest rank's (median of MAX_REPS with -m). Valid on rank 0. */
static double time_mode(const rank_ctx* c, int inplace) {
  shared_state* sh = c->sh;
  int n = sh->o.nranks, reps = sh->o.median ? MAX_REPS : 1;
  for (int i = 0; i < sh->o.warmup; i++) run_once(c, inplace);
  for (int rep = 0; rep < reps; rep++) {
    barrier(sh);
    double t0 = bench_now();
    for (int i = 0; i < sh->o.iters; i++) run_once(c, inplace);
    sh->times[rep * n + c->rank] = (bench_now() - t0) / sh->o.iters;
  }
  barrier(sh);
  double slowest[MAX_REPS];
  for (int rep = 0; rep < reps; rep++) {
    slowest[rep] = 0;
    for (int r = 0; r < n; r++)
      if (sh->times[rep * n + r] > slowest[rep]) slowest[rep] = sh->times[rep * n + r];
  }
  return bench_median(slowest, reps);
}

/* Wrong elements of one call on fresh inputs, summed over ranks. Valid on rank 0. */
static size_t check_mode(const rank_ctx* c, int inplace) {
  shared_state* sh = c->sh;
  size_t n_in, out_n = bench_recv_elems(&sh->o, c->count);
  char* in = input_of(c, inplace, &n_in);
  memset(output_of(c, inplace), 0xA5, out_n * c->es); /* poison first: a no-op must not pass */
  bench_fill_input(&sh->tb, &sh->o, c->rank, in, n_in);
  barrier(sh);
  run_once(c, inplace);
  sh->wrong[c->rank] = bench_check_output(&sh->tb, &sh->o, c->rank, output_of(c, inplace), c->count);
  barrier(sh);
  size_t total = 0;
  for (int r = 0; r < sh->o.nranks; r++) total += sh->wrong[r];
  return total;
}

/* Allocates, touches and fills one size's buffers (never inside a timed loop). */
static void alloc_buffers(rank_ctx* c) {
  const bench_opts* o = &c->sh->o;
  size_t send_n = bench_send_elems(o, c->count), recv_n = bench_recv_elems(o, c->count);
  c->send = bench_alloc(send_n * c->es);
  c->recv = bench_alloc(recv_n * c->es);
  memset(c->recv, 0, recv_n * c->es);
  bench_fill_input(&c->sh->tb, o, c->rank, c->send, send_n);
}

static void* rank_main(void* arg) {
  rank_ctx c = *(rank_ctx*)arg;
  shared_state* sh = c.sh;
  const bench_opts* o = &sh->o;
  check_gccl(&c, gcclCommInitRank(&c.comm, o->nranks, sh->id, c.rank), "gcclCommInitRank");
  for (size_t bytes = o->min_bytes; bytes; bytes = bench_next_size(o, bytes)) {
    c.count = bench_count(o, bytes);
    alloc_buffers(&c);
    double sec[2] = {0, 0};
    size_t wrong[2] = {0, 0};
    for (int ip = 0; ip <= o->inplace; ip++) sec[ip] = time_mode(&c, ip);
    for (int ip = 0; ip <= o->inplace && o->check; ip++) wrong[ip] = check_mode(&c, ip);
    if (c.rank == 0) {
      bench_print_row_start(o, c.count);
      for (int ip = 0; ip <= o->inplace; ip++) {
        sh->busbw_sum += bench_print_result(o, c.count, sec[ip], wrong[ip]);
        sh->wrong_total += wrong[ip];
        sh->results++;
      }
      printf("\n");
      fflush(stdout);
    }
    barrier(sh); /* every rank's last call is over before anyone frees */
    free(c.send);
    free(c.recv);
  }
  check_gccl(&c, gcclCommDestroy(c.comm), "gcclCommDestroy");
  return NULL;
}

int main(int argc, char** argv) {
  static shared_state sh;
  if (bench_parse_args(argc, argv, 1, 0, &sh.o) != 0) return 2;
  const bench_opts* o = &sh.o;
  if (o->root >= o->nranks) {
    fprintf(stderr, "gccl-bench: -R %d: root out of range for %d ranks\n", o->root, o->nranks);
    return 2;
  }
  if (o->algo && setenv("GCCL_ALGO", o->algo, 1) != 0) {
    perror("gccl-bench: setenv GCCL_ALGO");
    return 2;
  }
  int version = 0;
  gcclGetVersion(&version);
  const char* algo = getenv("GCCL_ALGO");
  printf("# gccl %d.%d.%d, GCCL_ALGO=%s\n", version / 10000, version / 100 % 100, version % 100,
         algo ? algo : "(tuner)");
  bench_print_params(o, "gccl-bench", "threads");
  bench_print_table_header(o);
  fflush(stdout);

  rank_ctx* ctx = calloc((size_t)o->nranks, sizeof *ctx);
  pthread_t* threads = calloc((size_t)o->nranks, sizeof *threads);
  sh.times = calloc((size_t)MAX_REPS * (size_t)o->nranks, sizeof *sh.times);
  sh.wrong = calloc((size_t)o->nranks, sizeof *sh.wrong);
  if (!ctx || !threads || !sh.times || !sh.wrong) {
    fprintf(stderr, "gccl-bench: out of memory\n");
    return 1;
  }
  bench_tables_init(&sh.tb, o);
  check_gccl(&(rank_ctx){.rank = -1}, gcclGetUniqueId(&sh.id), "gcclGetUniqueId");
  pthread_barrier_init(&sh.barrier, NULL, (unsigned)o->nranks);
  for (int r = 0; r < o->nranks; r++) {
    ctx[r] = (rank_ctx){.sh = &sh, .rank = r, .es = bench_type_bytes[o->type]};
    if (pthread_create(&threads[r], NULL, rank_main, &ctx[r]) != 0) {
      fprintf(stderr, "gccl-bench: cannot start the thread of rank %d\n", r);
      return 1;
    }
  }
  for (int r = 0; r < o->nranks; r++) pthread_join(threads[r], NULL);
  bench_print_footer(sh.wrong_total, sh.busbw_sum, sh.results);

  pthread_barrier_destroy(&sh.barrier);
  bench_tables_free(&sh.tb);
  free(sh.times);
  free(sh.wrong);
  free(ctx);
  free(threads);
  return sh.wrong_total ? 1 : 0;
}
