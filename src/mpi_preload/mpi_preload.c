/* mpi_preload.c — libgccl-mpi-preload.so: an unmodified MPI program's large float
 * sums run through gccl, by LD_PRELOAD and MPI's profiling interface (PMPI).
 *
 *   mpirun -x LD_PRELOAD=/usr/local/lib/libgccl-mpi-preload.so \
 *          -x GCCL_COMPRESS=uniform:bits=8 ./trainer
 *
 * What goes through gccl. MPI_Allreduce of MPI_FLOAT or MPI_DOUBLE with MPI_SUM,
 * of at least GCCL_COMPRESS_MIN_BYTES bytes (65536 when unset: the drop-in's
 * variable and default, so every call that reaches gccl is one the drop-in
 * considers), on an intracommunicator, in host memory, runs as gcclAllReduce on a
 * gccl communicator of that MPI communicator; GCCL_COMPRESS therefore decides
 * whether it is compressed (unset or `none`: gccl's dense algorithms).
 * MPI_IN_PLACE is honoured. With GCCL_COMPRESS unset, none or auto:, each size
 * class first times gccl's road against PMPI_Allreduce and keeps gccl's only
 * where it was faster (route.h): the interposer never makes a program slower by
 * choice. Every other call goes to PMPI_Allreduce untouched:
 * other datatypes (derived ones included), other or user-defined ops, smaller
 * counts, count <= 0, MPI_COMM_NULL, intercommunicators, NULL or overlapping
 * buffers, calls before MPI_Init or from MPI_Finalize on — so MPI computes them,
 * or reports its own error. Every rank takes the same road: by MPI's rules all
 * pass the same count, datatype and op (and, as the drop-in requires, every rank
 * must see the same GCCL_* environment). Only the C binding is interposed (Open
 * MPI's Fortran bindings call PMPI_Allreduce themselves), and device pointers of
 * a CUDA-aware MPI are not recognised: do not preload into such a program.
 *
 * Cost of a call passed through: the op, datatype and byte count are compared
 * before any MPI call or attribute lookup. tests/mpi_preload/preload_overhead.sh
 * (10^6 calls of 1 float, best of 3) measured +1.5 to +5.5 ns per call on one
 * rank (18 ns without the library), and +6 ns on two ranks (241 ns without),
 * within the noise of a machine shared with other jobs.
 *
 * Communicators. An MPI communicator's gccl communicator is made on its first
 * eligible call (gcclCommInitMpi: collective, and every rank reaches it on the
 * same call) and cached on it as an attribute. The keyval's copy callback is
 * MPI_COMM_NULL_COPY_FN, so MPI_Comm_dup's result makes its own on its first
 * eligible call; the delete callback destroys it when the communicator is freed.
 * MPI_Finalize is interposed too: Open MPI 4.1 deletes MPI_COMM_WORLD's attributes
 * only after MPI is finalised (MPI_Finalized already says 1 in the callback:
 * measured), too late for gcclCommDestroy's MPI calls, so every gccl
 * communicator still alive is destroyed first, newest first, then PMPI_Finalize.
 *
 * Waiting. MPI waits for a late peer for ever; gccl gives up after
 * GCCL_TIMEOUT_MS (default 300 s). A rank that writes a checkpoint for ten
 * minutes while its peers wait in an allreduce is a correct MPI program, so when
 * GCCL_TIMEOUT_MS is unset the library sets it to 0 (wait for ever) at load time.
 *
 * Failures: never a silently wrong result, and the input kept wherever gccl's
 * contract keeps it.
 *  - gcclCommInitMpi fails on any rank: the ranks agree on that (a one-int
 *    PMPI_Allreduce), each reports it once on stderr, the communicator is marked
 *    "not gccl", and this call and every later one on it go to PMPI_Allreduce:
 *    nothing was touched.
 *  - gcclAllReduce refuses the call with gcclInvalidUsage and its communicator
 *    healthy: gccl's agreement step found the ranks' calls differ (for example
 *    different GCCL_COMPRESS settings), a verdict every rank reaches alike before
 *    any data moves. Reported once; the call and every later one on the
 *    communicator go to PMPI_Allreduce (the gccl communicator is destroyed).
 *  - Any other failure (the run started and broke: a peer failed, a timeout, an
 *    MPI error; or a local failure such as out of memory, which leaves the peers
 *    waiting): recvbuf — with MPI_IN_PLACE the data itself — may be partly
 *    reduced, and peers may have finished the call or failed in it, so no rank
 *    can redo it alone: a rank that fell back to PMPI_Allreduce while a peer did
 *    not would pair its calls wrongly. The gccl communicator is aborted (peers
 *    still waiting in it fail at once instead of hanging), the failure is reported
 *    once, and the call returns MPI_ERR_OTHER through the communicator's error
 *    handler — fatal by default, as a failed network would be. So does every later
 *    eligible call on that communicator (a sticky error, like a broken NCCL
 *    communicator); other calls still reach MPI. An out-of-place sendbuf is
 *    untouched, so a program with MPI_ERRORS_RETURN can redo the call on a
 *    duplicate (MPI_Comm_dup), which gets a fresh gccl communicator.
 *
 * Threads: the application's own thread runs gccl (a NULL stream), at any MPI
 * thread level. Creating the keyval is guarded by pthread_once and the list of
 * live communicators by a mutex; everything else belongs to one communicator,
 * which MPI lets only one thread at a time use for a collective. A thread-local
 * flag sends MPI_Allreduce calls made from inside gccl straight to PMPI. */
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gccl.h"
#include "gccl_mpi.h"
#include "route.h"

