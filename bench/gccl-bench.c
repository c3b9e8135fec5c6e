/* gccl-bench.c — nccl-tests for gccl: times collectives over a range of sizes and
 * prints nccl-tests' table; optionally compressed (codecs) and over the link model
 * (virtual nodes and a simulated network), with one row per size and variant.
 * Ranks are threads of this process, or with --mpi one per MPI process
 * (mpi_mode.c), where every size also gets a row for the MPI library's own
 * collective, the baseline the others are compared against.
 *
 *   gccl-bench allreduce -r 4 -b 8 -e 128M -f 2 -d float -o sum -n 20 -w 5 -c 1
 *   gccl-bench allreduce -r 8 --ranks-per-node 1 --link-gbps 1 --link-us 10 --dense-best \
 *       --codec "fp16 uniform:bits=8 sign topk:ratio=0.01" -b 100M -e 100M -n 3 -w 1 -J out.json
 *   mpirun -np 4 gccl-bench --mpi allreduce --dense-best --codec "fp16 sign" -b 16M -e 100M -f 6.25 -m
 *
 * Thread mode: main makes one set of communicators (gcclCommInitAll) per
 * GCCL_ALGO a variant needs, after setting the link model's environment; then
 * each rank's thread, for each size and variant: fills its input, warms up, and
 * times -n calls from a barrier-aligned start. With the link model on, time is
 * simulated (gcclCommSimTime: the latest rank clock after the calls minus the
 * latest before them, every call starting with a synchronising agreement), else
 * the slowest rank's wall time; per call, median of 5 such timings with -m. Dense
 * variants time out-of-place then in-place and, with -c 1, compare one call on
 * fresh inputs element by element with an exact CPU reference. Every variant on a
 * float type also runs one call on pseudo-Gaussian inputs (with a fresh
 * compressor: zero residual) and reports the relative L2 error of its result
 * against the exact (fp64) one. MPI mode runs the same driver (gccl_bench.h).
 *
 * Extra columns, after nccl-tests' ones: codec, algorithm, bytes per call sent
 * by the busiest rank (wire: to any peer; net: to other nodes, what its network
 * link carried; thread mode: link model only), compression ratio (the bytes a
 * bandwidth-optimal dense algorithm sends per rank, busbw's numerator, over the
 * wire bytes), relative L2 error, and speed-up against the fastest dense variant
 * of the same size; MPI mode adds the speed-up against the MPI library's
 * collective. busbw is always computed on uncompressed bytes. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>

#include "gccl_bench.h"
#include "gccl_sim.h"

void bench_check_gccl(const rank_ctx* c, gcclResult_t r, const char* what) {
  if (r == gcclSuccess) return;
  fprintf(stderr, "gccl-bench: rank %d: %s failed: %s: %s\n", c->rank, what, gcclGetErrorString(r),
          gcclGetLastError(c->comm));
  exit(1);
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
  int coll = c->run->o.coll;
  *n = bench_send_elems(&c->run->o, c->count);
  if (!inplace || coll == COLL_REDUCESCATTER) return c->send;
  return coll == COLL_ALLGATHER ? c->recv + (size_t)c->rank * c->count * c->es : c->recv;
}

/* In place, gccl's reduce-scatter leaves a rank's share where it lay in the input
 * (as NCCL's); MPI_Reduce_scatter_block leaves it at the start of the buffer. */
static char* output_of(const rank_ctx* c, int inplace) {
  if (inplace && c->run->o.coll == COLL_REDUCESCATTER)
    return c->v->mpi ? c->send : c->send + (size_t)c->rank * c->count * c->es;
  return c->recv;
}

static void run_once(const rank_ctx* c, int inplace) {
  if (c->v->mpi) {
    c->tp->run_mpi(c, inplace);
    return;
  }
  const bench_opts* o = &c->run->o;
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
  bench_check_gccl(c, r, bench_coll_names[o->coll]);
}

/* ---- timing and checks ------------------------------------------------------------- */

/* One mode's timing. Valid on every rank. */
typedef struct {
  double sec;       /* per call (median of MAX_REPS with -m) */
  double wire, net; /* the busiest rank's bytes per call, all and across the network; -1: not counted */
  double cpu_all;   /* CPU seconds per call of all ranks together (MPI mode); -1: not measured */
} timing;

