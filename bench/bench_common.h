/* bench_common.h — what gccl-bench and mpi-baseline share: the nccl-tests command
 * line, datatype and op tables, check data with its exact CPU reference, the
 * output table, and a one-thread memcpy ceiling.
 *
 * Header-only (static inline) so that each benchmark stays one translation unit
 * and neither links anything the other needs. Knows nothing of gccl or MPI:
 * datatypes and ops are indices in NCCL's order, which gccl's enums share. */
#ifndef GCCL_BENCH_COMMON_H
#define GCCL_BENCH_COMMON_H

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- collectives, datatypes, ops --------------------------------------------- */

enum { COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCESCATTER, COLL_BROADCAST, COLL_REDUCE, COLL_COUNT };
static const char* const bench_coll_names[COLL_COUNT] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                                         "reduce"};

/* Index = ncclDataType_t = gcclDataType_t. Names as nccl-tests prints them. */
enum { T_INT8, T_UINT8, T_INT32, T_UINT32, T_INT64, T_UINT64, T_HALF, T_FLOAT, T_DOUBLE, T_BF16, T_COUNT };
static const char* const bench_type_names[T_COUNT] = {"int8",   "uint8", "int32", "uint32", "int64",
                                                      "uint64", "half",  "float", "double", "bfloat16"};
static const size_t bench_type_bytes[T_COUNT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

/* Index = ncclRedOp_t = gcclRedOp_t. */
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_COUNT };
static const char* const bench_op_names[OP_COUNT] = {"sum", "prod", "max", "min", "avg"};

static inline int bench_is_float(int t) {
  return t >= T_HALF;
}
static inline int bench_is_signed(int t) {
  return t == T_INT8 || t == T_INT32 || t == T_INT64;
}
static inline int bench_has_op(int coll) {
  return coll == COLL_ALLREDUCE || coll == COLL_REDUCESCATTER || coll == COLL_REDUCE;
}
static inline int bench_has_root(int coll) {
  return coll == COLL_BROADCAST || coll == COLL_REDUCE;
}

/* ---- command line --------------------------------------------------------------- */

typedef struct {
  int coll, nranks, type, op, root;
  size_t min_bytes, max_bytes;
  double factor;
  int iters, warmup, check, inplace, median;
  const char* algo; /* -a, gccl only; NULL = the tuner decides */
} bench_opts;

/* "64", "8K", "16M", "1G" (powers of 1024, as nccl-tests). 0 on a malformed size. */
static inline size_t bench_parse_size(const char* s) {
  static const char units[] = "KkMmGg";
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return 0;
  const char* u = *end ? strchr(units, *end) : NULL;
  unsigned shift = u ? 10 * (1 + (unsigned)(u - units) / 2) : 0;
  if (u) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v > (SIZE_MAX >> shift)) return 0;
  return (size_t)(v << shift);
}

/* *out = v if v is a decimal integer in [lo, hi]. Returns 0, or -1 (no change). */
static inline int bench_parse_int(const char* v, long lo, long hi, int* out) {
  char* end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || !*v || *end || n < lo || n > hi) return -1;
  *out = (int)n;
  return 0;
}

