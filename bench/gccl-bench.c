/* gccl-bench.c — nccl-tests for gccl: times collectives over a range of sizes,
 * every rank a thread of this process, and prints nccl-tests' table; optionally
 * compressed (codecs) and over the link model (virtual nodes and a simulated
 * network), with one row per size and variant.
 *
 *   gccl-bench allreduce -r 4 -b 8 -e 128M -f 2 -d float -o sum -n 20 -w 5 -c 1
 *   gccl-bench allreduce -r 8 --ranks-per-node 1 --link-gbps 1 --link-us 10 --dense-best \
 *       --codec "fp16 uniform:bits=8 sign topk:ratio=0.01" -b 100M -e 100M -n 3 -w 1 -J out.json
 *
 * main makes one set of communicators (gcclCommInitAll) per GCCL_ALGO a variant
 * needs, after setting the link model's environment; then each rank's thread, for
 * each size and variant: fills its input, warms up, and times -n calls from a
 * barrier-aligned start. With the link model on, time is simulated
 * (gcclCommSimTime: the latest rank clock after the calls minus the latest before
 * them, every call starting with a synchronising agreement), else the slowest
 * rank's wall time; per call, median of 5 such timings with -m. Dense variants
 * time out-of-place then in-place and, with -c 1, compare one call on fresh inputs
 * element by element with an exact CPU reference. Every variant on a float type
 * also runs one call on pseudo-Gaussian inputs (with a fresh compressor: zero
 * residual) and reports the relative L2 error of its result against the exact
 * (fp64) one.
 *
 * Extra columns, after nccl-tests' ones: codec, algorithm, bytes per call sent
 * by the busiest rank (wire: to any peer; net: to other nodes, what its network
 * link carried; link model only), compression ratio (the bytes a
 * bandwidth-optimal dense algorithm sends per rank, busbw's numerator, over the
 * wire bytes), relative L2 error, and speed-up against the fastest dense variant
 * of the same size. busbw is always computed on uncompressed bytes. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>

#include "bench_common.h"
#include "gccl.h"
#include "gccl_sim.h"

#define MAX_REPS 5      /* timings per size in median mode */
#define MAX_VARIANTS 64 /* dense-best algorithms plus --codec specs */
#define MAX_ALGOS 8     /* distinct GCCL_ALGO settings, one communicator set each */

/* One line of the table per size: a codec (NULL = dense) under an algorithm. */
typedef struct {
  const char* codec; /* a compressor spec; NULL for the dense call */
  const char* algo;  /* GCCL_ALGO for its communicators; NULL = the tuner's (or the environment's) */
  int comm_set;      /* index of its communicators */
} variant;

/* Options beyond nccl-tests' ones. */
typedef struct {
  variant v[MAX_VARIANTS];
  int nv;
  const char* algos[MAX_ALGOS]; /* per communicator set */
  int nalgos;
  int ranks_per_node; /* 0: not set */
  double link_gbps, link_us;
  int link_model; /* --link-gbps or --link-us given */
  int pace;       /* --pace */
  int dense_best;
  const char* json_path;
} ext_opts;

/* One result, as -J writes it. */
typedef struct {
  size_t bytes;
  const char* codec;
  const char* algo;
  double time_us, busbw, ratio, rel_err, speedup;
  double wire_bytes; /* < 0: not measured (no link model) */
  double net_bytes;
} record;

/* What the rank threads share. Written by main before they start, except the
 * per-rank result slots, which every rank reads after a barrier. */
typedef struct {
  bench_opts o;
  ext_opts x;
  bench_tables tb;
  gcclComm_t* comms[MAX_ALGOS]; /* [comm_set][rank] */
  pthread_barrier_t barrier;
  double* times;      /* [MAX_REPS][nranks] wall seconds per call, or the virtual clock after */
  double* before;     /* [MAX_REPS][nranks] virtual clock before the timed calls */
  uint64_t* wire;     /* [nranks] bytes sent per call (link model) */
  uint64_t* net;      /* [nranks] of which to other nodes */
  size_t* wrong;      /* [nranks] wrong elements of the last check */
  double* err2;       /* [nranks] squared error of a rank's share of the result */
  double* ref2;       /* [nranks] squared exact result of that share */
  size_t wrong_total; /* rank 0 only, from here on */
  double busbw_sum;
  int results;
  record* recs; /* rank 0 only */
  size_t nrecs, cap_recs;
} shared_state;