/* Times -n calls: simulated with the link model, else the slowest rank's wall
 * time from a barrier-aligned start. Bytes and CPU time are the last repetition's. */
static timing time_mode(const rank_ctx* c, int inplace) {
  const bench_run* run = c->run;
  const bench_opts* o = &run->o;
  int reps = o->median ? MAX_REPS : 1, sim = run->x.link_model && !c->v->mpi;
  double per_rep[MAX_REPS];
  unsigned counted = 0;
  double v[4] = {0}, cpu = -1; /* v: max over ranks of time or clock after, clock before, wire, net */
  for (int i = 0; i < o->warmup; i++) run_once(c, inplace);
  for (int rep = 0; rep < reps; rep++) {
    uint64_t b0[2] = {0, 0}, b1[2] = {0, 0};
    memset(v, 0, sizeof v);
    c->tp->barrier(c);
    double t0 = c->tp->now(), cpu0 = c->tp->cpu_now ? c->tp->cpu_now() : 0;
    if (sim) bench_check_gccl(c, gcclCommSimTime(c->comm, &v[1]), "gcclCommSimTime");
    counted = c->tp->bytes_sent(c, b0);
    for (int i = 0; i < o->iters; i++) run_once(c, inplace);
    if (sim)
      bench_check_gccl(c, gcclCommSimTime(c->comm, &v[0]), "gcclCommSimTime");
    else
      v[0] = (c->tp->now() - t0) / o->iters;
    if (c->tp->cpu_now) cpu = (c->tp->cpu_now() - cpu0) / o->iters;
    counted &= c->tp->bytes_sent(c, b1);
    for (int k = 0; k < 2; k++)
      if (counted >> k & 1) v[2 + k] = (double)((b1[k] - b0[k]) / (uint64_t)o->iters);
    c->tp->allreduce(c, v, 4, 1);
    per_rep[rep] = sim ? (v[0] - v[1]) / o->iters : v[0];
  }
  if (c->tp->cpu_now) c->tp->allreduce(c, &cpu, 1, 0);
  return (timing){.sec = bench_median(per_rep, reps),
                  .wire = counted & 1 ? v[2] : -1,
                  .net = counted & 2 ? v[3] : -1,
                  .cpu_all = cpu};
}

/* Wrong elements of one call on fresh inputs, summed over ranks. Valid on every rank. */
static size_t check_mode(const rank_ctx* c, int inplace) {
  const bench_run* run = c->run;
  size_t n_in, out_n = bench_recv_elems(&run->o, c->count);
  char* in = input_of(c, inplace, &n_in);
  memset(output_of(c, inplace), 0xA5, out_n * c->es); /* poison first: a no-op must not pass */
  bench_fill_input(&run->tb, &run->o, c->rank, in, n_in);
  c->tp->barrier(c);
  run_once(c, inplace);
  double wrong = (double)bench_check_output(&run->tb, &run->o, c->rank, output_of(c, inplace), c->count);
  c->tp->allreduce(c, &wrong, 1, 0);
  return (size_t)wrong;
}

/* Relative L2 error of one out-of-place call on Gaussian inputs; each rank checks a
 * share of the result (every rank holds the same bits of allreduce and allgather
 * results). Valid on every rank. */
static double rel_err_mode(const rank_ctx* c) {
  const bench_opts* o = &c->run->o;
  size_t n_in;
  char* in = input_of(c, 0, &n_in);
  fill_gauss(o, c->rank, in, n_in);
  c->tp->barrier(c);
  run_once(c, 0);
  size_t out_n = bench_recv_elems(o, c->count), lo = 0, hi = out_n;
  if (o->coll != COLL_REDUCESCATTER && o->coll != COLL_REDUCE) {
    lo = out_n * (size_t)c->rank / (size_t)o->nranks;
    hi = out_n * (size_t)(c->rank + 1) / (size_t)o->nranks;
  }
  double e2r2[2] = {0, 0};
  if (o->coll != COLL_REDUCE || c->rank == o->root)
    for (size_t i = lo; i < hi; i++) {
      double want = exact_value(o, c->rank, c->count, i), got = load_value(o->type, c->recv + i * c->es);
      e2r2[0] += (got - want) * (got - want);
      e2r2[1] += want * want;
    }
  c->tp->allreduce(c, e2r2, 2, 0);
  return e2r2[1] > 0 ? sqrt(e2r2[0] / e2r2[1]) : 0;
}

