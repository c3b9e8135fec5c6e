/* codec-bench.c — one-thread speed of every codec's encode and decode_accumulate
 * against a memcpy of the same buffer, with frame size and break-even link rate.
 *
 *   codec-bench [-s SPEC]... [-n COUNT[,COUNT...]] [-r RUNS] [-w WARMUP] [--input FILE] [--check]
 *
 * For each spec and count n: a compressor for n fp32 elements, buffers allocated
 * and touched, then WARMUP rounds and RUNS timed rounds of
 *   memcpy(4n bytes), gcclEncode(input), gcclDecodeAccumulate(frame into fp32),
 * in that order, so that the memcpy each codec time is compared with ran in the
 * same round on the same (noisy, shared) machine. The table prints medians over
 * the rounds; the codec/memcpy columns are medians of the per-round ratios.
 *
 * Input: n random-normal floats from Box-Muller over a fixed-seed generator, or
 * the first n floats of a raw little-endian float32 file (--input), so Python can
 * time its peers on identical data (bench/topk_peers.py, bench/codec-compare.sh).
 * With error feedback on, every encode adds the residual of the previous one, as
 * in training.
 *
 * Break-even: sending 4n raw bytes over a link of L bytes/s takes 4n/L; sending
 * the frame takes t_enc + t_dec + 4n/(ratio L). Compression wins when
 * L < C (1 - 1/ratio), with C = 4n / (t_enc + t_dec) = 1/(1/enc + 1/dec)
 * (DESIGN.md, "Performance model"); printed in Gbit/s.
 *
 * --check first encodes once with a fresh compressor and decodes into zeros:
 * every value must be finite, and "none" must give back the input exactly; the
 * frame must fit gcclEncodeBound. The exit code is nonzero if any check fails or
 * any spec cannot be run.
 *
 * Each (spec, count) runs in a child process, so a codec that crashes fails its
 * own row and not the whole table. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "gccl.h"

/* The codecs and settings BENCHMARKS.md reports. */
static const char* const default_specs[] = {
    "none",
    "fp16",
    "bf16",
    "uniform:bits=8,round=nearest",
    "uniform:bits=4,round=nearest",
    "uniform:bits=8",
    "uniform:bits=4",
    "qsgd:bits=4",
    "sign:ef=0",
    "sign",
    "terngrad",
    "topk:ratio=0.01,ef=0",
    "topk:ratio=0.01,approx=1,ef=0",
    "topk:ratio=0.01",
    "topk:ratio=0.01,ef=0,zstd=1",
    "randk:ratio=0.01",
};
#define N_DEFAULT_SPECS (sizeof default_specs / sizeof default_specs[0])

/* ResNet-50's gradient (25,557,032 parameters), and 4 MiB of floats, which stays
 * in the last-level cache. */
static const size_t default_counts[] = {25557032, 1048576};

#define MAX_SPECS 64
#define MAX_COUNTS 16
#define MAX_RUNS 1000

/* Frame header fields the table reads (src/compress/frame.h): byte 7 flags,
 * byte 33 the sparse codecs' value type, bytes 40..47 k (nonzero only for
 * topk and randk). */
#define HDR_FLAGS 7
#define HDR_VALUES 33
#define HDR_K 40
#define HDR_BYTES 64
#define HDR_FLAG_RAW 0x02u

typedef struct {
  const char* specs[MAX_SPECS];
  int nspecs;
  size_t counts[MAX_COUNTS];
  int ncounts;
  int runs, warmup, check;
  const char* input;
} cb_opts;

/* Medians of one (spec, count). */
typedef struct {
  double enc_s, dec_s, cpy_s; /* seconds per call */
  double enc_rel, dec_rel;    /* memcpy time / codec time, same round */
  size_t frame_bytes;
  double idx_bytes_per_k; /* < 0: not a sparse frame */
} cb_result;

static void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [options]\n"
          "  -s SPEC       a codec spec (repeat, or several separated by spaces or ';');\n"
          "                default: the %zu specs BENCHMARKS.md reports\n"
          "  -n COUNTS     element counts, comma-separated, K/M/G = 1024 powers\n"
          "                (default 25557032,1048576; with --input: the file's length)\n"
          "  -r RUNS       timed rounds, median reported (default 11)\n"
          "  -w WARMUP     untimed rounds first (default 2)\n"
          "  --input FILE  raw float32 input instead of the Box-Muller data\n"
          "  --check       also check one decode per spec; nonzero exit on failure\n",
          prog, N_DEFAULT_SPECS);
}