/* One rank's view of one size and variant. */
typedef struct {
  shared_state* sh;
  int rank;
  gcclComm_t comm;
  gcclCompressor_t comp; /* NULL for a dense variant */
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

/* ---- inputs with a realistic spread, and the exact result ----------------------- */

/* Rank r's element i for the error measurement: near-Gaussian (mean 0, sd 0.58, a
 * sum of four uniforms), continuous in float and double; in half and bfloat16 a
 * multiple of 1/64 below 2 in magnitude, which both hold exactly. */
static double gauss_value(int type, int rank, size_t i) {
  uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1) * 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  double u = (double)((h & 0xffff) + (h >> 16 & 0xffff) + (h >> 32 & 0xffff) + (h >> 48)) / 65536.0 - 2.0;
  h *= 0xD6E8FEB86659FD93ull;
  u += (double)(h >> 11) * 0x1p-53 / 65536.0; /* fills the mantissa below the uniforms' 16 bits */
  if (type == T_HALF || type == T_BF16) return round(u * 64) / 64;
  return type == T_FLOAT ? (double)(float)u : u;
}

static void fill_gauss(const bench_opts* o, int rank, char* buf, size_t n) {
  size_t es = bench_type_bytes[o->type];
  for (size_t i = 0; i < n; i++) bench_store(o->type, buf + i * es, 0, gauss_value(o->type, rank, i));
}

/* The collective's exact output element: rank `rank`'s out[i]. */
static double exact_value(const bench_opts* o, int rank, size_t count, size_t i) {
  if (o->coll == COLL_ALLGATHER) return gauss_value(o->type, (int)(i / count), i % count);
  if (o->coll == COLL_BROADCAST) return gauss_value(o->type, o->root, i);
  size_t j = o->coll == COLL_REDUCESCATTER ? (size_t)rank * count + i : i;
  double s = 0;
  for (int r = 0; r < o->nranks; r++) s += gauss_value(o->type, r, j);
  return o->op == OP_AVG ? s / o->nranks : s;
}

static double load_value(int type, const char* p) {
  if (type == T_FLOAT) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  double d;
  memcpy(&d, p, 8);
  return d;
}

/* The relative L2 error is measured on float and double results of sums. */
static int has_rel_err(const bench_opts* o) {
  return (o->type == T_FLOAT || o->type == T_DOUBLE) && (!bench_has_op(o->coll) || o->op == OP_SUM || o->op == OP_AVG);
}

/* ---- one call ------------------------------------------------------------------- */

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
      r = c->comp ? gcclAllReduceCompressed(in, out, c->count, dt, op, c->comp, c->comm, NULL)
                  : gcclAllReduce(in, out, c->count, dt, op, c->comm, NULL);
      break;
    case COLL_ALLGATHER:
      r = c->comp ? gcclAllGatherCompressed(in, out, c->count, dt, c->comp, c->comm, NULL)
                  : gcclAllGather(in, out, c->count, dt, c->comm, NULL);
      break;
    case COLL_REDUCESCATTER:
      r = c->comp ? gcclReduceScatterCompressed(in, out, c->count, dt, op, c->comp, c->comm, NULL)
                  : gcclReduceScatter(in, out, c->count, dt, op, c->comm, NULL);
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

/* ---- timing and checks ------------------------------------------------------------- */

/* Seconds per call (median of MAX_REPS with -m): simulated with the link model,
 * else the slowest rank's wall time. wire[0], wire[1] = the busiest rank's bytes
 * per call, all and inter-node (link model; else -1). Valid on every rank. */