/* ---- output ------------------------------------------------------------------------- */

static void print_header(const bench_run* run) {
  const ext_opts* x = &run->x;
  bench_print_table_header(&run->o);
  printf("#   then: %-24s %-12s %12s %12s %7s %9s %8s%s   (time: %s)\n", "codec", "algo", "wire(B)", "net(B)", "ratio",
         "rel_err", "speedup", x->mpi ? "   vs_mpi  cpu_all(ms)" : "",
         x->link_model ? "simulated, gcclCommSimTime"
         : x->mpi      ? "wall clock, MPI_Wtime"
                       : "wall clock");
}

/* A number in `fmt`, or "-" right-aligned in `width` when it was not measured (< 0). */
static void print_optional(const char* fmt, int width, double v) {
  if (v >= 0)
    printf(fmt, v);
  else
    printf("%*s", width, "-");
}

static void add_record(bench_run* run, record r) {
  if (run->nrecs == run->cap_recs) {
    run->cap_recs = run->cap_recs ? 2 * run->cap_recs : 64;
    run->recs = realloc(run->recs, run->cap_recs * sizeof *run->recs);
    if (!run->recs) {
      fprintf(stderr, "gccl-bench: out of memory\n");
      exit(1);
    }
  }
  run->recs[run->nrecs++] = r;
}

