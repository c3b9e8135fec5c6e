/* allreduce_app.c — an ordinary MPI program (it links MPI only and knows nothing of
 * gccl) whose MPI_Allreduce calls the interposer's tests check.
 *
 *   allreduce_app --mode dense|compressed|broken [--min-bytes N] [--err-per-rank E] [--repeat N]
 *
 * dense: float and double sums of integer values are exact, in place and out of
 * place, for counts around --min-bytes (GCCL_COMPRESS_MIN_BYTES) and of 1M
 * elements, on MPI_COMM_WORLD, a split communicator (ranks reversed) and a
 * duplicate, which are then freed; a sum of fractions is bit-identical on every
 * rank. compressed: the same calls on fractions in [-1, 1] stay within
 * E * nranks of the exact sum and are bit-identical on every rank. Both: calls the
 * interposer must pass to MPI — other datatypes and ops, user ops, a derived
 * datatype, small counts, an intercommunicator, a communicator that only ever
 * sees such calls — give what PMPI_Allreduce gives, bit for bit, and misuse
 * (count < 0, MPI_COMM_NULL, MPI_SUM on a derived datatype, aliased buffers) gets
 * the error class PMPI_Allreduce gets. (A NULL recvbuf is not tried: Open MPI 4.1
 * does not check it and crashes in PMPI_Allreduce itself.)
 *
 * --repeat N runs the sums on MPI_COMM_WORLD N times: enough calls per size class
 * for the interposer to time both roads and choose (src/mpi_preload/route.h).
 *
 * broken (with a short GCCL_TIMEOUT_MS): rank 1 arrives late at an eligible call
 * on a duplicate with MPI_ERRORS_RETURN; every rank gets MPI_ERR_OTHER with its
 * send buffer intact, later eligible calls on it fail at once, other calls still
 * work, and a fresh duplicate works again.
 *
 * Every rank ends with one line the test script checks against gccl's log:
 *   preload-check: pid P eligible E compressed C comms K
 * E calls should have run through gccl (C of them compressed) and K
 * communicators should have had a gccl communicator made and destroyed. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum mode { MODE_DENSE, MODE_COMPRESSED, MODE_BROKEN };

static struct {
  enum mode mode;
  size_t min_bytes;    /* GCCL_COMPRESS_MIN_BYTES as the test sets it */
  double err_per_rank; /* compressed: allowed |error| per rank of the communicator */
  int repeat;          /* passes of the sums on MPI_COMM_WORLD */
} opt = {MODE_DENSE, 65536, 0.0, 1};

static int world_rank;
static int eligible, compressed, comms_expected;
static int failures;

#define CHECK(cond, ...)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "allreduce_app rank %d: FAIL %s:%d: ", world_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                                           \
      fprintf(stderr, "\n");                                                                  \
      failures++;                                                                             \
    }                                                                                         \
  } while (0)

/* ---- inputs every rank can recompute for every other rank ---------------------------- */

/* Integers in [-100, 100]: sums are exact in float and double, in any order. */
static double int_value(int rank, size_t i, int salt) {
  return (double)((int)((i * 7u + (size_t)rank * 13u + (size_t)salt * 31u) % 201u) - 100);
}

/* Fractions in [-1, 1] with three decimals. */
static double frac_value(int rank, size_t i, int salt) {
  uint32_t h = (uint32_t)i * 2654435761u ^ ((uint32_t)rank * 40503u + (uint32_t)salt * 977u);
  return (double)(h % 2001u) / 1000.0 - 1.0;
}

static size_t type_size(MPI_Datatype dt) {
  return dt == MPI_FLOAT ? sizeof(float) : sizeof(double);
}
static const char* type_name(MPI_Datatype dt) {
  return dt == MPI_FLOAT ? "float" : "double";
}

static void fill(void* buf, MPI_Datatype dt, size_t n, int rank, int salt, int fractions) {
  for (size_t i = 0; i < n; i++) {
    double v = fractions ? frac_value(rank, i, salt) : int_value(rank, i, salt);
    if (dt == MPI_FLOAT)
      ((float*)buf)[i] = (float)v;
    else
      ((double*)buf)[i] = v;
  }
}

static double at(const void* buf, MPI_Datatype dt, size_t i) {
  return dt == MPI_FLOAT ? (double)((const float*)buf)[i] : ((const double*)buf)[i];
}

