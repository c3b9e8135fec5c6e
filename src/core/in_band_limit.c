/* in_band_limit.c — how far a small dense allreduce across nodes rides the
 * in-band exchange when the rank count is not a power of two (in_band_limit.h).
 *
 * Why timed. With p not a power of two, the in-band exchange (in_band.c) folds
 * the extra ranks' whole data in first and sends the result back last: all n
 * bytes cross the critical path (2 + log q) times, and the host of a folded rank
 * sends (1 + log q) n, where split (split.c) sends 2 (p-1)/p n from every rank
 * in two rounds, its first beside the agreement. On the 1 Gbit/s test bed at 3
 * ranks the fold made the drop-in 1.2-1.4x Open MPI's allreduce at 16 KiB and
 * 1.5x at 32 KiB. The alpha-beta crossover from the link probe's figures alone
 * (about 5.5 KB there) misses what a message costs beyond its bytes, and on 2
 * cores running 3 ranks split's extra messages cost more than a hop: at 8 KiB
 * in band took 40-190 us where split took 130-430, and the drop-in on split
 * 1.9-2.7x Open MPI's allreduce; 8 KiB and below stay in band. So both roads are
 * timed, on every rank at once, as calls will run them: back to back, on a link
 * already busy (drain()), at 64, 32 and 16 KiB. The limit is the one those sizes
 * contradict least (in_band_limit_fit): split's lead grows with the size, so one
 * size timed wrong among three is outvoted. Where the first pass keeps 32 KiB or
 * more in band, or contradicts itself, every size is timed once more
 * (combine()): there an error costs most.
 *
 * A time is no less than the bytes the road's busiest rank sends over the link's
 * measured rate (comm->link, link_probe.h): a block of a few calls is short
 * enough to pass within a burst allowance (the test bed's token bucket passes
 * 256 KB at the veth's speed), and calls back to back for longer cannot. The
 * bed's in-band fold timed 160-270 us at 32 KiB in one creation in six, where its
 * host's 64 KB need 520 us at 1 Gbit/s, and the drop-in then took 1.5x Open MPI's
 * allreduce at 32 KiB.
 *
 * Every rank takes the slowest rank's times (one allgather per size), so all
 * decide alike: a call's size picks the same road everywhere, and a mismatch
 * between a call in band and a larger one (split) still meets as a mismatch on
 * every rank, as at IN_BAND_MAX_BYTES. On the test bed the timing took 20-36 ms
 * at 3 ranks (a second pass in 2 creations of 54) and 30-79 ms at 5 ranks (5
 * processes on 2 cores; a second pass in 9 of 16).
 *
 * The floors describe calls back to back for longer than a burst. At 5 ranks on
 * the bed, 32 KiB then takes 0.76-0.91x Open MPI's allreduce on either road, and
 * creations split between them; in 2 ms bursts, where Open MPI's calls ride the
 * token bucket, split there took 1.10-1.40x and in band 0.85-1.09x
 * (docs/notes/2026-12-07-five-ranks-and-block-length.md). */
#include "core/in_band_limit.h"

#include <math.h>

#include "collectives/coll.h"
#include "collectives/in_band.h"
#include "common/arena.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "common/median.h"
#include "common/result.h"
#include "core/comm.h"
#include "transport/transport.h"

#define LIMIT_LEAST_BYTES ((size_t)8 << 10) /* timed down to 16 KiB; 8 KiB and below, in band */
#define LIMIT_SIZES 3                       /* 64, 32 and 16 KiB */
#define LIMIT_PASSES 2                      /* timings of every size at most (in_band_limit_measure) */
#define LIMIT_TRIALS 3                      /* timed calls of each road per size, after one untimed */
#define LIMIT_MARGIN 0.95                   /* split must be this much faster: in band is the default */
_Static_assert(2 * sizeof(double) <= TP_SMALL_MAX, "the times travel by allgather_small");
_Static_assert(LIMIT_TRIALS == 3, "the median is median3's");
_Static_assert(IN_BAND_MAX_BYTES >> LIMIT_SIZES == LIMIT_LEAST_BYTES,
               "every size from the largest down to the least's double");