/* Splits a -s argument on spaces and ';' into o->specs (the strings stay alive
 * for the whole run). Returns 0, or -1 when there are too many. */
static int add_specs(cb_opts* o, char* arg) {
  char* save = NULL;
  for (char* t = strtok_r(arg, " \t;", &save); t; t = strtok_r(NULL, " \t;", &save)) {
    if (o->nspecs == MAX_SPECS) return -1;
    o->specs[o->nspecs++] = t;
  }
  return 0;
}

static int add_counts(cb_opts* o, char* arg) {
  char* save = NULL;
  for (char* t = strtok_r(arg, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    size_t n = bench_parse_size(t);
    if (n == 0 || n > SIZE_MAX / 8 || o->ncounts == MAX_COUNTS) return -1;
    o->counts[o->ncounts++] = n;
  }
  return 0;
}

static int parse_args(int argc, char** argv, cb_opts* o) {
  *o = (cb_opts){.runs = 11, .warmup = 2};
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (strcmp(a, "--check") == 0) {
      o->check = 1;
      continue;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(argv[0]);
      exit(0);
    }
    int ok = i + 1 < argc;
    char* v = ok ? argv[++i] : NULL;
    if (!ok)
      ;
    else if (strcmp(a, "-s") == 0)
      ok = !add_specs(o, v);
    else if (strcmp(a, "-n") == 0)
      ok = !add_counts(o, v);
    else if (strcmp(a, "-r") == 0)
      ok = !bench_parse_int(v, 1, MAX_RUNS, &o->runs);
    else if (strcmp(a, "-w") == 0)
      ok = !bench_parse_int(v, 0, MAX_RUNS, &o->warmup);
    else if (strcmp(a, "--input") == 0)
      o->input = v;
    else
      ok = 0;
    if (!ok) {
      fprintf(stderr, "%s: bad argument: %s\n", argv[0], a);
      usage(argv[0]);
      return -1;
    }
  }
  if (o->nspecs == 0)
    for (size_t i = 0; i < N_DEFAULT_SPECS; i++) o->specs[o->nspecs++] = default_specs[i];
  if (o->ncounts == 0 && !o->input)
    for (size_t i = 0; i < sizeof default_counts / sizeof default_counts[0]; i++)
      o->counts[o->ncounts++] = default_counts[i];
  return 0;
}

/* ---- input data -------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* x[0, n) ~ N(0, 1): Box-Muller on 53-bit uniforms, u1 in (0, 1] so log(u1) is finite. */
static void fill_normal(float* x, size_t n, uint64_t seed) {
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = (double)((splitmix64(&seed) >> 11) + 1) * 0x1p-53;
    double u2 = (double)(splitmix64(&seed) >> 11) * 0x1p-53;
    double r = sqrt(-2.0 * log(u1));
    x[i] = (float)(r * cos(two_pi * u2));
    if (i + 1 < n) x[i + 1] = (float)(r * sin(two_pi * u2));
  }
}

/* Reads the whole raw float32 file into a new buffer; *n = its elements. Exits on error. */
static float* read_input(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  if (!f || fseek(f, 0, SEEK_END) != 0) {
    fprintf(stderr, "codec-bench: cannot open %s: %s\n", path, strerror(errno));
    exit(2);
  }
  long bytes = ftell(f);
  if (bytes <= 0 || bytes % 4 != 0) {
    fprintf(stderr, "codec-bench: %s: %ld bytes is not a non-empty float32 array\n", path, bytes);
    exit(2);
  }
  *n = (size_t)bytes / 4;
  float* x = bench_alloc((size_t)bytes);
  rewind(f);
  if (fread(x, 4, *n, f) != *n) {
    fprintf(stderr, "codec-bench: short read from %s\n", path);
    exit(2);
  }
  fclose(f);
  return x;
}

/* ---- one (spec, count) --------------------------------------------------------------- */

static uint64_t get_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Index bytes per kept element of a topk/randk frame: what the frame holds
 * beyond its header and k values, per value. -1 for dense and raw frames. */