static double time_mode(const rank_ctx* c, int inplace, double wire[2]) {
  shared_state* sh = c->sh;
  int n = sh->o.nranks, reps = sh->o.median ? MAX_REPS : 1, sim = sh->x.link_model;
  for (int i = 0; i < sh->o.warmup; i++) run_once(c, inplace);
  for (int rep = 0; rep < reps; rep++) {
    size_t slot = (size_t)rep * (size_t)n + (size_t)c->rank;
    barrier(sh);
    uint64_t b0 = 0, b1 = 0, n0 = 0, n1 = 0;
    double t0 = bench_now();
    if (sim) check_gccl(c, gcclCommSimTime(c->comm, &sh->before[slot]), "gcclCommSimTime");
    if (sim) check_gccl(c, gcclCommSimBytesSent(c->comm, &b0), "gcclCommSimBytesSent");
    if (sim) check_gccl(c, gcclCommSimInterNodeBytesSent(c->comm, &n0), "gcclCommSimInterNodeBytesSent");
    for (int i = 0; i < sh->o.iters; i++) run_once(c, inplace);
    if (sim) check_gccl(c, gcclCommSimTime(c->comm, &sh->times[slot]), "gcclCommSimTime");
    if (sim) check_gccl(c, gcclCommSimBytesSent(c->comm, &b1), "gcclCommSimBytesSent");
    if (sim) check_gccl(c, gcclCommSimInterNodeBytesSent(c->comm, &n1), "gcclCommSimInterNodeBytesSent");
    if (!sim) sh->times[slot] = (bench_now() - t0) / sh->o.iters;
    sh->wire[c->rank] = (b1 - b0) / (uint64_t)sh->o.iters;
    sh->net[c->rank] = (n1 - n0) / (uint64_t)sh->o.iters;
  }
  barrier(sh);
  double per_rep[MAX_REPS];
  for (int rep = 0; rep < reps; rep++) {
    const double* t = sh->times + (size_t)rep * (size_t)n;
    const double* b = sh->before + (size_t)rep * (size_t)n;
    double latest = 0, latest_before = 0;
    for (int r = 0; r < n; r++) latest = t[r] > latest ? t[r] : latest;
    for (int r = 0; r < n; r++) latest_before = b[r] > latest_before ? b[r] : latest_before;
    per_rep[rep] = sim ? (latest - latest_before) / sh->o.iters : latest;
  }
  uint64_t busiest = 0, busiest_net = 0;
  for (int r = 0; r < n; r++) busiest = sh->wire[r] > busiest ? sh->wire[r] : busiest;
  for (int r = 0; r < n; r++) busiest_net = sh->net[r] > busiest_net ? sh->net[r] : busiest_net;
  wire[0] = sim ? (double)busiest : -1;
  wire[1] = sim ? (double)busiest_net : -1;
  barrier(sh); /* all have read the slots before the next timing writes them */
  return bench_median(per_rep, reps);
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

/* Relative L2 error of one out-of-place call on Gaussian inputs; each rank checks a
 * share of the result (every rank holds the same bits of allreduce and allgather
 * results). Valid on rank 0. */
static double rel_err_mode(const rank_ctx* c) {
  shared_state* sh = c->sh;
  const bench_opts* o = &sh->o;
  size_t n_in;
  char* in = input_of(c, 0, &n_in);
  fill_gauss(o, c->rank, in, n_in);
  barrier(sh);
  run_once(c, 0);
  size_t out_n = bench_recv_elems(o, c->count), lo = 0, hi = out_n;
  if (o->coll != COLL_REDUCESCATTER && o->coll != COLL_REDUCE) {
    lo = out_n * (size_t)c->rank / (size_t)o->nranks;
    hi = out_n * (size_t)(c->rank + 1) / (size_t)o->nranks;
  }
  double e2 = 0, r2 = 0;
  if (o->coll != COLL_REDUCE || c->rank == o->root)
    for (size_t i = lo; i < hi; i++) {
      double want = exact_value(o, c->rank, c->count, i), got = load_value(o->type, c->recv + i * c->es);
      e2 += (got - want) * (got - want);
      r2 += want * want;
    }
  sh->err2[c->rank] = e2;
  sh->ref2[c->rank] = r2;
  barrier(sh);
  double te = 0, tr = 0;
  for (int r = 0; r < o->nranks; r++) te += sh->err2[r], tr += sh->ref2[r];
  barrier(sh);
  return tr > 0 ? sqrt(te / tr) : 0;
}

/* ---- output ------------------------------------------------------------------------- */

static void print_header(const shared_state* sh) {
  const bench_opts* o = &sh->o;
  bench_print_table_header(o);
  printf("#   then: %-24s %-12s %12s %12s %7s %9s %8s   (time: %s)\n", "codec", "algo", "wire(B)", "net(B)", "ratio",
         "rel_err", "speedup", sh->x.link_model ? "simulated, gcclCommSimTime" : "wall clock");
}

/* A number in `fmt`, or "-" right-aligned in `width` when it was not measured (< 0). */
static void print_optional(const char* fmt, int width, double v) {
  if (v >= 0)
    printf(fmt, v);
  else
    printf("%*s", width, "-");
}

static void add_record(shared_state* sh, record r) {
  if (sh->nrecs == sh->cap_recs) {
    sh->cap_recs = sh->cap_recs ? 2 * sh->cap_recs : 64;
    sh->recs = realloc(sh->recs, sh->cap_recs * sizeof *sh->recs);
    if (!sh->recs) {
      fprintf(stderr, "gccl-bench: out of memory\n");
      exit(1);
    }
  }
  sh->recs[sh->nrecs++] = r;
}

static void json_number(FILE* f, const char* key, double v, int last) {
  if (isfinite(v) && v >= 0)
    fprintf(f, "\"%s\": %.9g%s", key, v, last ? "" : ", ");
  else
    fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

static int write_json(const shared_state* sh) {
  FILE* f = fopen(sh->x.json_path, "w");
  if (!f) {
    perror(sh->x.json_path);
    return -1;
  }
  const bench_opts* o = &sh->o;
  const ext_opts* x = &sh->x;
  fprintf(f, "[\n");
  for (size_t i = 0; i < sh->nrecs; i++) {
    const record* r = &sh->recs[i];
    fprintf(f,
            "  {\"collective\": \"%s\", \"type\": \"%s\", \"op\": \"%s\", \"size\": %zu, \"codec\": \"%s\", "
            "\"algo\": \"%s\", \"p\": %d, \"L\": %d, \"time\": \"%s\", ",
            bench_coll_names[o->coll], bench_type_names[o->type], bench_op_names[o->op], r->bytes,
            r->codec ? r->codec : "none", r->algo ? r->algo : "auto", o->nranks,
            x->ranks_per_node ? x->ranks_per_node : o->nranks, x->link_model ? "simulated" : "wall");
    json_number(f, "link_gbps", x->link_model ? x->link_gbps : -1, 0);
    json_number(f, "link_us", x->link_model ? x->link_us : -1, 0);
    json_number(f, "time_us", r->time_us, 0);
    json_number(f, "busbw", r->busbw, 0);
    json_number(f, "wire_bytes", r->wire_bytes, 0);
    json_number(f, "net_bytes", r->net_bytes, 0);
    json_number(f, "ratio", r->ratio, 0);
    json_number(f, "rel_err", r->rel_err, 0);
    json_number(f, "speedup", r->speedup, 1);
    fprintf(f, "}%s\n", i + 1 < sh->nrecs ? "," : "");
  }
  fprintf(f, "]\n");
  return fclose(f) == 0 ? 0 : -1;
}

/* ---- the ranks ------------------------------------------------------------------------ */

/* Allocates and touches one size's buffers (never inside a timed loop). */
static void alloc_buffers(rank_ctx* c) {
  const bench_opts* o = &c->sh->o;
  size_t send_n = bench_send_elems(o, c->count), recv_n = bench_recv_elems(o, c->count);
  c->send = bench_alloc(send_n * c->es);
  c->recv = bench_alloc(recv_n * c->es);
  memset(c->recv, 0, recv_n * c->es);
}

/* Times one variant at one size; rank 0 prints its row. *best_dense: the fastest
 * dense time of this size so far (0: none yet); dense variants run first, so a
 * codec's speed-up is against the fastest of them all. */
static void run_variant(rank_ctx* c, const variant* v, double* best_dense) {
  shared_state* sh = c->sh;
  const bench_opts* o = &sh->o;
  size_t n_in;
  c->comm = sh->comms[v->comm_set][c->rank];
  c->comp = NULL;
  if (v->codec)
    check_gccl(c, gcclCompressorCreate(&c->comp, v->codec, bench_send_elems(o, c->count), (gcclDataType_t)o->type),
               "gcclCompressorCreate");
  int float_input = bench_is_float(o->type);
  if (float_input)
    fill_gauss(o, c->rank, input_of(c, 0, &n_in), bench_send_elems(o, c->count));
  else
    bench_fill_input(&sh->tb, o, c->rank, c->send, bench_send_elems(o, c->count));
  /* In place, each call's result is the next one's input: sums grow without bound,
   * which would send codecs down their non-finite paths; only dense calls run it. */
  int modes = v->codec ? 1 : 1 + o->inplace;
  double sec[2] = {0, 0}, wire[2][2] = {{-1, -1}, {-1, -1}};
  size_t wrong[2] = {0, 0};
  for (int ip = 0; ip < modes; ip++) sec[ip] = time_mode(c, ip, wire[ip]);
  for (int ip = 0; ip < modes && o->check && !v->codec; ip++) wrong[ip] = check_mode(c, ip);
  if (c->comp) { /* the error of one call, not of the residual the timed calls left */
    gcclCompressorDestroy(c->comp);
    check_gccl(c, gcclCompressorCreate(&c->comp, v->codec, bench_send_elems(o, c->count), (gcclDataType_t)o->type),
               "gcclCompressorCreate");
  }
  double rel_err = has_rel_err(o) ? rel_err_mode(c) : -1;
  if (c->comp) gcclCompressorDestroy(c->comp);
  c->comp = NULL;
  if (c->rank == 0) {
    if (!v->codec && (*best_dense == 0 || sec[0] < *best_dense)) *best_dense = sec[0];
    double dense_bytes = (double)bench_bytes(o, c->count) * bench_busbw_factor(o);
    double ratio = wire[0][0] > 0 ? dense_bytes / wire[0][0] : -1;
    double speedup = *best_dense > 0 && sec[0] > 0 ? *best_dense / sec[0] : -1;
    bench_opts lossy = *o;
    lossy.check = 0; /* a codec's result is not exact: its error is rel_err */
    bench_print_row_start(o, c->count);
    double busbw = 0;
    for (int ip = 0; ip <= o->inplace; ip++) {
      if (ip >= modes) {
        printf("  %7s  %6s  %6s  %6s", "-", "-", "-", "-");
        continue;
      }
      double b = bench_print_result(v->codec ? &lossy : o, c->count, sec[ip], wrong[ip]);
      if (ip == 0) busbw = b;
      sh->busbw_sum += b;
      sh->wrong_total += wrong[ip];
      sh->results++;
    }
    printf("   %-24s %-12s", v->codec ? v->codec : "none", v->algo ? v->algo : "auto");
    print_optional(" %12.0f", 13, wire[0][0]);
    print_optional(" %12.0f", 13, wire[0][1]);
    print_optional(" %7.2f", 8, ratio);
    print_optional(" %9.2e", 10, rel_err);
    print_optional(" %8.2f", 9, speedup);
    printf("\n");
    fflush(stdout);
    add_record(sh, (record){.bytes = bench_bytes(o, c->count),
                            .codec = v->codec,
                            .algo = v->algo,
                            .time_us = sec[0] * 1e6,
                            .busbw = busbw,
                            .wire_bytes = wire[0][0],
                            .net_bytes = wire[0][1],
                            .ratio = ratio,
                            .rel_err = rel_err,
                            .speedup = speedup});
  }
  barrier(sh); /* rank 0's best_dense is read by nobody else; its row is printed */
}

static void* rank_main(void* arg) {
  rank_ctx c = *(rank_ctx*)arg;
  shared_state* sh = c.sh;
  const bench_opts* o = &sh->o;
  for (size_t bytes = o->min_bytes; bytes; bytes = bench_next_size(o, bytes)) {
    c.count = bench_count(o, bytes);
    alloc_buffers(&c);
    double best_dense = 0;
    for (int k = 0; k < sh->x.nv; k++) run_variant(&c, &sh->x.v[k], &best_dense);
    barrier(sh); /* every rank's last call is over before anyone frees */
    free(c.send);
    free(c.recv);
  }
  return NULL;
}

/* ---- command line ------------------------------------------------------------------------ */

static void ext_usage(void) {
  fprintf(stderr,
          "gccl-bench options beyond nccl-tests':\n"
          "  --codec SPECS        compressor specs, repeatable or space-separated (\"none\" = the dense call);\n"
          "                       one row per spec; allreduce, allgather and reducescatter\n"
          "  --algo NAME          GCCL_ALGO for the communicators (as -a)\n"
          "  --dense-best         also time the dense ring, rhd and tree (and hier with several nodes)\n"
          "                       and report each row's speed-up against the fastest of them\n"
          "  --ranks-per-node L   GCCL_RANKS_PER_NODE: ranks per virtual node\n"
          "  --link-gbps G        link model: each rank's link, Gbit/s (GCCL_SIM_LINK_GBPS)\n"
          "  --link-us U          link model: inter-node latency, microseconds (GCCL_SIM_LINK_US)\n"
          "  --pace               let ranks sleep until the wall clock follows the model (slower runs;\n"
          "                       times are simulated either way)\n"
          "  -J FILE              write every result as JSON (a list of records)\n");
}

static int parse_double(const char* s, double* out) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0) || isinf(v)) return -1;
  *out = v;
  return 0;
}

