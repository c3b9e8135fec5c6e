/* road_watch.h — the road of a dense allreduce near the in-band limit, watched on
 * the program's own calls (road_watch.c). */
#ifndef GCCL_CORE_ROAD_WATCH_H
#define GCCL_CORE_ROAD_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/coll.h"
#include "gccl.h"

#define WATCH_CLASSES 3 /* calls of (8, 16], (16, 32] and (32, 64] KiB */
#define WATCH_RUN 4     /* calls of one road in a row in a look; the first is not timed */
#define WATCH_LOOKS 2   /* looks between two settlements */

/* One class of sizes. `calls` counts its agreed calls, alike on every rank, and
 * so every rank takes the same road at the same call. */
struct watch_class {
  uint64_t calls;
  uint64_t next;  /* the call at which the next look begins */
  uint64_t every; /* calls from the end of one look to the next */
  int swapped;    /* the class takes the road the limit does not give it */
  int looks;      /* looks since the last settlement */
  double run[WATCH_RUN - 1];
  double own[WATCH_LOOKS], other[WATCH_LOOKS]; /* this rank's medians of each look's runs (seconds) */
};

struct road_watch {
  int on;
  struct watch_class cls[WATCH_CLASSES];
};

/* Starts watching: on an MPI communicator whose limit was timed (in_band_limit.h). */
void road_watch_begin(struct road_watch* w);

/* Whether the watch sees a call of `bytes` that the tuner gave `tuned`: a dense
 * allreduce from 8 to 64 KiB, in band or split, with the watch on. */
int road_watch_sees(const struct road_watch* w, size_t bytes, enum coll_algo tuned);

/* The road of a call of `bytes` that the tuner gave `tuned`: the tuned one, the
 * other one (in band or split) where a settlement swapped the class, and the
 * one not taken in the second half of a look. Alike on every rank. */
enum coll_algo road_watch_road(const struct road_watch* w, size_t bytes, enum coll_algo tuned);

/* After an agreed call of `bytes` that took `seconds` on this rank (at least its
 * road's floor: in_band_limit_floor): counts it, and where it ends a look's run,
 * keeps the run's median; after WATCH_LOOKS looks, settles: one allgather of
 * every rank's mean of its medians of each road, each road's slowest rank
 * counting, and the class swaps roads where the one not taken is faster by 5%.
 * Errors: the transport's. */
gcclResult_t road_watch_after(struct road_watch* w, struct transport* tp, size_t bytes, enum coll_algo tuned,
                              double seconds);

/* The settlement's rule: whether a class swaps roads, given the slowest rank's
 * times of the road it takes and of the other. */
int road_watch_swaps(double taken, double other);

#endif