/* The exact sum over ranks 0..nranks-1 of element i, each input first rounded to dt. */
static double exact_sum(MPI_Datatype dt, int nranks, size_t i, int salt, int fractions) {
  double s = 0;
  for (int r = 0; r < nranks; r++) {
    double v = fractions ? frac_value(r, i, salt) : int_value(r, i, salt);
    s += dt == MPI_FLOAT ? (double)(float)v : v;
  }
  return s;
}

/* What the interposer promises to send through gccl. */
static int goes_through_gccl(int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  int inter = 0;
  MPI_Comm_test_inter(comm, &inter);
  return !inter && op == MPI_SUM && (dt == MPI_FLOAT || dt == MPI_DOUBLE) && count > 0 &&
         (size_t)count * type_size(dt) >= opt.min_bytes;
}

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "allreduce_app: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return p;
}

/* Every rank of comm holds the same bytes as its rank 0. */
static int same_on_every_rank(const void* buf, size_t bytes, MPI_Comm comm) {
  void* root = xmalloc(bytes);
  memcpy(root, buf, bytes);
  MPI_Bcast(root, (int)bytes, MPI_BYTE, 0, comm);
  int same = memcmp(root, buf, bytes) == 0, all = 0;
  free(root);
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, comm);
  return all;
}

/* ---- float and double sums: the calls the interposer takes ---------------------------- */

/* One MPI_Allreduce of count elements of dt on comm, checked: exact (dense, integer
 * inputs), within the bound and bit-identical (compressed), or, for a call that
 * must reach MPI, bit for bit what PMPI_Allreduce gives. */
static void sum_case(MPI_Comm comm, const char* comm_name, MPI_Datatype dt, int count, int in_place, int salt) {
  int rank, nranks;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &nranks);
  size_t n = (size_t)count, bytes = n * type_size(dt);
  int via_gccl = goes_through_gccl(count, dt, MPI_SUM, comm);
  int fractions = opt.mode == MODE_COMPRESSED || !via_gccl;
  void* in = xmalloc(bytes);
  void* out = xmalloc(bytes);
  void* ref = xmalloc(bytes);
  fill(in, dt, n, rank, salt, fractions);
  PMPI_Allreduce(in, ref, count, dt, MPI_SUM, comm); /* what MPI alone gives */
  int rc;
  if (in_place) {
    memcpy(out, in, bytes);
    rc = MPI_Allreduce(MPI_IN_PLACE, out, count, dt, MPI_SUM, comm);
  } else {
    rc = MPI_Allreduce(in, out, count, dt, MPI_SUM, comm);
  }
  const char* how = in_place ? "in place" : "out of place";
  CHECK(rc == MPI_SUCCESS, "%s %d %s %s: MPI_Allreduce returned %d", comm_name, count, type_name(dt), how, rc);
  if (via_gccl) {
    eligible++;
    if (opt.mode == MODE_COMPRESSED) compressed++;
  }

  if (!via_gccl) {
    CHECK(memcmp(out, ref, bytes) == 0, "%s %d %s %s (passed to MPI): differs from PMPI_Allreduce", comm_name, count,
          type_name(dt), how);
  } else if (opt.mode == MODE_DENSE) {
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
      if (at(out, dt, i) != exact_sum(dt, nranks, i, salt, 0)) bad = i;
    CHECK(bad == n, "%s %d %s %s: element %zu is %.9g, the exact sum is %.9g", comm_name, count, type_name(dt), how,
          bad, bad < n ? at(out, dt, bad) : 0.0, bad < n ? exact_sum(dt, nranks, bad, salt, 0) : 0.0);
  } else {
    double bound = opt.err_per_rank * nranks, worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < n; i++) {
      double e = fabs(at(out, dt, i) - exact_sum(dt, nranks, i, salt, 1));
      if (!(e <= worst)) worst = e, worst_i = i; /* NaN counts as worst */
    }
    CHECK(worst <= bound, "%s %d %s %s: |error| %.3g at element %zu exceeds the bound %.3g", comm_name, count,
          type_name(dt), how, worst, worst_i, bound);
  }
  if (via_gccl)
    CHECK(same_on_every_rank(out, bytes, comm), "%s %d %s %s: results differ between ranks", comm_name, count,
          type_name(dt), how);
  free(in);
  free(out);
  free(ref);
}