static double index_bytes_per_k(const unsigned char* frame, size_t frame_bytes) {
  uint64_t k = get_le64(frame + HDR_K);
  if (k == 0 || (frame[HDR_FLAGS] & HDR_FLAG_RAW)) return -1;
  double value_bytes = frame[HDR_VALUES] == 0 ? 4 : 2;
  return ((double)frame_bytes - HDR_BYTES - (double)k * value_bytes) / (double)k;
}

static int fail_gccl(const char* spec, size_t n, const char* what, gcclResult_t r) {
  printf("%-30s %10zu  FAILED: %s: %s: %s\n", spec, n, what, gcclGetErrorString(r), gcclGetLastError(NULL));
  return 1;
}

/* One encode by a fresh compressor, decoded into zeros: values finite, "none"
 * exact, frame within the bound. Returns the number of problems (printed). */
static int check_spec(const char* spec, const float* x, size_t n, gcclCompressor_t c, unsigned char* frame,
                      size_t cap, float* dst) {
  size_t fb = 0;
  gcclResult_t r = gcclEncode(c, x, frame, cap, &fb);
  if (r != gcclSuccess) return fail_gccl(spec, n, "check: gcclEncode", r);
  memset(dst, 0, n * sizeof(float));
  r = gcclDecodeAccumulate(frame, fb, dst, n, gcclFloat32);
  if (r != gcclSuccess) return fail_gccl(spec, n, "check: gcclDecodeAccumulate", r);
  size_t nonfinite = 0, inexact = 0;
  int exact = strcmp(spec, "none") == 0;
  for (size_t i = 0; i < n; i++) {
    nonfinite += !isfinite(dst[i]);
    inexact += exact && dst[i] != x[i];
  }
  int bad = fb > cap || nonfinite || inexact;
  if (bad)
    printf("%-30s %10zu  CHECK FAILED: frame %zu bytes (bound %zu), %zu non-finite, %zu not exact\n", spec, n, fb, cap,
           nonfinite, inexact);
  return bad;
}

/* Times one spec at n elements of x and prints its row. Returns 0, or 1 on failure. */
static int bench_spec(const cb_opts* o, const char* spec, const float* x, size_t n) {
  gcclCompressor_t c;
  gcclResult_t r = gcclCompressorCreate(&c, spec, n, gcclFloat32);
  if (r != gcclSuccess) {
    if (strstr(spec, "zstd=1") && strstr(gcclGetLastError(NULL), "without")) {
      printf("%-30s %10zu  skipped: gccl was built without zstd\n", spec, n);
      return 0;
    }
    return fail_gccl(spec, n, "gcclCompressorCreate", r);
  }
  size_t cap = 0, bytes = n * sizeof(float);
  if ((r = gcclEncodeBound(c, &cap)) != gcclSuccess) return fail_gccl(spec, n, "gcclEncodeBound", r);
  unsigned char* frame = bench_alloc(cap);
  float* dst = bench_alloc(bytes);
  float* cpy = bench_alloc(bytes);
  memset(frame, 0, cap); /* touch every page before anything is timed */
  memset(dst, 0, bytes);
  memset(cpy, 0, bytes);
  if (o->check && check_spec(spec, x, n, c, frame, cap, dst)) return 1;

  double enc[MAX_RUNS], dec[MAX_RUNS], cp[MAX_RUNS], enc_rel[MAX_RUNS], dec_rel[MAX_RUNS];
  size_t fb = 0;
  for (int i = -o->warmup; i < o->runs; i++) {
    double t0 = bench_now();
    memcpy(cpy, x, bytes);
    double t1 = bench_now();
    if ((r = gcclEncode(c, x, frame, cap, &fb)) != gcclSuccess) return fail_gccl(spec, n, "gcclEncode", r);
    double t2 = bench_now();
    if ((r = gcclDecodeAccumulate(frame, fb, dst, n, gcclFloat32)) != gcclSuccess)
      return fail_gccl(spec, n, "gcclDecodeAccumulate", r);
    double t3 = bench_now();
    if (i < 0) continue;
    cp[i] = t1 - t0;
    enc[i] = t2 - t1;
    dec[i] = t3 - t2;
    enc_rel[i] = cp[i] / enc[i];
    dec_rel[i] = cp[i] / dec[i];
  }
  volatile float sink = cpy[n / 2] + dst[n / 3]; /* keep the copy and the sums observable */
  (void)sink;

  cb_result res = {.enc_s = bench_median(enc, o->runs),
                   .dec_s = bench_median(dec, o->runs),
                   .cpy_s = bench_median(cp, o->runs),
                   .enc_rel = bench_median(enc_rel, o->runs),
                   .dec_rel = bench_median(dec_rel, o->runs),
                   .frame_bytes = fb,
                   .idx_bytes_per_k = index_bytes_per_k(frame, fb)};
  double gb = (double)bytes / 1e9, ratio = (double)bytes / (double)fb;
  printf("%-30s %10zu %8.3f %8.2f %6.2f %8.3f %8.2f %6.2f %8.2f %11zu %8.2f", spec, n, res.enc_s * 1e3,
         gb / res.enc_s, res.enc_rel, res.dec_s * 1e3, gb / res.dec_s, res.dec_rel, gb / res.cpy_s, fb, ratio);
  if (res.idx_bytes_per_k >= 0)
    printf(" %7.2f", res.idx_bytes_per_k);
  else
    printf(" %7s", "-");
  /* C in bytes of input per second, times 8 / 1e9 for Gbit/s. */
  double combined = (double)bytes / (res.enc_s + res.dec_s);
  if (ratio > 1)
    printf(" %9.2f\n", combined * (1 - 1 / ratio) * 8 / 1e9);
  else
    printf(" %9s\n", "-");

  gcclCompressorDestroy(c);
  free(frame);
  free(dst);
  free(cpy);
  return 0;
}