static void json_number(FILE* f, const char* key, double v, int last) {
  if (isfinite(v) && v >= 0)
    fprintf(f, "\"%s\": %.9g%s", key, v, last ? "" : ", ");
  else
    fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

/* MPI mode adds "transport": "mpi", "speedup_mpi" and "cpu_all_us"; the rest is thread mode's. */
static int write_json(const bench_run* run) {
  FILE* f = fopen(run->x.json_path, "w");
  if (!f) {
    perror(run->x.json_path);
    return -1;
  }
  const bench_opts* o = &run->o;
  const ext_opts* x = &run->x;
  fprintf(f, "[\n");
  for (size_t i = 0; i < run->nrecs; i++) {
    const record* r = &run->recs[i];
    fprintf(f,
            "  {\"collective\": \"%s\", \"type\": \"%s\", \"op\": \"%s\", \"size\": %zu, \"codec\": \"%s\", "
            "\"algo\": \"%s\", \"p\": %d, \"L\": %d, \"time\": \"%s\", ",
            bench_coll_names[o->coll], bench_type_names[o->type], bench_op_names[o->op], r->bytes,
            r->codec ? r->codec : "none", r->algo ? r->algo : "auto", o->nranks, x->nodes_L,
            x->link_model && !r->mpi ? "simulated" : "wall");
    if (x->mpi) fprintf(f, "\"transport\": \"mpi\", ");
    json_number(f, "link_gbps", x->link_model ? x->link_gbps : x->net_gbps > 0 ? x->net_gbps : -1, 0);
    json_number(f, "link_us", x->link_model ? x->link_us : -1, 0);
    json_number(f, "time_us", r->time_us, 0);
    json_number(f, "busbw", r->busbw, 0);
    json_number(f, "wire_bytes", r->wire_bytes, 0);
    json_number(f, "net_bytes", r->net_bytes, 0);
    json_number(f, "ratio", r->ratio, 0);
    json_number(f, "rel_err", r->rel_err, 0);
    json_number(f, "speedup", r->speedup, !x->mpi);
    if (x->mpi) json_number(f, "speedup_mpi", r->speedup_mpi, 0);
    if (x->mpi) json_number(f, "cpu_all_us", r->cpu_all_us, 1);
    fprintf(f, "}%s\n", i + 1 < run->nrecs ? "," : "");
  }
  fprintf(f, "]\n");
  return fclose(f) == 0 ? 0 : -1;
}

void bench_print_banner(const bench_run* run, const char* ranks_what) {
  const bench_opts* o = &run->o;
  const ext_opts* x = &run->x;
  int version = 0;
  gcclGetVersion(&version);
  const char* algo = getenv("GCCL_ALGO");
  printf("# gccl %d.%d.%d, GCCL_ALGO=%s\n", version / 10000, version / 100 % 100, version % 100,
         o->algo ? o->algo
         : algo  ? algo
                 : "(tuner)");
  if (x->link_model)
    printf("# link model: %d ranks per node, %g Gbit/s, %g us, pacing %s; times are simulated (gcclCommSimTime)\n",
           x->ranks_per_node ? x->ranks_per_node : o->nranks, x->link_gbps, x->link_us, x->pace ? "on" : "off");
  bench_print_params(o, "gccl-bench", ranks_what);
  print_header(run);
  fflush(stdout);
}

int bench_finish(bench_run* run) {
  bench_print_footer(run->wrong_total, run->busbw_sum, run->results);
  int status = run->wrong_total ? 1 : 0;
  if (run->x.json_path && write_json(run) != 0) status = 1;
  return status;
}

/* ---- the per-rank driver -------------------------------------------------------------- */

/* Allocates and touches one size's buffers (never inside a timed loop). */
static void alloc_buffers(rank_ctx* c) {
  const bench_opts* o = &c->run->o;
  size_t send_n = bench_send_elems(o, c->count), recv_n = bench_recv_elems(o, c->count);
  c->send = bench_alloc(send_n * c->es);
  c->recv = bench_alloc(recv_n * c->es);
  memset(c->recv, 0, recv_n * c->es);
}

/* The fastest times of one size so far (0: none yet), rank 0 only. */
typedef struct {
  double dense; /* gccl's dense variants */
  double mpi;   /* the MPI library's collective */
} size_best;

/* Creates c->comp afresh for the variant (none for a dense one). */
static void make_compressor(rank_ctx* c) {
  const bench_opts* o = &c->run->o;
  c->comp = NULL;
  if (c->v->codec)
    bench_check_gccl(
        c, gcclCompressorCreate(&c->comp, c->v->codec, bench_send_elems(o, c->count), (gcclDataType_t)o->type),
        "gcclCompressorCreate");
}

/* Rank 0: prints one row and records it. */
static void report_row(rank_ctx* c, const timing t[2], const size_t wrong[2], double rel_err, size_best* best) {
  bench_run* run = c->run;
  const bench_opts* o = &run->o;
  const variant* v = c->v;
  int modes = v->codec ? 1 : 1 + o->inplace;
  double sec = t[0].sec;
  if (!v->codec && !v->mpi && (best->dense == 0 || sec < best->dense)) best->dense = sec;
  if (v->mpi) best->mpi = sec;
  double dense_bytes = (double)bench_bytes(o, c->count) * bench_busbw_factor(o);
  double ratio = t[0].wire > 0 ? dense_bytes / t[0].wire : -1;
  double speedup = best->dense > 0 && sec > 0 ? best->dense / sec : -1;
  double speedup_mpi = best->mpi > 0 && sec > 0 ? best->mpi / sec : -1;
  bench_opts lossy = *o;
  lossy.check = 0; /* a codec's result is not exact: its error is rel_err */
  bench_print_row_start(o, c->count);
  double busbw = 0;
  for (int ip = 0; ip <= o->inplace; ip++) {
    if (ip >= modes) {
      printf("  %7s  %6s  %6s  %6s", "-", "-", "-", "-");
      continue;
    }
    double b = bench_print_result(v->codec ? &lossy : o, c->count, t[ip].sec, wrong[ip]);
    if (ip == 0) busbw = b;
    run->busbw_sum += b;
    run->wrong_total += wrong[ip];
    run->results++;
  }
  printf("   %-24s %-12s", v->codec ? v->codec : "none", v->algo ? v->algo : "auto");
  print_optional(" %12.0f", 13, t[0].wire);
  print_optional(" %12.0f", 13, t[0].net);
  print_optional(" %7.2f", 8, ratio);
  print_optional(" %9.2e", 10, rel_err);
  print_optional(" %8.2f", 9, speedup);
  if (run->x.mpi) {
    print_optional(" %8.2f", 9, speedup_mpi);
    print_optional(" %10.1f", 11, t[0].cpu_all * 1e3);
  }
  printf("\n");
  fflush(stdout);
  add_record(run, (record){.bytes = bench_bytes(o, c->count),
                           .codec = v->codec,
                           .algo = v->algo,
                           .time_us = sec * 1e6,
                           .busbw = busbw,
                           .wire_bytes = t[0].wire,
                           .net_bytes = t[0].net,
                           .cpu_all_us = t[0].cpu_all * 1e6,
                           .ratio = ratio,
                           .rel_err = rel_err,
                           .speedup = speedup,
                           .speedup_mpi = speedup_mpi,
                           .mpi = v->mpi});
}

/* Times one variant at one size; rank 0 prints its row. Dense variants run before
 * codecs (and the MPI baseline before them all), so every row has its baselines. */
static void run_variant(rank_ctx* c, const variant* v, size_best* best) {
  const bench_opts* o = &c->run->o;
  size_t n_in;
  c->v = v;
  c->comm = v->mpi ? NULL : c->comms[v->comm_set];
  make_compressor(c);
  if (bench_is_float(o->type))
    fill_gauss(o, c->rank, input_of(c, 0, &n_in), bench_send_elems(o, c->count));
  else
    bench_fill_input(&c->run->tb, o, c->rank, c->send, bench_send_elems(o, c->count));
  /* In place, each call's result is the next one's input: sums grow without bound,
   * which would send codecs down their non-finite paths; only dense calls run it. */
  int modes = v->codec ? 1 : 1 + o->inplace;
  timing t[2] = {{0, -1, -1, -1}, {0, -1, -1, -1}};
  size_t wrong[2] = {0, 0};
  for (int ip = 0; ip < modes; ip++) t[ip] = time_mode(c, ip);
  for (int ip = 0; ip < modes && o->check && !v->codec; ip++) wrong[ip] = check_mode(c, ip);
  if (c->comp) { /* the error of one call, not of the residual the timed calls left */
    gcclCompressorDestroy(c->comp);
    make_compressor(c);
  }
  double rel_err = has_rel_err(o) ? rel_err_mode(c) : -1;
  if (c->comp) gcclCompressorDestroy(c->comp);
  c->comp = NULL;
  if (c->rank == 0) report_row(c, t, wrong, rel_err, best);
  c->tp->barrier(c); /* rank 0's row is printed before anyone goes on */
}

void bench_rank_main(rank_ctx* c) {
  const bench_run* run = c->run;
  const bench_opts* o = &run->o;
  c->es = bench_type_bytes[o->type];
  for (size_t bytes = o->min_bytes; bytes; bytes = bench_next_size(o, bytes)) {
    c->count = bench_count(o, bytes);
    alloc_buffers(c);
    size_best best = {0, 0};
    for (int k = 0; k < run->x.nv; k++) run_variant(c, &run->x.v[k], &best);
    c->tp->barrier(c); /* every rank's last call is over before anyone frees */
    free(c->send);
    free(c->recv);
  }
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
          "  -J FILE              write every result as JSON (a list of records)\n"
          "  --mpi                one rank per MPI process (run under mpirun; no -r), gccl over\n"
          "                       gcclCommInitMpi, and a row per size for the MPI library's own collective%s\n"
          "  --net-if IF          with --mpi: the net column counts what network interface IF transmitted\n"
          "                       (from /proc/net/dev, headers included; one rank per network namespace)\n"
          "  --net-gbps G         with --mpi: the real network's rate per rank, recorded as link_gbps in -J's\n"
          "                       JSON (for bench/plot.py; nothing is simulated)\n",
#ifdef GCCL_BENCH_MPI
          ""
#else
          " (not in this build: no MPI)"
#endif
  );
}