/* Sums around the threshold and large, both types, in place and not. */
static void sums_on(MPI_Comm comm, const char* comm_name) {
  static const MPI_Datatype types[] = {MPI_FLOAT, MPI_DOUBLE};
  for (int t = 0; t < 2; t++) {
    int first = (int)((opt.min_bytes + type_size(types[t]) - 1) / type_size(types[t])); /* first eligible count */
    int counts[] = {first - 1, first, first + 1, 1 << 20};
    for (int c = 0; c < 4; c++)
      for (int in_place = 0; in_place < 2; in_place++)
        if (counts[c] > 0) sum_case(comm, comm_name, types[t], counts[c], in_place, c * 4 + t * 2 + in_place);
  }
}

/* Dense gccl is not MPI's summation order, but it is the same on every rank. */
static void fractions_identical_on(MPI_Comm comm, const char* comm_name) {
  int rank, nranks, count = 1 << 20;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &nranks);
  float* in = xmalloc((size_t)count * sizeof *in);
  float* out = xmalloc((size_t)count * sizeof *out);
  fill(in, MPI_FLOAT, (size_t)count, rank, 99, 1);
  CHECK(MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, comm) == MPI_SUCCESS, "%s: fractions", comm_name);
  eligible++;
  double worst = 0;
  for (int i = 0; i < count; i++) {
    double e = fabs(out[i] - exact_sum(MPI_FLOAT, nranks, (size_t)i, 99, 1));
    if (!(e <= worst)) worst = e;
  }
  CHECK(worst <= 1e-6 * nranks, "%s: dense sum of fractions off by %.3g", comm_name, worst);
  CHECK(same_on_every_rank(out, (size_t)count * sizeof *out, comm), "%s: dense sums differ between ranks", comm_name);
  free(in);
  free(out);
}

/* ---- calls the interposer must pass to MPI --------------------------------------------- */

static void float_sum_fn(void* in, void* inout, int* len, MPI_Datatype* dt) {
  int per = *dt == MPI_FLOAT ? 1 : 4; /* the derived type below is 4 floats */
  for (int i = 0; i < *len * per; i++) ((float*)inout)[i] += ((const float*)in)[i];
}

/* One call that must reach MPI unchanged: compare with PMPI_Allreduce bit for bit. */
static void passthrough_case(MPI_Comm comm, const char* what, MPI_Datatype dt, size_t elem_bytes, int count, MPI_Op op,
                             int in_place) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  size_t bytes = (size_t)count * elem_bytes;
  unsigned char* in = xmalloc(bytes);
  unsigned char* out = xmalloc(bytes);
  unsigned char* ref = xmalloc(bytes);
  /* Bytes that make finite floats and doubles and modest integers. */
  for (size_t i = 0; i < bytes; i++)
    in[i] = (unsigned char)((i % 4 == 3 || i % 8 == 7) ? 0x3f : (i * 31 + (size_t)rank * 7));
  PMPI_Allreduce(in, ref, count, dt, op, comm);
  int rc;
  if (in_place) {
    memcpy(out, in, bytes);
    rc = MPI_Allreduce(MPI_IN_PLACE, out, count, dt, op, comm);
  } else {
    rc = MPI_Allreduce(in, out, count, dt, op, comm);
  }
  CHECK(rc == MPI_SUCCESS, "%s: MPI_Allreduce returned %d", what, rc);
  CHECK(memcmp(out, ref, bytes) == 0, "%s: differs from PMPI_Allreduce", what);
  free(in);
  free(out);
  free(ref);
}

