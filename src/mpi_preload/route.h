/* route.h — which road an eligible MPI_Allreduce takes, gccl's or MPI's own,
 * chosen per size class by timing both in the run (route.c).
 *
 * The interposer must never make a program slower than plain MPI. Where gccl's
 * dense algorithms lose to MPI's (which sizes: this machine's, its network's and
 * this MPI's business) the crossover is measured, not assumed: per class of sizes
 * (a power of two of bytes), the first ROUTE_TRIALS calls alternate between
 * gccl and PMPI_Allreduce, the first of each untimed; then the ranks compare
 * their slowest rank's total time of each road (one PMPI_Allreduce of two
 * doubles) and every later call of the class takes gccl's road if it was at
 * least 5% faster, else MPI's. Every rank makes the same calls, so every rank
 * alternates and decides alike.
 *
 * Measured when GCCL_COMPRESS is unset, `none` or auto:SPEC (gccl's road then
 * includes auto:'s choice); an explicit codec always takes gccl's road, as does
 * GCCL_PRELOAD_ROUTE=gccl. */
#ifndef GCCL_MPI_PRELOAD_ROUTE_H
#define GCCL_MPI_PRELOAD_ROUTE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#define ROUTE_CLASSES 64
#define ROUTE_WARMUP 1  /* untimed calls of each road first: first-touch costs */
#define ROUTE_SAMPLES 6 /* timed calls of each road */
/* gccl's road must beat MPI's by this factor: within the noise of a few calls
 * (5% between blocks of identical calls on the test bed), MPI's is the safe one. */
#define ROUTE_MARGIN 0.95
#define ROUTE_TRIALS (2 * (ROUTE_WARMUP + ROUTE_SAMPLES))

struct route_class {
  uint32_t calls;
  int decided, gccl; /* the verdict, once decided */
  double seconds[2]; /* this rank's timed total: [0] MPI, [1] gccl */
  double slowest[2]; /* the slowest rank's, at the verdict */
};

struct route_table {
  int measure; /* 0: every call takes gccl's road */
  struct route_class cls[ROUTE_CLASSES];
};

/* Reads GCCL_PRELOAD_ROUTE and GCCL_COMPRESS: whether the table measures. */
void route_init(struct route_table* t);
/* Whether the next eligible call of `bytes` takes gccl's road. */
int route_gccl(const struct route_table* t, size_t bytes);
/* After a call of `bytes` that took road `gccl` and `seconds`, on comm: counts
 * it, and once the class's trials are done decides it (collective over comm:
 * every rank reaches it at the same call). Returns the class's index when it was
 * decided now, else -1. */
int route_record(struct route_table* t, size_t bytes, int gccl, double seconds, MPI_Comm comm);

#endif