#define PRELOAD_EXPORT __attribute__((visibility("default")))

/* The drop-in's default for GCCL_COMPRESS_MIN_BYTES (src/core/dropin.h). */
#define PRELOAD_MIN_BYTES_DEFAULT ((size_t)64 << 10)

/* ---- configuration, read once at load time ---------------------------------------- */

static size_t min_bytes = PRELOAD_MIN_BYTES_DEFAULT;
static int log_info; /* GCCL_DEBUG is INFO or TRACE and GCCL_DEBUG_SUBSYS selects INIT */

/* Parsed as gccl parses it (src/common/env.c): a non-negative decimal integer, or
 * the default, so the interposer and the drop-in draw the same line. */
static size_t read_min_bytes(void) {
  const char* v = getenv("GCCL_COMPRESS_MIN_BYTES");
  if (!v || !*v) return PRELOAD_MIN_BYTES_DEFAULT;
  char* end;
  long long x = strtoll(v, &end, 10);
  return (*end || x < 0) ? PRELOAD_MIN_BYTES_DEFAULT : (size_t)x;
}

/* GCCL_DEBUG_SUBSYS as gccl reads it: a comma list, "^" in front inverts it. */
static int subsys_selects_init(const char* list) {
  if (!list || !*list) return 1;
  int invert = list[0] == '^';
  const char* s = list + invert;
  int named = 0;
  while (*s) {
    size_t len = strcspn(s, ",");
    if ((len == 4 && !strncasecmp(s, "INIT", 4)) || (len == 3 && !strncasecmp(s, "ALL", 3))) named = 1;
    s += len + (s[len] == ',');
  }
  return invert ? !named : named;
}

__attribute__((constructor)) static void preload_load(void) {
  min_bytes = read_min_bytes();
  const char* level = getenv("GCCL_DEBUG");
  log_info = level && (!strcasecmp(level, "INFO") || !strcasecmp(level, "TRACE")) &&
             subsys_selects_init(getenv("GCCL_DEBUG_SUBSYS"));
  /* Before main: no other thread reads the environment yet. */
  setenv("GCCL_TIMEOUT_MS", "0", 0);
}

/* ---- reports ----------------------------------------------------------------------- */

/* One line on stderr, in gccl's log format so that one grep finds both. */
static void report(const char* level, int rank, const char* fmt, ...) {
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  char line[1024];
  int n = snprintf(line, sizeof line, "%s:%d:%d [%d] GCCL %s mpi-preload: ", host, (int)getpid(), (int)gettid(), rank,
                   level);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", line);
}

#define PRELOAD_INFO(rank, ...)                      \
  do {                                               \
    if (log_info) report("INFO", rank, __VA_ARGS__); \
  } while (0)
/* Failures are printed whatever GCCL_DEBUG says: a fallback must not go unnoticed. */
#define PRELOAD_WARN(rank, ...) report("WARN", rank, __VA_ARGS__)

/* ---- the state cached on an MPI communicator ---------------------------------------- */