static int add_variant(ext_opts* x, const char* codec, const char* algo) {
  if (x->nv == MAX_VARIANTS) {
    fprintf(stderr, "gccl-bench: more than %d variants\n", MAX_VARIANTS);
    return -1;
  }
  x->v[x->nv++] = (variant){.codec = codec, .algo = algo};
  return 0;
}

/* Takes the extended options out of argv (the rest is left, in order, in *kept for
 * bench_parse_args). Codec specs are split at spaces into `codecs`. Returns 0 or -1. */
static int parse_ext(int argc, char** argv, ext_opts* x, char** kept, int* nkept, char** codecs, int* ncodecs) {
  *nkept = 0;
  *ncodecs = 0;
  for (int i = 0; i < argc; i++) {
    const char* a = argv[i];
    int takes_value = !strcmp(a, "--codec") || !strcmp(a, "--algo") || !strcmp(a, "--ranks-per-node") ||
                      !strcmp(a, "--link-gbps") || !strcmp(a, "--link-us") || !strcmp(a, "-J");
    if (i > 0 && (!strcmp(a, "--help") || !strcmp(a, "-h"))) return -1;
    if (i > 0 && !strcmp(a, "--dense-best")) {
      x->dense_best = 1;
      continue;
    }
    if (i > 0 && !strcmp(a, "--pace")) {
      x->pace = 1;
      continue;
    }
    if (i == 0 || !takes_value) {
      kept[(*nkept)++] = argv[i];
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "gccl-bench: %s needs a value\n", a);
      return -1;
    }
    char* v = argv[++i];
    int bad = 0;
    if (!strcmp(a, "--codec")) {
      for (char* tok = strtok(v, " \t"); tok; tok = strtok(NULL, " \t")) {
        if (*ncodecs == MAX_VARIANTS) {
          bad = 1;
          break;
        }
        codecs[(*ncodecs)++] = tok;
      }
    } else if (!strcmp(a, "--algo")) {
      kept[(*nkept)++] = "-a";
      kept[(*nkept)++] = v;
    } else if (!strcmp(a, "--ranks-per-node")) {
      bad = bench_parse_int(v, 1, 4096, &x->ranks_per_node);
    } else if (!strcmp(a, "--link-gbps")) {
      bad = parse_double(v, &x->link_gbps) || x->link_gbps <= 0;
      x->link_model = 1;
    } else if (!strcmp(a, "--link-us")) {
      bad = parse_double(v, &x->link_us);
      x->link_model = 1;
    } else {
      x->json_path = v;
    }
    if (bad) {
      fprintf(stderr, "gccl-bench: bad value for %s: %s\n", a, v);
      return -1;
    }
  }
  return 0;
}