static inline int bench_lookup(const char* s, const char* const* names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

static inline void bench_usage(const char* prog, int gccl) {
  fprintf(stderr,
          "usage: %s allreduce|allgather|reducescatter|broadcast|reduce [options]\n"
          "%s"
          "  -b MIN       smallest size in bytes, K/M/G suffixes (default 32M)\n"
          "  -e MAX       largest size (default 32M)\n"
          "  -f FACTOR    size multiplier between steps, > 1 (default 2)\n"
          "  -d TYPE      int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 (default float)\n"
          "  -o OP        sum prod max min avg (default sum)\n"
          "  -n ITERS     timed iterations per size (default 20)\n"
          "  -w WARMUP    warm-up iterations per size (default 5)\n"
          "  -c 0|1       check results against a CPU reference (default 1)\n"
          "  -R ROOT      root of broadcast and reduce (default 0)\n"
          "  -z           skip the in-place run\n"
          "  -m           median of 5 timings per size\n"
          "%s",
          prog, gccl ? "  -r RANKS     ranks, each a thread of this process (default 2)\n" : "",
          gccl ? "  -a ALGO      set GCCL_ALGO before the communicators are made\n" : "");
}

/* Parses argv into *o. gccl != 0 accepts -r and -a (gccl-bench); else they are
 * errors (mpi-baseline: ranks come from mpirun). Returns 0, or -1 after printing
 * the problem and the usage to stderr (unless quiet). */
static inline int bench_parse_args(int argc, char** argv, int gccl, int quiet, bench_opts* o) {
  *o = (bench_opts){.coll = -1,
                    .nranks = 2,
                    .type = T_FLOAT,
                    .op = OP_SUM,
                    .min_bytes = 32 << 20,
                    .max_bytes = 32 << 20,
                    .factor = 2,
                    .iters = 20,
                    .warmup = 5,
                    .check = 1,
                    .inplace = 1};
  const char* bad = NULL;
  if (argc < 2 || (o->coll = bench_lookup(argv[1], bench_coll_names, COLL_COUNT)) < 0) bad = "collective";
  for (int i = 2; i < argc && !bad; i++) {
    const char* a = argv[i];
    if (a[0] != '-' || !a[1] || a[2]) {
      bad = a;
      break;
    }
    char f = a[1];
    if (f == 'z') {
      o->inplace = 0;
      continue;
    }
    if (f == 'm') {
      o->median = 1;
      continue;
    }
    if (i + 1 >= argc || (!gccl && (f == 'r' || f == 'a'))) {
      bad = a;
      break;
    }
    const char* v = argv[++i];
    char* end;
    int ok = 1;
    /* clang-format off */
    switch (f) {
      case 'r': ok = !bench_parse_int(v, 1, 4096, &o->nranks); break;
      case 'b': ok = (o->min_bytes = bench_parse_size(v)) > 0; break;
      case 'e': ok = (o->max_bytes = bench_parse_size(v)) > 0; break;
      case 'f': o->factor = strtod(v, &end), ok = !*end && o->factor > 1; break;
      case 'd': ok = (o->type = bench_lookup(v, bench_type_names, T_COUNT)) >= 0; break;
      case 'o': ok = (o->op = bench_lookup(v, bench_op_names, OP_COUNT)) >= 0; break;
      case 'n': ok = !bench_parse_int(v, 1, INT_MAX, &o->iters); break;
      case 'w': ok = !bench_parse_int(v, 0, INT_MAX, &o->warmup); break;
      case 'c': ok = !bench_parse_int(v, 0, 1, &o->check); break;
      case 'R': ok = !bench_parse_int(v, 0, INT_MAX, &o->root); break;
      case 'a': o->algo = v; break;
      default: ok = 0; break;
    }
    /* clang-format on */
    if (!ok) bad = a;
  }
  if (!bad && o->min_bytes > o->max_bytes) bad = "-b larger than -e";
  if (bad && !quiet) {
    fprintf(stderr, "%s: bad argument: %s\n", argv[0], bad);
    bench_usage(argv[0], gccl);
  }
  return bad ? -1 : 0;
}

/* ---- sizes and bandwidth ---------------------------------------------------------- */

/* Elements per rank's call argument (nccl-tests' paramcount) for a size in bytes:
 * allgather/reducescatter split the full vector over the ranks. */
static inline size_t bench_count(const bench_opts* o, size_t bytes) {
  size_t c = bytes / bench_type_bytes[o->type];
  return (o->coll == COLL_ALLGATHER || o->coll == COLL_REDUCESCATTER) ? c / (size_t)o->nranks : c;
}

/* Bytes of the full vector, as nccl-tests prints in the size column. */
static inline size_t bench_bytes(const bench_opts* o, size_t count) {
  size_t b = count * bench_type_bytes[o->type];
  return (o->coll == COLL_ALLGATHER || o->coll == COLL_REDUCESCATTER) ? b * (size_t)o->nranks : b;
}

/* Elements of a rank's send and receive buffers for a call of `count`. */
static inline size_t bench_send_elems(const bench_opts* o, size_t count) {
  return o->coll == COLL_REDUCESCATTER ? count * (size_t)o->nranks : count;
}
static inline size_t bench_recv_elems(const bench_opts* o, size_t count) {
  return o->coll == COLL_ALLGATHER ? count * (size_t)o->nranks : count;
}

/* busbw = algbw * factor, from nccl-tests doc/PERFORMANCE.md. */
static inline double bench_busbw_factor(const bench_opts* o) {
  double n = o->nranks;
  switch (o->coll) {
    case COLL_ALLREDUCE:
      return 2 * (n - 1) / n;
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
      return (n - 1) / n;
    default:
      return 1;
  }
}

/* The size after `bytes` (times the factor), or 0 past the last one. */
static inline size_t bench_next_size(const bench_opts* o, size_t bytes) {
  double next = (double)bytes * o->factor;
  if (next > (double)o->max_bytes || (size_t)next <= bytes) return 0;
  return (size_t)next;
}

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double bench_median(double* v, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: n is 1 or 5 */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Page-aligned buffer of at least `bytes` (at least one page); exits on failure. */
static inline void* bench_alloc(size_t bytes) {
  size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = aligned_alloc(4096, rounded ? rounded : 4096);
  if (!p) {
    fprintf(stderr, "bench: out of memory allocating %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

/* Best one-thread memcpy rate over a buffer of `bytes` (bytes copied per second,
 * in GB/s): the memory ceiling a CPU collective is measured against. */
static inline double bench_memcpy_gbps(size_t bytes) {
  char* a = bench_alloc(bytes);
  char* b = bench_alloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 1e30, spent = 0;
  for (int rep = 0; rep < 1000 && (rep < 5 || spent < 0.25); rep++) {
    double t0 = bench_now();
    memcpy(rep % 2 ? a : b, rep % 2 ? b : a, bytes);
    double t = bench_now() - t0;
    spent += t;
    if (t < best) best = t;
  }
  volatile char sink = a[bytes / 2] + b[bytes / 3]; /* keep the copies observable */
  (void)sink;
  free(a);
  free(b);
  return (double)bytes / best / 1e9;
}

/* ---- check data ----------------------------------------------------------------------
 * Rank r's input element i is a tiny integer h(r, i mod BENCH_PERIOD): exact in every
 * type (half and bfloat16 included), so every op's result is exact and the reference
 * is a byte comparison. The period is prime so that no power-of-two chunk offset
 * lines the pattern up with itself; within a period the values are hashed, so a
 * shifted or misplaced chunk shows up as wrong elements.
 *   sum, avg: {-1, 0, 1}   prod: {-1, 1}   max, min: {-2 .. 2}
 * Integer types wrap (uint8 holds -1 as 255) and the reference wraps the same way. */
#define BENCH_PERIOD 1021

static inline int64_t bench_gen(int op, int rank, size_t j) {
  uint64_t h = (uint64_t)j * 0x9E3779B97F4A7C15ull + (uint64_t)(rank + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  if (op == OP_PROD) return (h & 1) ? 1 : -1;
  if (op == OP_MAX || op == OP_MIN) return (int64_t)(h % 5) - 2;
  return (int64_t)(h % 3) - 1;
}

/* float -> IEEE half, round to nearest even (F. Giesen's float_to_half_fast3_rtne). */
static inline uint16_t bench_f32_to_f16(float f) {
  uint32_t u, sign;
  memcpy(&u, &f, 4);
  sign = u & 0x80000000u;
  u ^= sign;
  uint16_t o;
  if (u >= (127u + 16) << 23) {
    o = u > 255u << 23 ? 0x7e00 : 0x7c00;
  } else if (u < 113u << 23) {
    float g, magic;
    uint32_t m = ((127u - 15) + (23 - 10) + 1) << 23;
    memcpy(&g, &u, 4);
    memcpy(&magic, &m, 4);
    g += magic;
    memcpy(&u, &g, 4);
    o = (uint16_t)(u - m);
  } else {
    uint32_t mant_odd = (u >> 13) & 1;
    u += ((uint32_t)(15 - 127) << 23) + 0xfff + mant_odd;
    o = (uint16_t)(u >> 13);
  }
  return (uint16_t)(o | (sign >> 16));
}

static inline uint16_t bench_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* Stores an integer value (integer types, wrapping) or a double (float types). */
static inline void bench_store(int t, void* p, int64_t iv, double dv) {
  switch (t) {
    case T_INT8:
    case T_UINT8: {
      uint8_t v = (uint8_t)iv;
      memcpy(p, &v, 1);
      break;
    }
    case T_INT32:
    case T_UINT32: {
      uint32_t v = (uint32_t)iv;
      memcpy(p, &v, 4);
      break;
    }
    case T_INT64:
    case T_UINT64:
      memcpy(p, &iv, 8);
      break;
    case T_HALF: {
      uint16_t v = bench_f32_to_f16((float)dv);
      memcpy(p, &v, 2);
      break;
    }
    case T_FLOAT: {
      float v = (float)dv;
      memcpy(p, &v, 4);
      break;
    }
    case T_DOUBLE:
      memcpy(p, &dv, 8);
      break;
    default: {
      uint16_t v = bench_f32_to_bf16((float)dv);
      memcpy(p, &v, 2);
      break;
    }
  }
}

/* An integer as the type holds it: truncated to its width, sign- or zero-extended. */
static inline int64_t bench_wrap(int t, int64_t v) {
  switch (t) {
    case T_INT8:
      return (int8_t)v;
    case T_UINT8:
      return (uint8_t)v;
    case T_INT32:
      return (int32_t)v;
    case T_UINT32:
      return (uint32_t)v;
    default:
      return v;
  }
}

/* tbl[j] = rank's input element j, j < BENCH_PERIOD. */
static inline void bench_input_table(int t, int op, int rank, void* tbl) {
  for (size_t j = 0; j < BENCH_PERIOD; j++) {
    int64_t v = bench_gen(op, rank, j);
    bench_store(t, (char*)tbl + j * bench_type_bytes[t], v, (double)v);
  }
}

/* tbl[j] = op over ranks of input element j, exactly as the header defines it:
 * integers wrap; avg sums, then divides once (integer division for integers). */
static inline void bench_reduced_table(int t, int op, int nranks, void* tbl) {
  for (size_t j = 0; j < BENCH_PERIOD; j++) {
    uint64_t ia = 0;
    double fa = 0;
    for (int r = 0; r < nranks; r++) {
      int64_t v = bench_wrap(t, bench_gen(op, r, j));
      int64_t a = (int64_t)ia;
      int gt = bench_is_signed(t) ? v > a : (uint64_t)v > ia;
      double d = (double)v;
      if (r == 0) {
        ia = (uint64_t)v;
        fa = d;
        continue;
      }
      switch (op) {
        case OP_PROD:
          ia *= (uint64_t)v;
          fa *= d;
          break;
        case OP_MAX:
          if (gt) ia = (uint64_t)v;
          if (d > fa) fa = d;
          break;
        case OP_MIN:
          if (!gt && v != a) ia = (uint64_t)v;
          if (d < fa) fa = d;
          break;
        default:
          ia += (uint64_t)v;
          fa += d;
          break;
      }
    }
    int64_t iv = bench_wrap(t, (int64_t)ia);
    if (op == OP_AVG) {
      fa /= nranks;
      if (bench_is_signed(t))
        iv = bench_wrap(t, iv / nranks);
      else
        iv = (int64_t)((uint64_t)iv / (uint64_t)nranks);
    }
    bench_store(t, (char*)tbl + j * bench_type_bytes[t], iv, fa);
  }
}

/* buf[k] = tbl[(first + k) % BENCH_PERIOD] for k < n. */
static inline void bench_fill(void* buf, size_t n, int t, const void* tbl, size_t first) {
  size_t es = bench_type_bytes[t], j = first % BENCH_PERIOD;
  char* p = buf;
  while (n) {
    size_t run = BENCH_PERIOD - j < n ? BENCH_PERIOD - j : n;
    memcpy(p, (const char*)tbl + j * es, run * es);
    p += run * es;
    n -= run;
    j = 0;
  }
}

/* Number of k < n with buf[k] != tbl[(first + k) % BENCH_PERIOD], bytewise. */
static inline size_t bench_count_wrong(const void* buf, size_t n, int t, const void* tbl, size_t first) {
  size_t es = bench_type_bytes[t], j = first % BENCH_PERIOD, wrong = 0;
  const char* p = buf;
  while (n) {
    size_t run = BENCH_PERIOD - j < n ? BENCH_PERIOD - j : n;
    const char* want = (const char*)tbl + j * es;
    if (memcmp(p, want, run * es) != 0)
      for (size_t k = 0; k < run; k++) wrong += memcmp(p + k * es, want + k * es, es) != 0;
    p += run * es;
    n -= run;
    j = 0;
  }
  return wrong;
}

/* The tables one run checks against: every rank's input and their reduction. */
typedef struct {
  int data_op;  /* whose value set the inputs use (ops without reduction: max's) */
  char* inputs; /* nranks tables of BENCH_PERIOD elements */
  char* reduced;
} bench_tables;

static inline void bench_tables_init(bench_tables* tb, const bench_opts* o) {
  size_t tbl_bytes = BENCH_PERIOD * bench_type_bytes[o->type];
  tb->data_op = bench_has_op(o->coll) ? o->op : OP_MAX;
  tb->inputs = bench_alloc(tbl_bytes * (size_t)o->nranks);
  tb->reduced = bench_alloc(tbl_bytes);
  for (int r = 0; r < o->nranks; r++) bench_input_table(o->type, tb->data_op, r, tb->inputs + (size_t)r * tbl_bytes);
  bench_reduced_table(o->type, tb->data_op, o->nranks, tb->reduced);
}

static inline void bench_tables_free(bench_tables* tb) {
  free(tb->inputs);
  free(tb->reduced);
}

static inline const char* bench_input_of(const bench_tables* tb, const bench_opts* o, int rank) {
  return tb->inputs + (size_t)rank * BENCH_PERIOD * bench_type_bytes[o->type];
}

/* Writes rank's input: n elements (count, or nranks*count for reducescatter). */
static inline void bench_fill_input(const bench_tables* tb, const bench_opts* o, int rank, void* buf, size_t n) {
  bench_fill(buf, n, o->type, bench_input_of(tb, o, rank), 0);
}

/* Wrong elements in rank's result `out` (count elements, nranks*count for
 * allgather); reduce checks the root only. */
static inline size_t bench_check_output(const bench_tables* tb, const bench_opts* o, int rank, const void* out,
                                        size_t count) {
  size_t es = bench_type_bytes[o->type], wrong = 0;
  switch (o->coll) {
    case COLL_ALLREDUCE:
      return bench_count_wrong(out, count, o->type, tb->reduced, 0);
    case COLL_REDUCE:
      return rank == o->root ? bench_count_wrong(out, count, o->type, tb->reduced, 0) : 0;
    case COLL_REDUCESCATTER:
      return bench_count_wrong(out, count, o->type, tb->reduced, (size_t)rank * count);
    case COLL_BROADCAST:
      return bench_count_wrong(out, count, o->type, bench_input_of(tb, o, o->root), 0);
    default:
      for (int r = 0; r < o->nranks; r++)
        wrong +=
            bench_count_wrong((const char*)out + (size_t)r * count * es, count, o->type, bench_input_of(tb, o, r), 0);
      return wrong;
  }
}

/* ---- output, in nccl-tests' format ------------------------------------------------------ */

static inline void bench_print_params(const bench_opts* o, const char* prog, const char* ranks_what) {
  printf(
      "# %s %s: nranks %d (%s) minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d "
      "validation: %d median: %d in-place: %d type: %s",
      prog, bench_coll_names[o->coll], o->nranks, ranks_what, o->min_bytes, o->max_bytes, o->factor, o->warmup,
      o->iters, o->check, o->median, o->inplace, bench_type_names[o->type]);
  if (bench_has_op(o->coll)) printf(" op: %s", bench_op_names[o->op]);
  if (bench_has_root(o->coll)) printf(" root: %d", o->root);
  size_t bytes = o->max_bytes < ((size_t)1 << 30) ? o->max_bytes : (size_t)1 << 30; /* two buffers of it */
  double gbps = bench_memcpy_gbps(bytes);
  printf(
      "\n#\n# memcpy bandwidth (1 thread, %zu bytes): %.2f GB/s (bytes copied; STREAM Copy counts read+write: "
      "%.2f)\n",
      bytes, gbps, 2 * gbps);
}

static inline void bench_print_table_header(const bench_opts* o) {
  printf("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       %s\n", "", "", "", "", "",
         o->inplace ? "in-place          " : "");
  printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int k = 0; k < 1 + o->inplace; k++) printf("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  printf("\n# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int k = 0; k < 1 + o->inplace; k++) printf("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  printf("\n");
}

static inline void bench_print_row_start(const bench_opts* o, size_t count) {
  printf("%12zu  %12zu  %8s  %6s  %6d", bench_bytes(o, count), count, bench_type_names[o->type],
         bench_has_op(o->coll) ? bench_op_names[o->op] : "none", bench_has_root(o->coll) ? o->root : -1);
}

/* Prints one time/algbw/busbw/#wrong group; returns busbw (for the average). */
static inline double bench_print_result(const bench_opts* o, size_t count, double sec, size_t wrong) {
  double us = sec * 1e6, algbw = sec > 0 ? (double)bench_bytes(o, count) / 1e9 / sec : 0;
  double busbw = algbw * bench_busbw_factor(o);
  printf(us >= 10000 ? "  %7.0f" : us >= 100 ? "  %7.1f" : "  %7.2f", us);
  printf("  %6.2f  %6.2f", algbw, busbw);
  if (o->check)
    printf("  %6zu", wrong);
  else
    printf("  %6s", "N/A");
  return busbw;
}

static inline void bench_print_footer(size_t wrong, double busbw_sum, int results) {
  printf("# Out of bounds values : %zu %s\n", wrong, wrong ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n#\n", results ? busbw_sum / results : 0.0);
}

#endif /* GCCL_BENCH_COMMON_H */