enum preload_state {
  PRELOAD_GCCL,    /* eligible calls run through gccl */
  PRELOAD_RETIRED, /* gccl refused a call on every rank: eligible calls go to PMPI */
  PRELOAD_BROKEN,  /* a gccl call failed: eligible calls return MPI_ERR_OTHER */
};

struct preload_comm {
  MPI_Comm mpi;    /* the application's communicator, which holds the attribute */
  gcclComm_t gccl; /* NULL once destroyed or aborted */
  enum preload_state state;
  int rank;                 /* in mpi, for reports */
  int listed;               /* on the live list */
  struct route_table route; /* gccl's road or MPI's, per size class (route.h) */
  struct preload_comm *prev, *next;
};

/* The attribute of a communicator gccl does not serve (an intercommunicator, or
 * creation failed): its calls go to PMPI_Allreduce. */
static char not_gccl;

static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;
static int keyval = MPI_KEYVAL_INVALID; /* written once, under keyval_once */
static atomic_int keyval_made;
static atomic_int finalizing; /* MPI_Finalize has begun: everything goes to PMPI */
/* Thread-local: this thread is inside gccl, whose own MPI calls must reach MPI. */
static _Thread_local int in_gccl;

/* Communicators whose gccl state is still attached, newest first: what
 * MPI_Finalize must tear down before MPI goes. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct preload_comm* live;

static void live_push(struct preload_comm* pc) {
  pthread_mutex_lock(&live_mu);
  pc->prev = NULL;
  pc->next = live;
  if (live) live->prev = pc;
  live = pc;
  pc->listed = 1;
  pthread_mutex_unlock(&live_mu);
}

static void live_remove(struct preload_comm* pc) {
  pthread_mutex_lock(&live_mu);
  if (pc->listed) {
    if (pc->prev)
      pc->prev->next = pc->next;
    else
      live = pc->next;
    if (pc->next) pc->next->prev = pc->prev;
    pc->listed = 0;
  }
  pthread_mutex_unlock(&live_mu);
}

/* Ends pc's gccl communicator, if it has one left: gcclCommDestroy, or
 * gcclCommAbort after a failure (peers still waiting in it fail at once instead of
 * hanging). Takes pc off the live list. Safe to call twice. */
static void preload_comm_release(struct preload_comm* pc, const char* why, int abort) {
  live_remove(pc);
  if (!pc->gccl) return;
  int outer = in_gccl;
  in_gccl = 1;
  gcclResult_t res = abort ? gcclCommAbort(pc->gccl) : gcclCommDestroy(pc->gccl);
  in_gccl = outer;
  pc->gccl = NULL;
  if (res != gcclSuccess)
    PRELOAD_WARN(pc->rank, "%s (%s) failed: %s: %s", abort ? "gcclCommAbort" : "gcclCommDestroy", why,
                 gcclGetErrorString(res), gcclGetLastError(NULL));
  else
    PRELOAD_INFO(pc->rank, "gccl communicator of MPI communicator %p %s (%s)", (void*)pc->mpi,
                 abort ? "aborted" : "destroyed", why);
}

/* The keyval's delete callback: MPI_Comm_free, MPI_Comm_disconnect, or our
 * MPI_Finalize deleting the attribute. */
static int delete_attr(MPI_Comm comm, int kv, void* value, void* extra) {
  (void)comm, (void)kv, (void)extra;
  if (value == &not_gccl) return MPI_SUCCESS;
  struct preload_comm* pc = value;
  preload_comm_release(pc, atomic_load(&finalizing) ? "MPI_Finalize" : "communicator freed", 0);
  free(pc);
  return MPI_SUCCESS;
}

static void keyval_create(void) {
  int rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_attr, &keyval, NULL);
  if (rc == MPI_SUCCESS)
    atomic_store(&keyval_made, 1);
  else
    PRELOAD_WARN(-1, "MPI_Comm_create_keyval failed (error %d): every MPI_Allreduce goes to MPI", rc);
}

/* Makes comm's gccl communicator and attaches it; NULL when comm goes to PMPI
 * (then comm carries not_gccl, unless even that failed). Collective over comm. */
