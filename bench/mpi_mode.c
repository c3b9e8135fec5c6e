/* mpi_mode.c — gccl-bench --mpi: one rank per MPI process, gccl communicators
 * over MPI_COMM_WORLD (gcclCommInitMpi), and per size a row for the MPI library's
 * own collective, timed the same way, which every gccl row is compared against.
 *
 *   mpirun -np 4 --bind-to none gccl-bench --mpi allreduce -b 16M -e 100M -f 6.25 -m --dense-best
 *
 * The driver is gccl-bench.c's; this file is the bench_transport under it
 * (MPI_Barrier, MPI_Allreduce of the timings, MPI_Wtime: the slowest rank's time
 * from a barrier-aligned start) and the byte counters:
 *   wire: bytes gccl handed to MPI's send calls, counted by wrapping them through
 *         the MPI profiling interface (MPI_Isend here calls PMPI_Isend). That sees
 *         compressed frames at their real size, with no help from the library.
 *         Point-to-point sends only: gccl's few-byte agreements through
 *         MPI_Iallgather are not counted, and MPI's own collectives move their
 *         bytes below that interface (their wire column is "-").
 *   net:  of those, the bytes to ranks on other nodes (MPI_COMM_TYPE_SHARED); or,
 *         with --net-if IF, what interface IF transmitted (/proc/net/dev: IP, TCP
 *         and MPI headers included, every row, MPI's own collective too). That
 *         counts every process in the network namespace, so it is per rank only
 *         when each rank has a namespace of its own (bench/netns-testbed.sh). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>

#include "bench_mpi.h"
#include "gccl_bench.h"
#include "gccl_mpi.h"

#define MPI_CHECK(call) BENCH_MPI_CHECK("gccl-bench", call)

extern char** environ;

/* ---- bytes gccl hands to MPI, through the profiling interface ------------------------- */

#define MAX_COMMS 16 /* communicators whose node map is kept: one per gccl communicator */

static atomic_int counting; /* set once gccl's communicators exist */
static atomic_uint_fast64_t sent_all, sent_net;
static int my_node, *node_of_world; /* node = the lowest world rank on it */

/* Node of every rank of a communicator, found once per communicator (rank
 * translation is too slow for every send). Freed communicators are not dropped:
 * gccl-bench frees its own only at the end. */
typedef struct {
  MPI_Comm comm;
  int n; /* ranks */
  int* node_of_rank;
} comm_node_map;
static comm_node_map comm_nodes[MAX_COMMS];
static int ncomm_nodes;
static pthread_mutex_t comm_nodes_lock = PTHREAD_MUTEX_INITIALIZER;

/* Node of `rank` of comm (its remote group for an intercommunicator); -1 unknown. */
static int node_of(MPI_Comm comm, int rank) {
  int node = -1, k;
  pthread_mutex_lock(&comm_nodes_lock);
  for (k = 0; k < ncomm_nodes && comm_nodes[k].comm != comm; k++) continue;
  if (k == ncomm_nodes && k < MAX_COMMS) {
    MPI_Group group, world;
    int inter = 0, n = 0;
    PMPI_Comm_test_inter(comm, &inter);
    (inter ? PMPI_Comm_remote_group : PMPI_Comm_group)(comm, &group);
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    PMPI_Group_size(group, &n);
    int *ranks = malloc((size_t)n * sizeof(int)), *in_world = malloc((size_t)n * sizeof(int));
    if (ranks && in_world) {
      for (int r = 0; r < n; r++) ranks[r] = r;
      PMPI_Group_translate_ranks(group, n, ranks, world, in_world);
      for (int r = 0; r < n; r++) in_world[r] = in_world[r] == MPI_UNDEFINED ? -1 : node_of_world[in_world[r]];
      comm_nodes[ncomm_nodes++] = (comm_node_map){comm, n, in_world};
    } else {
      free(in_world);
    }
    free(ranks);
    PMPI_Group_free(&group);
    PMPI_Group_free(&world);
  }
  if (k < ncomm_nodes && rank >= 0 && rank < comm_nodes[k].n) node = comm_nodes[k].node_of_rank[rank];
  pthread_mutex_unlock(&comm_nodes_lock);
  return node;
}