/* The two roads, in the order their times travel and are kept. */
static const enum coll_algo ROADS[2] = {ALGO_IN_BAND, ALGO_SPLIT};

/* Calls of one road back to back, as a program makes them: in band (agreement
 * and data in one exchange), or split (its first round beside the agreement). A
 * rank's time for a call runs from its own start to its own end, so in a block
 * of calls each time is the block's period on every rank; the first call only
 * absorbs what the previous road left (ranks that finished it at different
 * times). The median of the others counts (seconds). */
static gcclResult_t time_calls(struct coll_ctx* ctx, const struct coll_args* a, enum coll_algo road, double* out) {
  double t[LIMIT_TRIALS];
  for (int k = -1; k < LIMIT_TRIALS; k++) {
    int64_t t0 = clock_now_ns();
    if (road == ALGO_IN_BAND) {
      GCCL_CHECK(coll_agree_allreduce(ctx, a, 0));
    } else {
      GCCL_CHECK(coll_agree(ctx, a, ALGO_SPLIT, 0));
      GCCL_CHECK(coll_run(ctx, a, ALGO_SPLIT));
    }
    if (k >= 0) t[k] = (double)(clock_now_ns() - t0) * 1e-9;
  }
  *out = median3(t[0], t[1], t[2]);
  return gcclSuccess;
}

/* A float sum of `bytes` from buf into buf + IN_BAND_MAX_BYTES. */
static struct coll_args call_of(float* buf, size_t bytes) {
  return coll_call(COLL_ALLREDUCE, buf, buf + IN_BAND_MAX_BYTES / sizeof(float), bytes / sizeof(float), gcclFloat32,
                   gcclSum, 0);
}

double in_band_limit_floor(gcclComm_t c, enum coll_algo road, size_t bytes) {
  int p = c->nranks;
  double sent = road == ALGO_IN_BAND ? in_band_busiest_bytes(&c->ctx, bytes) : 2.0 * (p - 1) / p * (double)bytes;
  return sent * c->link.beta;
}

/* Both roads at `bytes` on every rank, and the slowest rank's times of each (at
 * least its floor; in the order of ROADS), alike on every rank. */
static gcclResult_t time_size(gcclComm_t c, float* buf, size_t bytes, double slowest[2]) {
  struct coll_args a = call_of(buf, bytes);
  double mine[2], all[c->nranks][2];
  for (int k = 0; k < 2; k++) GCCL_CHECK(time_calls(&c->ctx, &a, ROADS[k], &mine[k]));
  GCCL_CHECK(tp_allgather_small(c->tp, mine, sizeof mine, all));
  double timed[2] = {0, 0}, floors[2];
  for (int k = 0; k < 2; k++) {
    for (int r = 0; r < c->nranks; r++)
      if (all[r][k] > timed[k]) timed[k] = all[r][k];
    floors[k] = in_band_limit_floor(c, ROADS[k], bytes);
    slowest[k] = timed[k] > floors[k] ? timed[k] : floors[k];
  }
  GCCL_TRACE(LOG_INIT, "in-band limit at %zu bytes: in band %.0f us (floor %.0f), split %.0f us (floor %.0f)", bytes,
             timed[0] * 1e6, floors[0] * 1e6, timed[1] * 1e6, floors[1] * 1e6);
  return gcclSuccess;
}

/* Calls of both roads at IN_BAND_MAX_BYTES first, their times dropped: split's
 * make the connections between ranks that the fold never pairs (Open MPI's TCP
 * opens one on a pair's first message) and take them past TCP's slow start; the
 * fold's, last, leave the link busy (512 KiB from the busiest rank at 3 ranks): a
 * link that was idle lets a burst through faster than its rate, and calls timed
 * within it are not what calls back to back take. At 3 ranks on the bed the
 * in-band fold timed 300 us at 32 KiB without them, the ring 460, where calls
 * between MPI's took 510 and 355 us; without split's, the first creation of a
 * process took split at 16 KiB for slower than the fold. */
