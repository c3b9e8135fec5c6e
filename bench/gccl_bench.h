/* gccl_bench.h — gccl-bench's two rank modes and what they share: the options,
 * the variants (table rows) of a run, and the per-rank driver that times them.
 *
 * The driver (gccl-bench.c) runs on every rank: threads of one process (thread
 * mode) or one rank per MPI process (`--mpi`, mpi_mode.c). It meets the other
 * ranks only through a bench_transport: a barrier, a reduction of a few doubles,
 * a clock, byte counters, and (MPI mode) the MPI library's own collective for the
 * baseline row. Rank 0 prints the table and keeps the records for -J. */
#ifndef GCCL_BENCH_H
#define GCCL_BENCH_H

#include <stdint.h>

#include "bench_common.h"
#include "gccl.h"

#define MAX_REPS 5      /* timings per size in median mode */
#define MAX_VARIANTS 64 /* dense-best algorithms plus --codec specs */
#define MAX_ALGOS 8     /* distinct GCCL_ALGO settings, one communicator set each */

/* One line of the table per size: a codec (NULL = dense) under an algorithm, or
 * the MPI library's collective (MPI mode's baseline row). */
typedef struct {
  const char* codec; /* a compressor spec; NULL for the dense call */
  const char* algo;  /* GCCL_ALGO for its communicators; NULL = the tuner's (or the environment's) */
  int comm_set;      /* index of its communicators */
  int mpi;           /* 1: MPI's own collective on MPI_COMM_WORLD, not gccl */
} variant;

/* Options beyond nccl-tests' ones. */
typedef struct {
  variant v[MAX_VARIANTS];
  int nv;
  const char* algos[MAX_ALGOS]; /* per communicator set */
  int nalgos;
  int ranks_per_node; /* --ranks-per-node; 0: not set */
  int nodes_L;        /* ranks per node as reported (JSON "L"): --ranks-per-node, else detected (MPI) */
  double link_gbps, link_us;
  int link_model; /* --link-gbps or --link-us given */
  int pace;       /* --pace */
  int dense_best;
  int mpi;            /* --mpi: one rank per MPI process */
  const char* net_if; /* --net-if: a network interface whose transmitted bytes are counted (MPI mode) */
  double net_gbps;    /* --net-gbps: the real network's rate, for JSON's link_gbps (MPI mode); 0: unknown */
  const char* json_path;
  char* codecs[MAX_VARIANTS]; /* --codec specs, split at spaces, before planning */
  int ncodecs;
} ext_opts;

/* One result, as -J writes it. Fields < 0 were not measured (JSON null). */
typedef struct {
  size_t bytes;
  const char* codec;
  const char* algo;
  double time_us, busbw, ratio, rel_err, speedup;
  double wire_bytes;  /* bytes per call the busiest rank sent to any peer */
  double net_bytes;   /* of which across the network (see the mode) */
  double speedup_mpi; /* MPI mode: against the MPI library's collective */
  double cpu_all_us;  /* MPI mode: CPU time per call of all ranks together (processes' user + system) */
  int mpi;            /* the row of the MPI library's collective */
} record;

/* A run: the options every rank reads, and rank 0's tallies. Thread mode shares
 * one; in MPI mode every process has its own (only rank 0's tallies count). */
typedef struct {
  bench_opts o;
  ext_opts x;
  bench_tables tb;
  size_t wrong_total;
  double busbw_sum;
  int results;
  record* recs;
  size_t nrecs, cap_recs;
} bench_run;

typedef struct rank_ctx rank_ctx;

/* How a mode's ranks meet. Every rank calls barrier, allreduce and run_mpi in the
 * same order (they are collective); now, cpu_now and bytes_sent are local. */
typedef struct {
  void (*barrier)(const rank_ctx* c);
  /* v[k] = the max (max != 0) or the sum over ranks of every rank's v[k], k < n
   * (n <= 8), on every rank. */
  void (*allreduce)(const rank_ctx* c, double* v, int n, int max);
  double (*now)(void);     /* wall clock, seconds */
  double (*cpu_now)(void); /* this rank's CPU time, seconds; NULL: not measured (thread ranks share a process) */
  /* Bytes this rank has sent so far for the current variant: out[0] to any peer,
   * out[1] across the network. Returns a mask of the valid ones (bit k: out[k]). */
  unsigned (*bytes_sent)(const rank_ctx* c, uint64_t out[2]);
  /* One call of the MPI library's collective (variants with mpi set). */
  void (*run_mpi)(const rank_ctx* c, int inplace);
} bench_transport;

/* One rank's view of one size and variant. */
struct rank_ctx {
  bench_run* run;
  const bench_transport* tp;
  void* tp_state; /* the mode's own */
  int rank;
  gcclComm_t comms[MAX_ALGOS]; /* this rank's communicator of each set */
  const variant* v;
  gcclComm_t comm;
  gcclCompressor_t comp; /* NULL for a dense variant */
  size_t count, es;
  char *send, *recv;
};

/* ---- gccl-bench.c: options, output and the per-rank driver -------------------- */

/* Parses argv into run->o and run->x (codecs not yet planned). quiet: print no
 * errors (MPI ranks but 0). Returns 0, or -1 after printing the problem. */
int bench_parse(int argc, char** argv, bench_run* run, int quiet);

/* Turns --dense-best, --codec and --algo into run->x.v (dense first; in MPI mode
 * the MPI baseline row before them when mpi_baseline) and the communicator sets.
 * Returns 0 or -1 after printing the problem (unless quiet). */
int bench_plan(bench_run* run, int mpi_baseline, int quiet);

/* Sets the link model's and GCCL_RANKS_PER_NODE's environment for communicators
 * made after it. Returns 0 or -1. */
int bench_link_env(const ext_opts* x);

/* setenv(name, value), or unsetenv when value is NULL; 0 or -1 (printed). */
int bench_set_env(const char* name, const char* value);

/* The "# gccl ..." lines, the parameters and the table header (rank 0). */
void bench_print_banner(const bench_run* run, const char* ranks_what);

/* Every size and variant on this rank; rank 0 prints the rows. */
void bench_rank_main(rank_ctx* c);

/* The footer and -J (rank 0). Returns the exit status: 1 on wrong results or a
 * failed JSON write, else 0. */
int bench_finish(bench_run* run);

/* Exits with a message naming the rank when r is not gcclSuccess. */
void bench_check_gccl(const rank_ctx* c, gcclResult_t r, const char* what);

/* ---- mpi_mode.c (builds with MPI) ---------------------------------------------- */

/* gccl-bench --mpi: the whole run on this MPI process (calls MPI_Init_thread and
 * MPI_Finalize). Returns the exit status. */
int bench_mpi_main(int argc, char** argv);

#endif /* GCCL_BENCH_H */