/* Runs bench_spec in a child so a crashing codec fails one row. Returns 0 or 1. */
static int run_isolated(const cb_opts* o, const char* spec, const float* x, size_t n) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    perror("codec-bench: fork");
    return 1;
  }
  if (pid == 0) {
    int bad = bench_spec(o, spec, x, n);
    fflush(stdout);
    _exit(bad);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0) {
    perror("codec-bench: waitpid");
    return 1;
  }
  if (WIFSIGNALED(status)) {
    printf("%-30s %10zu  CRASHED: signal %d\n", spec, n, WTERMSIG(status));
    return 1;
  }
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

int main(int argc, char** argv) {
  cb_opts o;
  if (parse_args(argc, argv, &o) != 0) return 2;

  size_t have = 0, need = 0;
  float* x = NULL;
  if (o.input) {
    x = read_input(o.input, &have);
    if (o.ncounts == 0) o.counts[o.ncounts++] = have;
  }
  for (int i = 0; i < o.ncounts; i++)
    if (o.counts[i] > need) need = o.counts[i];
  if (o.input) {
    if (need > have) {
      fprintf(stderr, "codec-bench: -n %zu but %s holds %zu floats\n", need, o.input, have);
      return 2;
    }
  } else {
    x = bench_alloc(need * sizeof(float));
    fill_normal(x, need, 1);
  }

  int version = 0;
  gcclGetVersion(&version);
  printf("# codec-bench, gccl %d.%d.%d: one thread; input %s; %d warm-up + %d timed rounds, medians%s\n",
         version / 10000, version / 100 % 100, version % 100, o.input ? o.input : "N(0,1) Box-Muller seed 1",
         o.warmup, o.runs, o.check ? "; --check" : "");
  printf(
      "# enc GB/s: 4n input bytes / encode time; dec GB/s: 4n output bytes / decode_accumulate time (fp32);\n"
      "# x_cpy: memcpy time / codec time in the same round (1 = memcpy speed); cpy GB/s: that memcpy;\n"
      "# ratio: 4n / frame bytes; idxB/k: (frame - 64 - k * value bytes) / k for topk and randk;\n"
      "# breakeven: link rate below which sending the frame wins, C (1 - 1/ratio), C = 4n / (t_enc + t_dec)\n");
  printf("#%-29s %10s %8s %8s %6s %8s %8s %6s %8s %11s %8s %7s %9s\n", "spec", "n", "enc_ms", "enc_GB/s", "x_cpy",
         "dec_ms", "dec_GB/s", "x_cpy", "cpy_GB/s", "frame_B", "ratio", "idxB/k", "brk_Gb/s");
  int failed = 0;
  for (int ci = 0; ci < o.ncounts; ci++)
    for (int si = 0; si < o.nspecs; si++) failed += run_isolated(&o, o.specs[si], x, o.counts[ci]);
  printf("# %d of %d rows failed\n", failed, o.ncounts * o.nspecs);
  free(x);
  return failed ? 1 : 0;
}