static void passthrough_calls_on(MPI_Comm comm) {
  int big = 1 << 20, small = (int)(opt.min_bytes / sizeof(float)) - 1;
  passthrough_case(comm, "MPI_INT sum", MPI_INT, sizeof(int), big, MPI_SUM, 0);
  passthrough_case(comm, "MPI_LONG sum in place", MPI_LONG, sizeof(long), big / 2, MPI_SUM, 1);
  passthrough_case(comm, "MPI_FLOAT max", MPI_FLOAT, sizeof(float), big, MPI_MAX, 0);
  passthrough_case(comm, "MPI_DOUBLE min in place", MPI_DOUBLE, sizeof(double), big, MPI_MIN, 1);
  passthrough_case(comm, "MPI_FLOAT prod", MPI_FLOAT, sizeof(float), 1000, MPI_PROD, 0);
  passthrough_case(comm, "MPI_FLOAT sum of 1", MPI_FLOAT, sizeof(float), 1, MPI_SUM, 0);
  if (small > 0)
    passthrough_case(comm, "MPI_FLOAT sum below the threshold", MPI_FLOAT, sizeof(float), small, MPI_SUM, 1);

  MPI_Op user_sum;
  MPI_Op_create(float_sum_fn, 1, &user_sum);
  passthrough_case(comm, "MPI_FLOAT user-defined sum", MPI_FLOAT, sizeof(float), big, user_sum, 0);
  MPI_Datatype vec4;
  MPI_Type_contiguous(4, MPI_FLOAT, &vec4);
  MPI_Type_commit(&vec4);
  passthrough_case(comm, "derived datatype (4 floats), user-defined sum", vec4, 4 * sizeof(float), big / 4, user_sum,
                   0);
  MPI_Type_free(&vec4);
  MPI_Op_free(&user_sum);
}

/* Misuse gets the error class MPI gives it. Errors return for the duration. */
static void misuse_gets_mpi_errors(void) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  int count = (int)(opt.min_bytes / sizeof(float)) + 1;
  float* a = xmalloc((size_t)count * sizeof *a);
  float* b = xmalloc((size_t)count * sizeof *b);
  memset(a, 0, (size_t)count * sizeof *a);
  MPI_Datatype vec4;
  MPI_Type_contiguous(4, MPI_FLOAT, &vec4);
  MPI_Type_commit(&vec4);
  struct {
    const char* what;
    const void* send;
    void* recv;
    int count;
    MPI_Datatype dt;
    MPI_Comm comm;
  } cases[] = {
      {"count -1", a, b, -1, MPI_FLOAT, MPI_COMM_WORLD},
      {"MPI_COMM_NULL", a, b, count, MPI_FLOAT, MPI_COMM_NULL},
      {"MPI_SUM on a derived datatype", a, b, count / 4, vec4, MPI_COMM_WORLD},
      {"sendbuf == recvbuf without MPI_IN_PLACE", a, a, count, MPI_FLOAT, MPI_COMM_WORLD},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int want = PMPI_Allreduce(cases[i].send, cases[i].recv, cases[i].count, cases[i].dt, MPI_SUM, cases[i].comm);
    int got = MPI_Allreduce(cases[i].send, cases[i].recv, cases[i].count, cases[i].dt, MPI_SUM, cases[i].comm);
    int want_class = want, got_class = got;
    if (want != MPI_SUCCESS) MPI_Error_class(want, &want_class);
    if (got != MPI_SUCCESS) MPI_Error_class(got, &got_class);
    CHECK(want_class == got_class, "%s: MPI_Allreduce gave error class %d, PMPI_Allreduce %d", cases[i].what, got_class,
          want_class);
  }
  MPI_Type_free(&vec4);
  free(a);
  free(b);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
}

/* An intercommunicator's allreduce sums the other group's inputs; MPI does it. */
static void intercommunicator(void) {
  int nranks;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks < 2) return;
  int low = world_rank < nranks / 2;
  MPI_Comm local, inter;
  MPI_Comm_split(MPI_COMM_WORLD, low, world_rank, &local);
  MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, low ? nranks / 2 : 0, 7, &inter);
  int lrank, remote;
  MPI_Comm_rank(local, &lrank);
  MPI_Comm_remote_size(inter, &remote);
  int count = 1 << 18;
  float* in = xmalloc((size_t)count * sizeof *in);
  float* out = xmalloc((size_t)count * sizeof *out);
  fill(in, MPI_FLOAT, (size_t)count, lrank, 5, 0);
  CHECK(MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, inter) == MPI_SUCCESS, "intercommunicator allreduce");
  size_t bad = (size_t)count;
  for (size_t i = 0; i < (size_t)count && bad == (size_t)count; i++)
    if (out[i] != exact_sum(MPI_FLOAT, remote, i, 5, 0)) bad = i;
  CHECK(bad == (size_t)count, "intercommunicator: element %zu is %g", bad, bad < (size_t)count ? out[bad] : 0.0f);
  free(in);
  free(out);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&local);
}

/* ---- broken: a late rank, a timeout, the sticky error ----------------------------------- */