static gcclResult_t drain(gcclComm_t c, float* buf) {
  struct coll_args a = call_of(buf, IN_BAND_MAX_BYTES);
  double dropped;
  GCCL_CHECK(time_calls(&c->ctx, &a, ALGO_SPLIT, &dropped));
  return time_calls(&c->ctx, &a, ALGO_IN_BAND, &dropped);
}

/* Split wins a size when it is faster than in band by the margin. */
static int split_wins(double in_band, double split) {
  return split < LIMIT_MARGIN * in_band;
}

size_t in_band_limit_fit(const size_t bytes[], const double in_band[], const double split[], int n, size_t least,
                         int* against) {
  size_t best = least;
  int best_wrong = n + 1;
  double best_loss = INFINITY;
  for (int k = n; k >= 0; k--) { /* each candidate limit: `least` (k = n), then bytes[n-1] up to bytes[0] */
    size_t limit = k == n ? least : bytes[k];
    int wrong = 0;
    double loss = 0;
    for (int i = 0; i < n; i++) {
      int in_band_here = bytes[i] <= limit;
      if (in_band_here == split_wins(in_band[i], split[i])) {
        wrong++;
        loss += fabs(log(split[i] / (LIMIT_MARGIN * in_band[i])));
      }
    }
    /* From the least limit up, so that a tie in both goes to the larger (in band is the default). */
    if (wrong < best_wrong || (wrong == best_wrong && loss <= best_loss)) {
      best = limit;
      best_wrong = wrong;
      best_loss = loss;
    }
  }
  if (against) *against = best_wrong;
  return best;
}

/* Two timings of one road at one size as one: the least where one is more than
 * twice the other, their mean otherwise. A block slowed by what lies outside the
 * road (another process on the core, a lost segment) stays out: on the bed at 3
 * ranks, where split at 32 KiB times 370-400 us, one creation timed it at 1.1 ms
 * and kept 32 KiB in band, and 32 KiB then took 1.5x Open MPI's allreduce (6 of
 * 144 first creations kept 32 KiB or more, before the second pass). The least of
 * two always would favour the road whose times spread most: at 5 ranks on 2
 * cores, split, whose 32 KiB then took 1.15-1.33x where in band took 0.8-1.15x. */
static double combine(double a, double b) {
  double least = a < b ? a : b, most = a < b ? b : a;
  return most > 2 * least ? least : (a + b) / 2;
}

/* One timing of every size (bytes[], from the largest down); from the second
 * pass on, combined with the earlier ones'. */
static gcclResult_t time_sizes(gcclComm_t c, float* buf, const size_t bytes[], int pass, double in_band[],
                               double split[]) {
  for (int i = 0; i < LIMIT_SIZES; i++) {
    double t[2];
    GCCL_CHECK(time_size(c, buf, bytes[i], t));
    in_band[i] = pass == 0 ? t[0] : combine(in_band[i], t[0]);
    split[i] = pass == 0 ? t[1] : combine(split[i], t[1]);
  }
  return gcclSuccess;
}

/* GCCL_MPI_IN_BAND_BYTES on rank 0, alike on every rank: the limit (1 to
 * IN_BAND_MAX_BYTES), or 0 where unset or out of range (timed). A user who knows
 * the link, or whose machine times it unreliably (3 to 5 ranks on 2 cores, as
 * the test bed: 1-5% of 3-rank creations kept 16 KiB in band), names it, as
 * NCCL_PROTO names a protocol. */