static int parse_double(const char* s, double* out) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0) || isinf(v)) return -1;
  *out = v;
  return 0;
}

static int add_variant(ext_opts* x, variant v) {
  if (x->nv == MAX_VARIANTS) {
    fprintf(stderr, "gccl-bench: more than %d variants\n", MAX_VARIANTS);
    return -1;
  }
  x->v[x->nv++] = v;
  return 0;
}

/* Takes the extended options out of argv (the rest is left, in order, in *kept for
 * bench_parse_args). Codec specs are split at spaces into x->codecs. Returns 0 or -1. */
static int parse_ext(int argc, char** argv, ext_opts* x, char** kept, int* nkept, int quiet) {
  *nkept = 0;
  x->ncodecs = 0;
  for (int i = 0; i < argc; i++) {
    const char* a = argv[i];
    int takes_value = !strcmp(a, "--codec") || !strcmp(a, "--algo") || !strcmp(a, "--ranks-per-node") ||
                      !strcmp(a, "--link-gbps") || !strcmp(a, "--link-us") || !strcmp(a, "-J") ||
                      !strcmp(a, "--net-if") || !strcmp(a, "--net-gbps");
    if (i > 0 && (!strcmp(a, "--help") || !strcmp(a, "-h"))) return -1;
    if (i > 0 && !strcmp(a, "--dense-best")) {
      x->dense_best = 1;
      continue;
    }
    if (i > 0 && !strcmp(a, "--pace")) {
      x->pace = 1;
      continue;
    }
    if (i > 0 && !strcmp(a, "--mpi")) {
      x->mpi = 1;
      continue;
    }
    if (i == 0 || !takes_value) {
      kept[(*nkept)++] = argv[i];
      continue;
    }
    if (i + 1 >= argc) {
      if (!quiet) fprintf(stderr, "gccl-bench: %s needs a value\n", a);
      return -1;
    }
    char* v = argv[++i];
    int bad = 0;
    if (!strcmp(a, "--codec")) {
      for (char* tok = strtok(v, " \t"); tok; tok = strtok(NULL, " \t")) {
        if (x->ncodecs == MAX_VARIANTS) {
          bad = 1;
          break;
        }
        x->codecs[x->ncodecs++] = tok;
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
    } else if (!strcmp(a, "--net-if")) {
      x->net_if = v;
    } else if (!strcmp(a, "--net-gbps")) {
      bad = parse_double(v, &x->net_gbps) || x->net_gbps <= 0;
    } else {
      x->json_path = v;
    }
    if (bad) {
      if (!quiet) fprintf(stderr, "gccl-bench: bad value for %s: %s\n", a, v);
      return -1;
    }
  }
  return 0;
}

int bench_parse(int argc, char** argv, bench_run* run, int quiet) {
  char** kept = calloc((size_t)argc + 2, sizeof *kept);
  int nkept = 0, status = -1;
  if (!kept) return -1;
  if (parse_ext(argc, argv, &run->x, kept, &nkept, quiet) != 0) {
    if (!quiet) {
      bench_usage(argv[0], 1);
      ext_usage();
    }
    goto out;
  }
  /* MPI mode: the ranks are mpirun's; -r would only mislead. */
  for (int i = 1; i < nkept && run->x.mpi; i++)
    if (!strcmp(kept[i], "-r")) {
      if (!quiet) fprintf(stderr, "gccl-bench: --mpi: the ranks are the MPI processes; -r is not allowed\n");
      goto out;
    }
  /* gccl applies the link model to thread ranks only; over MPI the network is real. */
  if (run->x.mpi && (run->x.link_model || run->x.pace)) {
    if (!quiet)
      fprintf(stderr,
              "gccl-bench: --mpi: the link model (--link-gbps, --link-us, --pace) is for thread ranks; shape a real "
              "network instead (bench/netns-testbed.sh)\n");
    goto out;
  }
  if ((run->x.net_if || run->x.net_gbps > 0) && !run->x.mpi) {
    if (!quiet) fprintf(stderr, "gccl-bench: --net-if and --net-gbps need --mpi\n");
    goto out;
  }
  if (bench_parse_args(nkept, kept, 1, quiet, &run->o) != 0) {
    if (!quiet) ext_usage();
    goto out;
  }
  status = 0;
out:
  free(kept);
  return status;
}

int bench_plan(bench_run* run, int mpi_baseline, int quiet) {
  ext_opts* x = &run->x;
  const bench_opts* o = &run->o;
  int L = x->ranks_per_node ? x->ranks_per_node : x->nodes_L;
  if (mpi_baseline && add_variant(x, (variant){.algo = "mpi", .mpi = 1})) return -1;
  if (x->dense_best) {
    static const char* const dense_algos[] = {"ring", "rhd", "tree", "hier"};
    int n = L > 1 && L < o->nranks ? 4 : 3;
    for (int k = 0; k < n; k++)
      if (add_variant(x, (variant){.algo = dense_algos[k]})) return -1;
  }
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < x->ncodecs; k++) {
      int dense = !strcmp(x->codecs[k], "none");
      if (dense == (pass == 0) && add_variant(x, (variant){.codec = dense ? NULL : x->codecs[k], .algo = o->algo}))
        return -1;
    }
  if (x->nv == mpi_baseline && add_variant(x, (variant){.algo = o->algo})) return -1;
  for (int k = 0; k < x->nv; k++) {
    variant* v = &x->v[k];
    if (v->mpi) continue;
    if (v->codec && (!bench_is_float(o->type) || o->coll == COLL_BROADCAST || o->coll == COLL_REDUCE)) {
      if (!quiet)
        fprintf(stderr, "gccl-bench: --codec %s: codecs need a float type and allreduce, allgather or reducescatter\n",
                v->codec);
      return -1;
    }
    int s = 0;
    while (s < x->nalgos && !(x->algos[s] == v->algo || (x->algos[s] && v->algo && !strcmp(x->algos[s], v->algo)))) s++;
    if (s == x->nalgos) {
      if (x->nalgos == MAX_ALGOS) {
        if (!quiet) fprintf(stderr, "gccl-bench: more than %d GCCL_ALGO settings\n", MAX_ALGOS);
        return -1;
      }
      x->algos[x->nalgos++] = v->algo;
    }
    v->comm_set = s;
  }
  return 0;
}