static void broken_communicator(void) {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  int rank, nranks, count = 1 << 18;
  MPI_Comm_rank(c, &rank);
  MPI_Comm_size(c, &nranks);
  float* in = xmalloc((size_t)count * sizeof *in);
  float* keep = xmalloc((size_t)count * sizeof *keep);
  float* out = xmalloc((size_t)count * sizeof *out);
  fill(in, MPI_FLOAT, (size_t)count, rank, 1, 0);
  memcpy(keep, in, (size_t)count * sizeof *in);

  /* Works first: the gccl communicator exists before the failure. */
  CHECK(MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, c) == MPI_SUCCESS, "broken: the first call");
  CHECK(out[3] == exact_sum(MPI_FLOAT, nranks, 3, 1, 0), "broken: the first call's sum");
  eligible++;
  comms_expected++;

  /* Rank 1 comes later than GCCL_TIMEOUT_MS: every rank's call fails. */
  if (rank == 1) sleep(2);
  int rc = MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, c), cls = rc;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_OTHER, "broken: the late call returned %d (class %d), not MPI_ERR_OTHER", rc, cls);
  CHECK(memcmp(in, keep, (size_t)count * sizeof *in) == 0, "broken: the failed call changed sendbuf");

  /* Sticky: no communication, the same error on every rank. */
  rc = MPI_Allreduce(MPI_IN_PLACE, out, count, MPI_FLOAT, MPI_SUM, c);
  cls = rc;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_OTHER, "broken: a later eligible call returned %d (class %d)", rc, cls);

  /* Other calls still reach MPI; then the application moves to a fresh duplicate. */
  int one = 1, total = 0;
  CHECK(MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, c) == MPI_SUCCESS && total == nranks,
        "broken: an int sum on the broken communicator");
  MPI_Comm_free(&c);
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  CHECK(MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, c) == MPI_SUCCESS, "broken: a fresh duplicate");
  CHECK(out[3] == exact_sum(MPI_FLOAT, nranks, 3, 1, 0), "broken: a fresh duplicate's sum");
  eligible++;
  comms_expected++;
  MPI_Comm_free(&c);
  free(in);
  free(keep);
  free(out);
}

/* ---- main ------------------------------------------------------------------------------ */

static void parse_args(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
      const char* m = argv[++i];
      opt.mode = !strcmp(m, "compressed") ? MODE_COMPRESSED : !strcmp(m, "broken") ? MODE_BROKEN : MODE_DENSE;
    } else if (!strcmp(argv[i], "--min-bytes") && i + 1 < argc) {
      opt.min_bytes = (size_t)strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--err-per-rank") && i + 1 < argc) {
      opt.err_per_rank = strtod(argv[++i], NULL);
    } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
      opt.repeat = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s --mode dense|compressed|broken [--min-bytes N] [--err-per-rank E] [--repeat N]\n",
              argv[0]);
      exit(2);
    }
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  parse_args(argc, argv);
  int nranks;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  if (opt.mode == MODE_BROKEN) {
    broken_communicator();
  } else {
    for (int pass = 0; pass < opt.repeat; pass++) sums_on(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    comms_expected++;
    if (opt.mode == MODE_DENSE) fractions_identical_on(MPI_COMM_WORLD, "MPI_COMM_WORLD");

    /* Pairs of ranks, each pair reversed: gccl ranks are not world ranks. */
    MPI_Comm split;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank / 2, nranks - world_rank, &split);
    sums_on(split, "split");
    comms_expected++;

    /* A duplicate of a communicator that has a gccl communicator gets its own. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    sums_on(dup, "dup");
    comms_expected++;
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);

    /* A communicator that never sees an eligible call never gets one. */
    MPI_Comm quiet;
    MPI_Comm_dup(MPI_COMM_WORLD, &quiet);
    passthrough_calls_on(quiet);
    MPI_Comm_free(&quiet);

    passthrough_calls_on(MPI_COMM_WORLD);
    intercommunicator();
    misuse_gets_mpi_errors();
  }

  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("preload-check: pid %d eligible %d compressed %d comms %d\n", (int)getpid(), eligible, compressed,
         comms_expected);
  fflush(stdout);
  MPI_Finalize();
  if (world_rank == 0)
    printf("allreduce_app: %s (%d failed checks on all ranks)\n", all_failures ? "FAIL" : "OK", all_failures);
  return all_failures ? 1 : 0;
}