/* The variants in run order: dense ones first, so that every codec's row has its
 * baseline. */
static int plan_variants(shared_state* sh, char** codecs, int ncodecs) {
  ext_opts* x = &sh->x;
  const bench_opts* o = &sh->o;
  int L = x->ranks_per_node;
  if (x->dense_best) {
    static const char* const dense_algos[] = {"ring", "rhd", "tree", "hier"};
    int n = L > 1 && L < o->nranks ? 4 : 3;
    for (int k = 0; k < n; k++)
      if (add_variant(x, NULL, dense_algos[k])) return -1;
  }
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < ncodecs; k++) {
      int dense = !strcmp(codecs[k], "none");
      if (dense == (pass == 0) && add_variant(x, dense ? NULL : codecs[k], o->algo)) return -1;
    }
  if (x->nv == 0 && add_variant(x, NULL, o->algo)) return -1;
  for (int k = 0; k < x->nv; k++) {
    variant* v = &x->v[k];
    if (v->codec && (!bench_is_float(o->type) || o->coll == COLL_BROADCAST || o->coll == COLL_REDUCE)) {
      fprintf(stderr, "gccl-bench: --codec %s: codecs need a float type and allreduce, allgather or reducescatter\n",
              v->codec);
      return -1;
    }
    int s = 0;
    while (s < x->nalgos && !(x->algos[s] == v->algo || (x->algos[s] && v->algo && !strcmp(x->algos[s], v->algo)))) s++;
    if (s == x->nalgos) {
      if (x->nalgos == MAX_ALGOS) {
        fprintf(stderr, "gccl-bench: more than %d GCCL_ALGO settings\n", MAX_ALGOS);
        return -1;
      }
      x->algos[x->nalgos++] = v->algo;
    }
    v->comm_set = s;
  }
  return 0;
}