int bench_set_env(const char* name, const char* value) {
  int r = value ? setenv(name, value, 1) : unsetenv(name);
  if (r != 0) perror(name);
  return r;
}

int bench_link_env(const ext_opts* x) {
  char buf[64];
  if (x->ranks_per_node) {
    snprintf(buf, sizeof buf, "%d", x->ranks_per_node);
    if (bench_set_env("GCCL_RANKS_PER_NODE", buf)) return -1;
  }
  if (x->link_model) {
    snprintf(buf, sizeof buf, "%.17g", x->link_gbps);
    if (bench_set_env("GCCL_SIM_LINK_GBPS", x->link_gbps > 0 ? buf : NULL)) return -1;
    snprintf(buf, sizeof buf, "%.17g", x->link_us);
    if (bench_set_env("GCCL_SIM_LINK_US", buf) || bench_set_env("GCCL_SIM_LINK_PACE", x->pace ? "1" : "0")) return -1;
  } else if (bench_set_env("GCCL_SIM_LINK_GBPS", NULL) || bench_set_env("GCCL_SIM_LINK_US", NULL)) {
    return -1;
  }
  return 0;
}

/* ---- thread mode: every rank a thread of this process ----------------------------------- */

#define MAX_VALUES 8 /* doubles per bench_transport allreduce */