static struct preload_comm* preload_comm_create(MPI_Comm comm) {
  int inter = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS) return NULL; /* MPI_Allreduce will say why */
  if (inter) {
    PMPI_Comm_set_attr(comm, keyval, &not_gccl);
    return NULL;
  }
  int rank = 0, nranks = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &nranks);

  struct preload_comm* pc = calloc(1, sizeof *pc);
  gcclComm_t g = NULL;
  gcclResult_t res = gcclSystemError;
  if (pc) {
    in_gccl = 1;
    res = gcclCommInitMpi(&g, comm);
    in_gccl = 0;
  }
  /* gcclCommInitMpi agrees on its own outcome once it has duplicated comm, but
   * not on a failure before that; every rank must take the same road. */
  int ok = res == gcclSuccess, all_ok = 0;
  if (PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) all_ok = 0;
  if (!all_ok) {
    if (ok)
      PRELOAD_WARN(rank,
                   "another rank of MPI communicator %p (%d ranks) could not make its gccl communicator: its "
                   "MPI_Allreduce calls go to MPI",
                   (void*)comm, nranks);
    else
      PRELOAD_WARN(rank,
                   "gcclCommInitMpi on MPI communicator %p (%d ranks) failed: %s: %s; its MPI_Allreduce calls "
                   "go to MPI",
                   (void*)comm, nranks, gcclGetErrorString(res), pc ? gcclGetLastError(NULL) : "out of memory");
    if (g) gcclCommDestroy(g);
    free(pc);
    PMPI_Comm_set_attr(comm, keyval, &not_gccl);
    return NULL;
  }
  *pc = (struct preload_comm){.mpi = comm, .gccl = g, .state = PRELOAD_GCCL, .rank = rank};
  route_init(&pc->route);
  if (PMPI_Comm_set_attr(comm, keyval, pc) != MPI_SUCCESS) {
    PRELOAD_WARN(rank, "MPI_Comm_set_attr on MPI communicator %p failed: its MPI_Allreduce calls go to MPI",
                 (void*)comm);
    gcclCommDestroy(g);
    free(pc);
    return NULL;
  }
  live_push(pc);
  PRELOAD_INFO(rank,
               "gccl communicator ready for MPI communicator %p (%d ranks): MPI_FLOAT/MPI_DOUBLE MPI_SUM "
               "allreduce of >= %zu bytes runs through gccl",
               (void*)comm, nranks, min_bytes);
  return pc;
}

/* ---- MPI_Allreduce ------------------------------------------------------------------ */

/* NULL buffers and buffers that overlap without MPI_IN_PLACE are MPI's to report;
 * buffers not aligned to their elements, which gccl refuses, are MPI's to reduce. */
static int buffers_plain(const void* sendbuf, const void* recvbuf, size_t bytes, size_t elem) {
  if (!recvbuf || (uintptr_t)recvbuf % elem) return 0;
  if (sendbuf == MPI_IN_PLACE) return 1;
  if (!sendbuf || (uintptr_t)sendbuf % elem) return 0;
  uintptr_t s = (uintptr_t)sendbuf, r = (uintptr_t)recvbuf;
  return s + bytes <= r || r + bytes <= s;
}

static int fail_call(MPI_Comm comm) {
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

/* A call gcclAllReduce failed: see the header for which road each failure takes. */
static int after_failure(struct preload_comm* pc, gcclResult_t res, const void* sendbuf, void* recvbuf, int count,
                         MPI_Datatype datatype) {
  gcclResult_t broken = gcclSuccess;
  gcclCommGetAsyncError(pc->gccl, &broken);
  if (res == gcclInvalidUsage && broken == gcclSuccess) {
    PRELOAD_WARN(pc->rank,
                 "gcclAllReduce refused a call on MPI communicator %p on every rank: %s; this and later "
                 "MPI_Allreduce calls on it go to MPI",
                 (void*)pc->mpi, gcclGetLastError(pc->gccl));
    preload_comm_release(pc, "gcclAllReduce refused a call", 0);
    pc->state = PRELOAD_RETIRED;
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, pc->mpi);
  }
  PRELOAD_WARN(pc->rank,
               "gcclAllReduce of %d %s on MPI communicator %p failed: %s: %s; %s; this and later "
               "eligible MPI_Allreduce calls on it return MPI_ERR_OTHER",
               count, datatype == MPI_FLOAT ? "MPI_FLOAT" : "MPI_DOUBLE", (void*)pc->mpi, gcclGetErrorString(res),
               gcclGetLastError(pc->gccl),
               sendbuf == MPI_IN_PLACE ? "the in-place buffer is undefined" : "recvbuf is undefined, sendbuf intact");
  preload_comm_release(pc, "gcclAllReduce failed", 1);
  pc->state = PRELOAD_BROKEN;
  return fail_call(pc->mpi);
}