static gcclResult_t named_limit(gcclComm_t c, size_t* limit) {
  int64_t mine = env_int("GCCL_MPI_IN_BAND_BYTES", 0), all[c->nranks];
  if (mine > (int64_t)IN_BAND_MAX_BYTES) {
    GCCL_WARN("ignoring GCCL_MPI_IN_BAND_BYTES=%lld: more than %zu", (long long)mine, IN_BAND_MAX_BYTES);
    mine = 0;
  }
  GCCL_CHECK(tp_allgather_small(c->tp, &mine, sizeof mine, all));
  *limit = (size_t)all[0];
  return gcclSuccess;
}

gcclResult_t in_band_limit_measure(gcclComm_t c) {
  int p = c->nranks;
  if (c->ctx.local_size >= p || coll_pow2_floor(p) == p || !c->tp->agree_in_band) return gcclSuccess;
  size_t named;
  GCCL_CHECK(named_limit(c, &named));
  if (named) {
    c->ctx.net.in_band_max_bytes = named;
    GCCL_INFO(LOG_INIT,
              "dense allreduce in band up to %zu bytes, split above (%d ranks; GCCL_MPI_IN_BAND_BYTES on rank 0)",
              named, p);
    return gcclSuccess;
  }
  if (c->faults) return gcclSuccess;
  int64_t start = clock_now_ns();
  /* A send and a receive buffer, paged in before any timing; mapped, not
   * malloc'd: glibc raises its mmap threshold when a mapped chunk is freed, and
   * the program's later buffers of up to 128 KiB then come from the heap. A trial
   * build that timed on one node at np 2 left Open MPI's own allreduce 1.5-3x
   * slower at 16-128 KiB for the rest of the process. */
  float* buf;
  GCCL_CHECK(arena_alloc((void**)&buf, 2 * IN_BAND_MAX_BYTES));
  size_t bytes[LIMIT_SIZES], limit = LIMIT_LEAST_BYTES;
  for (int i = 0; i < LIMIT_SIZES; i++) bytes[i] = IN_BAND_MAX_BYTES >> i;
  double in_band[LIMIT_SIZES], split[LIMIT_SIZES];
  int against = 0, passes = 0;
  gcclResult_t res = drain(c, buf);
  /* Again, once, where an error would cost most: a limit of 32 KiB or more (at 3
   * ranks on the bed, 32 KiB in band took 1.5x Open MPI's allreduce, on split
   * 1.0x), or sizes that contradict one another (split's lead grows with the
   * size). The times are every rank's slowest, so every rank passes alike. */
  while (res == gcclSuccess && passes < LIMIT_PASSES) {
    res = time_sizes(c, buf, bytes, passes++, in_band, split);
    if (res == gcclSuccess) limit = in_band_limit_fit(bytes, in_band, split, LIMIT_SIZES, LIMIT_LEAST_BYTES, &against);
    if (limit <= 2 * LIMIT_LEAST_BYTES && !against) break;
  }
  arena_free(buf, 2 * IN_BAND_MAX_BYTES);
  GCCL_CHECK(res);
  c->ctx.net.in_band_max_bytes = limit;
  if (c->forced_algo == ALGO_AUTO) road_watch_begin(&c->watch); /* the timing errs now and then: the calls check it */
  GCCL_INFO(LOG_INIT,
            "dense allreduce in band up to %zu bytes, split above (%d ranks; timed at 64, 32 and 16 KiB, in band "
            "%.0f, %.0f and %.0f us, split %.0f, %.0f and %.0f, each at least its busiest rank's bytes at %.2f "
            "Gbit/s; %d passes; %d of %d sizes against the limit; %.1f ms)",
            limit, p, in_band[0] * 1e6, in_band[1] * 1e6, in_band[2] * 1e6, split[0] * 1e6, split[1] * 1e6,
            split[2] * 1e6, c->link.beta > 0 ? 8e-9 / c->link.beta : 0.0, passes, against, LIMIT_SIZES,
            (double)(clock_now_ns() - start) * 1e-6);
  return gcclSuccess;
}