static int set_env(const char* name, const char* value) {
  int r = value ? setenv(name, value, 1) : unsetenv(name);
  if (r != 0) perror(name);
  return r;
}

/* Makes every communicator set, each with its GCCL_ALGO, under the link model's
 * environment (read when a communicator is created). */
static int make_comms(shared_state* sh) {
  const ext_opts* x = &sh->x;
  char buf[64];
  if (x->ranks_per_node) {
    snprintf(buf, sizeof buf, "%d", x->ranks_per_node);
    if (set_env("GCCL_RANKS_PER_NODE", buf)) return -1;
  }
  if (x->link_model) {
    snprintf(buf, sizeof buf, "%.17g", x->link_gbps);
    if (set_env("GCCL_SIM_LINK_GBPS", x->link_gbps > 0 ? buf : NULL)) return -1;
    snprintf(buf, sizeof buf, "%.17g", x->link_us);
    if (set_env("GCCL_SIM_LINK_US", buf) || set_env("GCCL_SIM_LINK_PACE", x->pace ? "1" : "0")) return -1;
  } else if (set_env("GCCL_SIM_LINK_GBPS", NULL) || set_env("GCCL_SIM_LINK_US", NULL)) {
    return -1;
  }
  const char* user_algo = getenv("GCCL_ALGO");
  char* saved = user_algo ? strdup(user_algo) : NULL;
  for (int s = 0; s < x->nalgos; s++) {
    sh->comms[s] = calloc((size_t)sh->o.nranks, sizeof(gcclComm_t));
    if (!sh->comms[s] || set_env("GCCL_ALGO", x->algos[s] ? x->algos[s] : saved)) return -1;
    rank_ctx none = {.rank = -1};
    check_gccl(&none, gcclCommInitAll(sh->comms[s], sh->o.nranks), "gcclCommInitAll");
  }
  set_env("GCCL_ALGO", saved);
  free(saved);
  return 0;
}