typedef struct {
  pthread_barrier_t barrier;
  int nranks;
  double* slots; /* [MAX_VALUES][nranks] */
} thread_state;

static void thread_barrier(const rank_ctx* c) {
  pthread_barrier_wait(&((thread_state*)c->tp_state)->barrier);
}

/* Each rank posts its values, then every rank reduces all of them in rank order
 * (the same sums on every rank); the second barrier keeps the slots until all
 * have read them. */
static void thread_allreduce(const rank_ctx* c, double* v, int n, int max) {
  thread_state* ts = c->tp_state;
  size_t p = (size_t)ts->nranks;
  for (int k = 0; k < n; k++) ts->slots[(size_t)k * p + (size_t)c->rank] = v[k];
  thread_barrier(c);
  for (int k = 0; k < n; k++) {
    const double* s = ts->slots + (size_t)k * p;
    double acc = max ? s[0] : 0;
    for (size_t r = 0; r < p; r++) acc = max ? (s[r] > acc ? s[r] : acc) : acc + s[r];
    v[k] = acc;
  }
  thread_barrier(c);
}

/* The link model counts what every rank sent; without it nothing is counted. */
static unsigned thread_bytes_sent(const rank_ctx* c, uint64_t out[2]) {
  if (!c->run->x.link_model) return 0;
  bench_check_gccl(c, gcclCommSimBytesSent(c->comm, &out[0]), "gcclCommSimBytesSent");
  bench_check_gccl(c, gcclCommSimInterNodeBytesSent(c->comm, &out[1]), "gcclCommSimInterNodeBytesSent");
  return 3;
}

