/* route.c — gccl's road or MPI's, per size class, as measured (route.h). */
#include "route.h"

#include <stdlib.h>
#include <string.h>

static int class_of(size_t bytes) {
  int c = 0;
  while (c < ROUTE_CLASSES - 1 && ((size_t)1 << (c + 1)) <= bytes) c++;
  return c;
}

void route_init(struct route_table* t) {
  memset(t, 0, sizeof *t);
  const char* road = getenv("GCCL_PRELOAD_ROUTE");
  const char* spec = getenv("GCCL_COMPRESS");
  int dense_or_auto = !spec || !*spec || !strcmp(spec, "none") || !strncmp(spec, "auto:", 5);
  t->measure = dense_or_auto && !(road && !strcmp(road, "gccl"));
}

int route_gccl(const struct route_table* t, size_t bytes) {
  if (!t->measure) return 1;
  const struct route_class* k = &t->cls[class_of(bytes)];
  return k->decided ? k->gccl : k->calls % 2 == 0;
}

int route_record(struct route_table* t, size_t bytes, int gccl, double seconds, MPI_Comm comm) {
  if (!t->measure) return -1;
  int c = class_of(bytes);
  struct route_class* k = &t->cls[c];
  if (k->decided) return -1;
  if (k->calls >= 2 * ROUTE_WARMUP) k->seconds[gccl != 0] += seconds;
  if (++k->calls < ROUTE_TRIALS) return -1;
  /* A failed comparison keeps MPI's road, on every rank alike: MPI failed everywhere. */
  if (PMPI_Allreduce(k->seconds, k->slowest, 2, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS)
    k->slowest[0] = 0, k->slowest[1] = 1;
  k->gccl = k->slowest[1] <= ROUTE_MARGIN * k->slowest[0];
  k->decided = 1;
  return c;
}