static void count_send(int count, MPI_Datatype dt, int dest, MPI_Comm comm) {
  int size = 0;
  if (!atomic_load_explicit(&counting, memory_order_relaxed) || dest == MPI_PROC_NULL || count <= 0) return;
  PMPI_Type_size(dt, &size);
  uint64_t bytes = (uint64_t)count * (uint64_t)size;
  atomic_fetch_add_explicit(&sent_all, bytes, memory_order_relaxed);
  if (node_of(comm, dest) != my_node) atomic_fetch_add_explicit(&sent_net, bytes, memory_order_relaxed);
}

/* The sending calls a transport may use. An executable's definitions take
 * precedence over libmpi's for libgccl's calls too (the dynamic linker searches
 * the executable first), hence default visibility against the project's hidden
 * default. Persistent sends (MPI_Send_init + MPI_Start) are not counted. */
#define BENCH_EXPORT __attribute__((visibility("default")))

BENCH_EXPORT int MPI_Send(const void* buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  count_send(count, dt, dest, comm);
  return PMPI_Send(buf, count, dt, dest, tag, comm);
}
BENCH_EXPORT int MPI_Ssend(const void* buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  count_send(count, dt, dest, comm);
  return PMPI_Ssend(buf, count, dt, dest, tag, comm);
}
BENCH_EXPORT int MPI_Rsend(const void* buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  count_send(count, dt, dest, comm);
  return PMPI_Rsend(buf, count, dt, dest, tag, comm);
}
BENCH_EXPORT int MPI_Bsend(const void* buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
  count_send(count, dt, dest, comm);
  return PMPI_Bsend(buf, count, dt, dest, tag, comm);
}
BENCH_EXPORT int MPI_Isend(const void* buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                           MPI_Request* req) {
  count_send(count, dt, dest, comm);
  return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}
BENCH_EXPORT int MPI_Issend(const void* buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                            MPI_Request* req) {
  count_send(count, dt, dest, comm);
  return PMPI_Issend(buf, count, dt, dest, tag, comm, req);
}
BENCH_EXPORT int MPI_Irsend(const void* buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                            MPI_Request* req) {
  count_send(count, dt, dest, comm);
  return PMPI_Irsend(buf, count, dt, dest, tag, comm, req);
}
BENCH_EXPORT int MPI_Ibsend(const void* buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                            MPI_Request* req) {
  count_send(count, dt, dest, comm);
  return PMPI_Ibsend(buf, count, dt, dest, tag, comm, req);
}
BENCH_EXPORT int MPI_Sendrecv(const void* sbuf, int scount, MPI_Datatype sdt, int dest, int stag, void* rbuf,
                              int rcount, MPI_Datatype rdt, int source, int rtag, MPI_Comm comm, MPI_Status* st) {
  count_send(scount, sdt, dest, comm);
  return PMPI_Sendrecv(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, source, rtag, comm, st);
}
BENCH_EXPORT int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype dt, int dest, int stag, int source, int rtag,
                                      MPI_Comm comm, MPI_Status* st) {
  count_send(count, dt, dest, comm);
  return PMPI_Sendrecv_replace(buf, count, dt, dest, stag, source, rtag, comm, st);
}

/* ---- bytes a network interface transmitted ---------------------------------------------- */

/* *tx = transmitted bytes of interface `name` in this process's network namespace
 * (/proc/net/dev follows the reader's namespace, unlike /sys/class/net). 0 or -1. */
static int read_if_tx(const char* name, uint64_t* tx) {
  FILE* f = fopen("/proc/net/dev", "r");
  char line[512];
  int found = -1;
  if (!f) return -1;
  while (found && fgets(line, sizeof line, f)) {
    char* colon = strchr(line, ':');
    if (!colon) continue; /* the two header lines */
    *colon = 0;
    const char* ifname = line + strspn(line, " ");
    unsigned long long v[9];
    if (strcmp(ifname, name) == 0 && sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                                            &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9) {
      *tx = v[8]; /* after rx bytes, packets, errs, drop, fifo, frame, compressed, multicast */
      found = 0;
    }
  }
  fclose(f);
  return found;
}

