/* in_band_limit.c — how far a small dense allreduce across nodes rides the
 * in-band exchange when the rank count is not a power of two (in_band_limit.h).
 *
 * Why timed. With p not a power of two, the in-band exchange (in_band.c) folds
 * the extra ranks' whole data in first and sends the result back last: all n
 * bytes cross the critical path (2 + log q) times, where the ring moves
 * 2 (p-1)/p n. On the 1 Gbit/s test bed at 3 ranks that made the drop-in 1.2x
 * Open MPI's allreduce at 16 KiB and 2.0x at 64 KiB, while the ring took 1.01-1.04x
 * at 32-64 KiB. The alpha-beta crossover from the link probe's figures (about
 * 5.5 KB there) would have sent 8-16 KiB to the ring, which lost 1.2-3.8x: the
 * token bucket passes bursts of up to 256 KB at the veth's speed, which neither
 * the probe's 8-byte round trips nor its long messages see. So both schedules
 * are timed, on every rank at once, as calls will run them: back to back, on a
 * link already busy (drain()), from 64 KiB down, halving while the ring is faster.
 *
 * Every rank takes the slowest rank's times (one allgather per size), so all
 * decide alike: a call's size picks the same road everywhere, and a mismatch
 * between a call in band and a larger one (the agreement alone, then the ring)
 * still meets as a mismatch on every rank, as at IN_BAND_MAX_BYTES. On the test
 * bed at 3 ranks the timing took 13-17 ms (64 down to 16 or 8 KiB); where in
 * band wins at 64 KiB, one size is timed. */
#include "core/in_band_limit.h"

#include <stdlib.h>
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/coll.h"
#include "collectives/in_band.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/result.h"
#include "core/comm.h"
#include "transport/transport.h"

#define LIMIT_LEAST_BYTES ((size_t)4 << 10) /* timed down to 8 KiB; below, in band */
#define LIMIT_TRIALS 3                      /* timed calls of each road per size, after one untimed */
#define LIMIT_MARGIN 0.95                   /* the ring must be this much faster: in band is the default */
#define LIMIT_HASH 0x6c696d6974ull          /* any value alike on every rank: the calls agree */
_Static_assert(2 * sizeof(double) <= TP_SMALL_MAX, "the times travel by allgather_small");
_Static_assert(LIMIT_TRIALS == 3, "the median is median3's");

static double median3(double a, double b, double c) {
  return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* Calls of one road back to back, as a program makes them: in band (agreement
 * and data in one exchange), or the agreement alone and then the ring. A rank's
 * time for a call runs from its own start to its own end, so in a block of calls
 * each time is the block's period on every rank; the first call only absorbs
 * what the previous road left (ranks that finished it at different times). The
 * median of the others counts (seconds). */
static gcclResult_t time_calls(struct coll_ctx* ctx, const struct coll_args* a, int in_band, double* out) {
  double t[LIMIT_TRIALS];
  for (int k = -1; k < LIMIT_TRIALS; k++) {
    int agreed = 0;
    int64_t t0 = clock_now_ns();
    GCCL_CHECK(in_band_exchange(ctx, LIMIT_HASH, in_band ? a : NULL, &agreed));
    if (!agreed) return err_set(gcclInternalError, "timing the in-band limit: the ranks' calls differed");
    if (!in_band) GCCL_CHECK(allreduce_ring(ctx, a));
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

/* Both roads at `bytes` on every rank, and the slowest rank's times of each
 * ([0] in band, [1] the ring), alike on every rank. */
static gcclResult_t time_size(gcclComm_t c, float* buf, size_t bytes, double slowest[2]) {
  struct coll_args a = call_of(buf, bytes);
  double mine[2], all[c->nranks][2];
  GCCL_CHECK(time_calls(&c->ctx, &a, 1, &mine[0]));
  GCCL_CHECK(time_calls(&c->ctx, &a, 0, &mine[1]));
  GCCL_CHECK(tp_allgather_small(c->tp, mine, sizeof mine, all));
  slowest[0] = slowest[1] = 0.0;
  for (int r = 0; r < c->nranks; r++)
    for (int k = 0; k < 2; k++)
      if (all[r][k] > slowest[k]) slowest[k] = all[r][k];
  return gcclSuccess;
}

/* In-band calls at IN_BAND_MAX_BYTES first, their times dropped (time_calls'
 * four: 512 KiB from the fold's busiest rank, which sends 2 n): a link that was
 * idle lets a burst through faster than its rate (the test bed's token bucket
 * passes 256 KB at the veth's speed), and calls timed within it are not what
 * calls back to back take. At 3 ranks on the bed the in-band fold timed 300 us
 * at 32 KiB, the ring 460, where calls between MPI's took 510 and 355 us. */
static gcclResult_t drain(gcclComm_t c, float* buf) {
  struct coll_args a = call_of(buf, IN_BAND_MAX_BYTES);
  double dropped;
  return time_calls(&c->ctx, &a, 1, &dropped);
}

gcclResult_t in_band_limit_measure(gcclComm_t c) {
  int p = c->nranks;
  if (c->ctx.local_size >= p || coll_pow2_floor(p) == p || !c->tp->agree_in_band || c->faults) return gcclSuccess;
  int64_t start = clock_now_ns();
  float* buf = malloc(2 * IN_BAND_MAX_BYTES); /* a send and a receive buffer */
  if (!buf) return err_set(gcclSystemError, "timing the in-band limit: out of memory");
  memset(buf, 0, 2 * IN_BAND_MAX_BYTES); /* paged in before any timing */
  /* From the largest size down, while the ring wins: on a fast link in band wins
   * at 64 KiB already, and one size is timed. */
  size_t limit = LIMIT_LEAST_BYTES;
  double t[2] = {0, 0};
  gcclResult_t res = drain(c, buf);
  for (size_t bytes = IN_BAND_MAX_BYTES; bytes > LIMIT_LEAST_BYTES && res == gcclSuccess; bytes /= 2) {
    res = time_size(c, buf, bytes, t);
    if (res == gcclSuccess && !(t[1] < LIMIT_MARGIN * t[0])) {
      limit = bytes;
      break;
    }
  }
  free(buf);
  GCCL_CHECK(res);
  c->ctx.net.in_band_max_bytes = limit;
  GCCL_INFO(LOG_INIT,
            "dense allreduce in band up to %zu bytes, the ring above (%d ranks; at the last size timed, in band %.0f "
            "us, the ring %.0f us; %.1f ms)",
            limit, p, t[0] * 1e6, t[1] * 1e6, (double)(clock_now_ns() - start) * 1e-6);
  return gcclSuccess;
}