int main(int argc, char** argv) {
  static shared_state sh;
  char** kept = calloc((size_t)argc + 2, sizeof *kept);
  char* codecs[MAX_VARIANTS];
  int nkept = 0, ncodecs = 0;
  if (!kept) return 1;
  if (parse_ext(argc, argv, &sh.x, kept, &nkept, codecs, &ncodecs) != 0) {
    bench_usage(argv[0], 1);
    ext_usage();
    return 2;
  }
  if (bench_parse_args(nkept, kept, 1, 0, &sh.o) != 0) {
    ext_usage();
    return 2;
  }
  const bench_opts* o = &sh.o;
  if (o->root >= o->nranks) {
    fprintf(stderr, "gccl-bench: -R %d: root out of range for %d ranks\n", o->root, o->nranks);
    return 2;
  }
  if (plan_variants(&sh, codecs, ncodecs) != 0 || make_comms(&sh) != 0) return 2;
  int version = 0;
  gcclGetVersion(&version);
  const char* algo = getenv("GCCL_ALGO");
  printf("# gccl %d.%d.%d, GCCL_ALGO=%s\n", version / 10000, version / 100 % 100, version % 100,
         o->algo ? o->algo
         : algo  ? algo
                 : "(tuner)");
  if (sh.x.link_model)
    printf("# link model: %d ranks per node, %g Gbit/s, %g us, pacing %s; times are simulated (gcclCommSimTime)\n",
           sh.x.ranks_per_node ? sh.x.ranks_per_node : o->nranks, sh.x.link_gbps, sh.x.link_us,
           sh.x.pace ? "on" : "off");
  bench_print_params(o, "gccl-bench", "threads");
  print_header(&sh);
  fflush(stdout);

  size_t n = (size_t)o->nranks;
  rank_ctx* ctx = calloc(n, sizeof *ctx);
  pthread_t* threads = calloc(n, sizeof *threads);
  sh.times = calloc(MAX_REPS * n, sizeof *sh.times);
  sh.before = calloc(MAX_REPS * n, sizeof *sh.before);
  sh.wire = calloc(n, sizeof *sh.wire);
  sh.net = calloc(n, sizeof *sh.net);
  sh.wrong = calloc(n, sizeof *sh.wrong);
  sh.err2 = calloc(n, sizeof *sh.err2);
  sh.ref2 = calloc(n, sizeof *sh.ref2);
  if (!ctx || !threads || !sh.times || !sh.before || !sh.wire || !sh.net || !sh.wrong || !sh.err2 || !sh.ref2) {
    fprintf(stderr, "gccl-bench: out of memory\n");
    return 1;
  }
  bench_tables_init(&sh.tb, o);
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
  int status = sh.wrong_total ? 1 : 0;
  if (sh.x.json_path && write_json(&sh) != 0) status = 1;

  for (int s = 0; s < sh.x.nalgos; s++) {
    for (int r = 0; r < o->nranks; r++)
      check_gccl(&(rank_ctx){.rank = r}, gcclCommDestroy(sh.comms[s][r]), "gcclCommDestroy");
    free(sh.comms[s]);
  }
  pthread_barrier_destroy(&sh.barrier);
  bench_tables_free(&sh.tb);
  free(sh.times);
  free(sh.before);
  free(sh.wire);
  free(sh.net);
  free(sh.wrong);
  free(sh.err2);
  free(sh.ref2);
  free(sh.recs);
  free(ctx);
  free(threads);
  free(kept);
  return status;
}