static const bench_transport thread_transport = {
    .barrier = thread_barrier, .allreduce = thread_allreduce, .now = bench_now, .bytes_sent = thread_bytes_sent};

static void* thread_main(void* arg) {
  bench_rank_main(arg);
  return NULL;
}

/* Makes every communicator set, each with its GCCL_ALGO, under the link model's
 * environment (read when a communicator is created): comms[set][rank]. */
static int make_comms(const bench_run* run, gcclComm_t* comms[MAX_ALGOS]) {
  const ext_opts* x = &run->x;
  if (bench_link_env(x)) return -1;
  const char* user_algo = getenv("GCCL_ALGO");
  char* saved = user_algo ? strdup(user_algo) : NULL;
  for (int s = 0; s < x->nalgos; s++) {
    comms[s] = calloc((size_t)run->o.nranks, sizeof(gcclComm_t));
    if (!comms[s] || bench_set_env("GCCL_ALGO", x->algos[s] ? x->algos[s] : saved)) return -1;
    rank_ctx none = {.rank = -1};
    bench_check_gccl(&none, gcclCommInitAll(comms[s], run->o.nranks), "gcclCommInitAll");
  }
  bench_set_env("GCCL_ALGO", saved);
  free(saved);
  return 0;
}

static int thread_mode_main(bench_run* run) {
  const bench_opts* o = &run->o;
  gcclComm_t* comms[MAX_ALGOS] = {0};
  run->x.nodes_L = run->x.ranks_per_node ? run->x.ranks_per_node : o->nranks;
  if (o->root >= o->nranks) {
    fprintf(stderr, "gccl-bench: -R %d: root out of range for %d ranks\n", o->root, o->nranks);
    return 2;
  }
  if (bench_plan(run, 0, 0) != 0 || make_comms(run, comms) != 0) return 2;
  bench_print_banner(run, "threads");

  size_t n = (size_t)o->nranks;
  thread_state ts = {.nranks = o->nranks, .slots = calloc(MAX_VALUES * n, sizeof(double))};
  rank_ctx* ctx = calloc(n, sizeof *ctx);
  pthread_t* threads = calloc(n, sizeof *threads);
  if (!ctx || !threads || !ts.slots) {
    fprintf(stderr, "gccl-bench: out of memory\n");
    return 1;
  }
  bench_tables_init(&run->tb, o);
  pthread_barrier_init(&ts.barrier, NULL, (unsigned)o->nranks);
  for (int r = 0; r < o->nranks; r++) {
    ctx[r] = (rank_ctx){.run = run, .tp = &thread_transport, .tp_state = &ts, .rank = r};
    for (int s = 0; s < run->x.nalgos; s++) ctx[r].comms[s] = comms[s][r];
    if (pthread_create(&threads[r], NULL, thread_main, &ctx[r]) != 0) {
      fprintf(stderr, "gccl-bench: cannot start the thread of rank %d\n", r);
      return 1;
    }
  }
  for (int r = 0; r < o->nranks; r++) pthread_join(threads[r], NULL);
  int status = bench_finish(run);

  for (int s = 0; s < run->x.nalgos; s++) {
    for (int r = 0; r < o->nranks; r++)
      bench_check_gccl(&(rank_ctx){.rank = r}, gcclCommDestroy(comms[s][r]), "gcclCommDestroy");
    free(comms[s]);
  }
  pthread_barrier_destroy(&ts.barrier);
  bench_tables_free(&run->tb);
  free(ts.slots);
  free(run->recs);
  free(ctx);
  free(threads);
  return status;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--mpi")) {
#ifdef GCCL_BENCH_MPI
      return bench_mpi_main(argc, argv);
#else
      fprintf(stderr, "gccl-bench: --mpi: this build has no MPI (configure with GCCL_WITH_MPI=ON)\n");
      return 2;
#endif
    }
  static bench_run run;
  if (bench_parse(argc, argv, &run, 0) != 0) return 2;
  return thread_mode_main(&run);
}