/* ---- the transport under the driver ----------------------------------------------------- */

static void mpi_barrier(const rank_ctx* c) {
  (void)c;
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

static void mpi_allreduce(const rank_ctx* c, double* v, int n, int max) {
  (void)c;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD));
}

static double mpi_now(void) {
  return MPI_Wtime();
}

/* The process's CPU time, every thread (gccl's, MPI's) and the kernel's work on
 * its behalf (system time: TCP included) together. */
static double mpi_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned mpi_bytes_sent(const rank_ctx* c, uint64_t out[2]) {
  unsigned valid = 0;
  if (!c->v->mpi) {
    out[0] = atomic_load(&sent_all);
    out[1] = atomic_load(&sent_net);
    valid = 3;
  }
  if (c->run->x.net_if) {
    if (read_if_tx(c->run->x.net_if, &out[1]) != 0) {
      fprintf(stderr, "gccl-bench: rank %d: cannot read %s's counters from /proc/net/dev\n", c->rank, c->run->x.net_if);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    valid |= 2;
  }
  return valid;
}

static void mpi_run_collective(const rank_ctx* c, int inplace) {
  const bench_run* run = c->run;
  MPI_CHECK(bench_mpi_call(&run->o, MPI_COMM_WORLD, c->rank, run->o.nranks, c->send, c->recv, c->count, inplace));
}

static const bench_transport mpi_transport = {.barrier = mpi_barrier,
                                              .allreduce = mpi_allreduce,
                                              .now = mpi_now,
                                              .cpu_now = mpi_cpu_now,
                                              .bytes_sent = mpi_bytes_sent,
                                              .run_mpi = mpi_run_collective};

/* ---- setting up ------------------------------------------------------------------------- */

/* Fills node_of_world and my_node; returns the most ranks any node has. */
static int find_nodes(int rank, int nranks) {
  MPI_Comm local;
  int local_size = 0, leader = rank, most = 0;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_size(local, &local_size));
  MPI_CHECK(MPI_Bcast(&leader, 1, MPI_INT, 0, local)); /* local rank 0 is the lowest world rank */
  MPI_CHECK(MPI_Comm_free(&local));
  node_of_world = malloc((size_t)nranks * sizeof(int));
  if (!node_of_world) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, node_of_world, 1, MPI_INT, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Allreduce(&local_size, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  my_node = leader;
  return most;
}

static const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

/* Rank 0's lines about MPI before the common banner: the library, the thread
 * level, the nodes, what the baseline row is and what the byte columns count. */
static void print_mpi_banner(const bench_run* run, int provided, int nodes, int baseline) {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(lib, &len);
  lib[strcspn(lib, ",\n")] = 0;
  printf("# %s; thread level %s (asked MPI_THREAD_MULTIPLE); nodes: %d, at most %d ranks on one\n", lib,
         thread_level_name(provided), nodes, run->x.nodes_L);
  if (baseline) {
    /* mpirun passes --mca settings to the ranks as OMPI_MCA_ variables: the ones of
     * the collective components say which algorithm the baseline row ran. */
    printf("# baseline row (algo \"mpi\"): the MPI library's own collective on MPI_COMM_WORLD, as configured:");
    int any = 0;
    for (char** e = environ; *e; e++)
      if (!strncmp(*e, "OMPI_MCA_coll", 13)) {
        printf(" %s", *e + 9);
        any = 1;
      }
    printf("%s\n", any ? "" : " (defaults)");
  } else {
    printf("# no baseline row: MPI has no %s datatype, or a count exceeds INT_MAX\n", bench_type_names[run->o.type]);
  }
  printf(
      "# wire(B): bytes gccl passed to MPI send calls per call, busiest rank (counted through PMPI; '-': not"
      " observable)\n");
  if (run->x.net_if)
    printf("# net(B): bytes interface %s transmitted per call, busiest rank (/proc/net/dev; headers included)\n",
           run->x.net_if);
  else
    printf("# net(B): of the wire bytes, those to ranks on other nodes\n");
  if (run->x.net_gbps > 0) printf("# network: %g Gbit/s per rank (--net-gbps; JSON link_gbps)\n", run->x.net_gbps);
  printf(
      "# cpu_all(ms): CPU time per call of all ranks' processes together (user + system, every thread:\n"
      "#   compute, polling for messages, the kernel's work for them such as TCP)\n");
}

/* One communicator per GCCL_ALGO setting, over MPI_COMM_WORLD. */
static void make_comms(rank_ctx* c) {
  const ext_opts* x = &c->run->x;
  if (bench_link_env(x)) MPI_Abort(MPI_COMM_WORLD, 1);
  const char* user_algo = getenv("GCCL_ALGO");
  char* saved = user_algo ? strdup(user_algo) : NULL;
  for (int s = 0; s < x->nalgos; s++) {
    if (bench_set_env("GCCL_ALGO", x->algos[s] ? x->algos[s] : saved)) MPI_Abort(MPI_COMM_WORLD, 1);
    bench_check_gccl(c, gcclCommInitMpi(&c->comms[s], MPI_COMM_WORLD), "gcclCommInitMpi");
  }
  bench_set_env("GCCL_ALGO", saved);
  free(saved);
}

int bench_mpi_main(int argc, char** argv) {
  static bench_run run;
  int provided = 0, rank = 0, nranks = 0;
  MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &nranks));
  /* Every rank parses the same arguments to the same result; rank 0 speaks. */
  if (bench_parse(argc, argv, &run, rank != 0) != 0) {
    MPI_Finalize();
    return 2;
  }
  bench_opts* o = &run.o;
  o->nranks = nranks;
  if (o->root >= nranks) {
    if (rank == 0) fprintf(stderr, "gccl-bench: -R %d: root out of range for %d ranks\n", o->root, nranks);
    MPI_Finalize();
    return 2;
  }
  int most = find_nodes(rank, nranks), nodes = 0;
  for (int r = 0; r < nranks; r++) nodes += node_of_world[r] == r;
  run.x.nodes_L = run.x.ranks_per_node ? run.x.ranks_per_node : most;
  int baseline = bench_mpi_type(o->type) != MPI_DATATYPE_NULL && bench_count(o, o->max_bytes) <= INT_MAX;
  if (bench_plan(&run, baseline, rank != 0) != 0) {
    MPI_Finalize();
    return 2;
  }
  rank_ctx c = {.run = &run, .tp = &mpi_transport, .rank = rank};
  make_comms(&c);
  atomic_store(&counting, 1);
  if (run.x.net_if) {
    uint64_t tx;
    int ok = read_if_tx(run.x.net_if, &tx) == 0, all = 0;
    MPI_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!all) {
      if (!ok) fprintf(stderr, "gccl-bench: rank %d: no interface %s in /proc/net/dev\n", rank, run.x.net_if);
      MPI_Finalize();
      return 2;
    }
  }
  if (rank == 0) {
    print_mpi_banner(&run, provided, nodes, baseline);
    bench_print_banner(&run, "MPI processes");
  }
  MPI_CHECK(bench_mpi_quiet_barrier(MPI_COMM_WORLD));

  bench_tables_init(&run.tb, o);
  bench_rank_main(&c);
  int status = rank == 0 ? bench_finish(&run) : 0;
  MPI_CHECK(MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD));

  atomic_store(&counting, 0);
  for (int s = 0; s < run.x.nalgos; s++) bench_check_gccl(&c, gcclCommDestroy(c.comms[s]), "gcclCommDestroy");
  for (int k = 0; k < ncomm_nodes; k++) free(comm_nodes[k].node_of_rank);
  free(node_of_world);
  bench_tables_free(&run.tb);
  free(run.recs);
  MPI_Finalize();
  return status;
}
