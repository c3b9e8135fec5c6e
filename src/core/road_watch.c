/* road_watch.c — the road of a dense allreduce near the in-band limit, watched on
 * the program's own calls (road_watch.h).
 *
 * Why. The limit timed at creation (in_band_limit.c) samples the processes'
 * state while the communicator is made, and on the 1 Gbit/s test bed, with 3 to
 * 5 processes on 2 cores, that state errs by the hour: 1.3-5% of 3-rank
 * creations kept 16 KiB in band, which then took 1.33-1.53x Open MPI's
 * allreduce where split took 1.03-1.13x, and 5-12% of 5-rank creations kept 32
 * KiB in band (1.26-1.83x, split 0.62-0.79x). A second timing at creation meets
 * the same state (docs/notes/2026-12-07-h-the-in-band-limit-named.md). The
 * program's own calls do not.
 *
 * How. Per class of sizes, now and then a look: WATCH_RUN calls on the road
 * taken, then WATCH_RUN on the other, each run's first untimed (it absorbs what
 * the road before left on the link), the median of the rest kept. Every
 * WATCH_LOOKS looks a settlement: one allgather of each rank's means, the
 * slowest rank's counting as in the limit's timing, and the class swaps roads
 * where the other is faster by 5%. Looks begin after WATCH_FIRST calls; a
 * settlement that keeps the road doubles the calls between looks (up to
 * WATCH_MOST), one that swaps starts again. While the road holds, 2.8% of a
 * class's first 1,000 calls go the other road, 0.56% of its first 10,000, and
 * 0.1% from then on.
 *
 * Alike on every rank: a class's calls are counted only once agreed, and an
 * agreed call has the same size everywhere; the settlement's figures are every
 * rank's. Results stay bit-identical across ranks on either road, but a call
 * may sum in another order after a swap than before it. */
#include "core/road_watch.h"

#include "common/log.h"
#include "common/median.h"
#include "common/result.h"
#include "transport/transport.h"

#define WATCH_LEAST_BYTES ((size_t)8 << 10) /* 8 KiB and below always ride in band (in_band_limit.c) */
#define WATCH_MOST_BYTES ((size_t)64 << 10) /* IN_BAND_MAX_BYTES: split takes no larger call */
#define WATCH_FIRST 32                      /* calls before the first look, and after a swap */
#define WATCH_MOST 4096                     /* calls between looks at most */
#define WATCH_MARGIN 0.95                   /* the other road must be this much faster, as for the limit */
_Static_assert(WATCH_RUN - 1 == 3, "a run's median is median3's");
_Static_assert(WATCH_LEAST_BYTES << WATCH_CLASSES == WATCH_MOST_BYTES, "a class for every size from 8 to 64 KiB");

/* The class of `bytes`, or -1 outside the sizes watched. */
static int class_of(size_t bytes) {
  if (bytes <= WATCH_LEAST_BYTES || bytes > WATCH_MOST_BYTES) return -1;
  int k = 0;
  while ((WATCH_LEAST_BYTES << (k + 1)) < bytes) k++;
  return k;
}

static int is_road(enum coll_algo a) {
  return a == ALGO_IN_BAND || a == ALGO_SPLIT;
}

static enum coll_algo other_road(enum coll_algo a) {
  return a == ALGO_IN_BAND ? ALGO_SPLIT : ALGO_IN_BAND;
}

void road_watch_begin(struct road_watch* w) {
  *w = (struct road_watch){.on = 1};
  for (int k = 0; k < WATCH_CLASSES; k++) w->cls[k].next = w->cls[k].every = WATCH_FIRST;
}

int road_watch_swaps(double taken, double other) {
  return other < WATCH_MARGIN * taken;
}

/* The class of a call the watch sees, or -1. */
static int watched_class(const struct road_watch* w, size_t bytes, enum coll_algo tuned) {
  return w->on && is_road(tuned) ? class_of(bytes) : -1;
}

/* The road a class's calls take: the tuned one, or the other once a settlement swapped them. */
static enum coll_algo taken_road(const struct watch_class* c, enum coll_algo tuned) {
  return c->swapped ? other_road(tuned) : tuned;
}

int road_watch_sees(const struct road_watch* w, size_t bytes, enum coll_algo tuned) {
  return watched_class(w, bytes, tuned) >= 0;
}

enum coll_algo road_watch_road(const struct road_watch* w, size_t bytes, enum coll_algo tuned) {
  int k = watched_class(w, bytes, tuned);
  if (k < 0) return tuned;
  const struct watch_class* c = &w->cls[k];
  enum coll_algo taken = taken_road(c, tuned);
  int looking_away = c->calls >= c->next + WATCH_RUN && c->calls < c->next + 2 * WATCH_RUN;
  return looking_away ? other_road(taken) : taken;
}

/* Every rank's means of both roads over the looks; the slowest rank's decide. */
static gcclResult_t settle(struct watch_class* c, struct transport* tp, int k, enum coll_algo taken) {
  double mine[2] = {0, 0}, all[tp->nranks][2];
  for (int i = 0; i < WATCH_LOOKS; i++) {
    mine[0] += c->own[i] / WATCH_LOOKS;
    mine[1] += c->other[i] / WATCH_LOOKS;
  }
  GCCL_CHECK(tp_allgather_small(tp, mine, sizeof mine, all));
  double slowest[2] = {0, 0};
  for (int r = 0; r < tp->nranks; r++)
    for (int j = 0; j < 2; j++)
      if (all[r][j] > slowest[j]) slowest[j] = all[r][j];
  size_t low = WATCH_LEAST_BYTES << k, high = low * 2;
  if (road_watch_swaps(slowest[0], slowest[1])) {
    c->swapped = !c->swapped;
    c->every = WATCH_FIRST;
    GCCL_INFO(LOG_TUNING,
              "dense allreduce of %zu-%zu bytes: now %s (%.0f us) where %s took %.0f us, on this program's calls",
              low + 1, high, algo_name(other_road(taken)), slowest[1] * 1e6, algo_name(taken), slowest[0] * 1e6);
  } else {
    c->every = c->every * 2 < WATCH_MOST ? c->every * 2 : WATCH_MOST;
    GCCL_TRACE(LOG_TUNING, "dense allreduce of %zu-%zu bytes: stays %s (%.0f us; %s %.0f us)", low + 1, high,
               algo_name(taken), slowest[0] * 1e6, algo_name(other_road(taken)), slowest[1] * 1e6);
  }
  return gcclSuccess;
}

gcclResult_t road_watch_after(struct road_watch* w, struct transport* tp, size_t bytes, enum coll_algo tuned,
                              double seconds) {
  int k = watched_class(w, bytes, tuned);
  if (k < 0) return gcclSuccess;
  struct watch_class* c = &w->cls[k];
  uint64_t at = c->calls++;
  if (at <= c->next || at >= c->next + 2 * WATCH_RUN) return gcclSuccess; /* outside a look, or a run's first */
  uint64_t slot = (at - c->next) % WATCH_RUN;
  if (slot == 0) return gcclSuccess;
  c->run[slot - 1] = seconds;
  if (slot < WATCH_RUN - 1) return gcclSuccess;
  if (at < c->next + WATCH_RUN) {
    c->own[c->looks] = median3(c->run[0], c->run[1], c->run[2]);
    return gcclSuccess;
  }
  c->other[c->looks++] = median3(c->run[0], c->run[1], c->run[2]);
  if (c->looks == WATCH_LOOKS) {
    c->looks = 0;
    GCCL_CHECK(settle(c, tp, k, taken_road(c, tuned)));
  }
  c->next = at + 1 + c->every;
  return gcclSuccess;
}