/* The slow road: a call of the right type, op and size. */
static __attribute__((noinline)) int allreduce_eligible(const void* sendbuf, void* recvbuf, int count,
                                                        MPI_Datatype datatype, size_t bytes, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL || in_gccl || atomic_load(&finalizing) ||
      !buffers_plain(sendbuf, recvbuf, bytes, bytes / (size_t)count))
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, comm);
  if (!atomic_load(&keyval_made)) { /* the first eligible call: MPI must be up to make the keyval */
    int initialized = 0, finalized = 0;
    PMPI_Initialized(&initialized);
    PMPI_Finalized(&finalized);
    if (!initialized || finalized) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, comm);
    pthread_once(&keyval_once, keyval_create);
    if (!atomic_load(&keyval_made)) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, comm);
  }

  void* value = NULL;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS)
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, comm);
  struct preload_comm* pc = found ? value : preload_comm_create(comm);
  if (!pc || (void*)pc == &not_gccl || pc->state == PRELOAD_RETIRED)
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, comm);
  if (pc->state == PRELOAD_BROKEN) return fail_call(comm);

  int gccl_road = route_gccl(&pc->route, bytes);
  double t0 = PMPI_Wtime();
  if (gccl_road) {
    const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    gcclDataType_t dt = datatype == MPI_FLOAT ? gcclFloat32 : gcclFloat64;
    in_gccl = 1;
    gcclResult_t res = gcclAllReduce(send, recvbuf, (size_t)count, dt, gcclSum, pc->gccl, NULL);
    in_gccl = 0;
    if (res != gcclSuccess) return after_failure(pc, res, sendbuf, recvbuf, count, datatype);
  } else {
    int rc = PMPI_Allreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  int decided = route_record(&pc->route, bytes, gccl_road, PMPI_Wtime() - t0, comm);
  if (decided >= 0) {
    const struct route_class* k = &pc->route.cls[decided];
    PRELOAD_INFO(pc->rank,
                 "MPI communicator %p: allreduce of [%zu, %zu) bytes takes %s's road (per call, slowest rank: gccl "
                 "%.1f us, MPI %.1f us)",
                 (void*)comm, (size_t)1 << decided, (size_t)2 << decided, k->gccl ? "gccl" : "MPI",
                 k->slowest[1] / ROUTE_SAMPLES * 1e6, k->slowest[0] / ROUTE_SAMPLES * 1e6);
  }
  return MPI_SUCCESS;
}

PRELOAD_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                 MPI_Comm comm) {
  /* The passthrough test: three comparisons, no MPI call, no attribute lookup. */
  if (op == MPI_SUM && count > 0) {
    size_t elem = datatype == MPI_FLOAT ? sizeof(float) : datatype == MPI_DOUBLE ? sizeof(double) : 0;
    size_t bytes = (size_t)count * elem;
    if (elem && bytes >= min_bytes) return allreduce_eligible(sendbuf, recvbuf, count, datatype, bytes, comm);
  }
  return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

/* ---- MPI_Finalize ------------------------------------------------------------------- */

PRELOAD_EXPORT int MPI_Finalize(void) {
  atomic_store(&finalizing, 1);
  for (;;) {
    pthread_mutex_lock(&live_mu);
    struct preload_comm* pc = live;
    MPI_Comm comm = pc ? pc->mpi : MPI_COMM_NULL;
    pthread_mutex_unlock(&live_mu);
    if (!pc) break;
    /* The delete callback releases pc and frees it. Should MPI refuse, release the
     * gccl side here and leave pc to the callback MPI runs at finalisation. */
    if (PMPI_Comm_delete_attr(comm, keyval) != MPI_SUCCESS) preload_comm_release(pc, "MPI_Finalize", 0);
  }
  if (atomic_load(&keyval_made)) {
    int k = keyval; /* MPI_Comm_free_keyval resets its argument; keyval stays as other threads read it */
    PMPI_Comm_free_keyval(&k);
  }
  return PMPI_Finalize();
}
