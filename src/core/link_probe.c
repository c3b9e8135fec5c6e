/* link_probe.c — the network between nodes, measured when an MPI communicator
 * whose ranks span nodes is made (link_probe.h).
 *
 * What it decides: the tuner's crossovers for a dense allreduce across nodes
 * (tuner_net_from_link: rhd or the ring, in-band doubling or halving), and the
 * link that GCCL_COMPRESS=auto:SPEC's model decides with. Both had assumed what
 * held on shared memory or a 10 Gbit/s, 20 us default, wrong by 10x or more on
 * a 1 or 100 Gbit/s network.
 *
 * Rank 0 and the first rank of node 1 time round trips: PROBE_TRIPS of 8 bytes
 * give the latency (half the median round trip), then messages of doubling size,
 * each answered by 8 bytes, until one takes PROBE_LONG_NS, give the rate. Then both
 * send that size at once: how much longer that takes than one way is the pair's
 * duplex factor (over one TCP connection on the test bed, 1.2-1.5x). The whole
 * probe stops within PROBE_BUDGET_NS. The initiator decides what comes next and
 * says so with a message of one byte (done) or two (both ways, the size last
 * sent), so the peer needs no schedule.
 *
 * Every rank must decide alike, so only rank 0's figures count: they travel to
 * every rank (allgather_small). GCCL_LINK_GBPS (and GCCL_LINK_US) name the link
 * instead, full duplex; under GCCL_FAULT nothing is measured (lost probe messages
 * would fail the creation), and the defaults stay. */
#include "core/link_probe.h"

#include <stdlib.h>
#include <string.h>

#include "collectives/cost_model.h"
#include "collectives/tuner.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/result.h"
#include "core/comm.h"
#include "transport/transport.h"

#define PROBE_TRIPS 16
#define PROBE_FIRST_BYTES ((size_t)64 << 10)
#define PROBE_LONG_NS 4000000LL    /* 4 ms: long enough to see the rate through the latency */
#define PROBE_BUDGET_NS 30000000LL /* 30 ms for the link; the codec's rates take the rest of 50 */
#define PROBE_ANSWER 8
#define PROBE_DONE 1 /* the initiator's last message */
#define PROBE_BOTH 2 /* the next message of the last size goes both ways at once */
_Static_assert(sizeof(struct link_figures) <= TP_SMALL_MAX, "rank 0's figures travel by allgather_small");

static gcclResult_t recv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got) {
  tp_req req;
  GCCL_CHECK(tp_irecv_upto(tp, peer, buf, cap, got, &req));
  return tp_wait(tp, req);
}

/* The initiator's round trip of `bytes` (nanoseconds in *rtt). */
static gcclResult_t round_trip(struct transport* tp, int peer, unsigned char* buf, size_t bytes, int64_t* rtt) {
  int64_t t0 = clock_now_ns();
  GCCL_CHECK(tp_send(tp, peer, buf, bytes));
  GCCL_CHECK(tp_recv(tp, peer, buf, PROBE_ANSWER));
  *rtt = clock_now_ns() - t0;
  return gcclSuccess;
}

/* Both ranks send `bytes` at once and wait for both messages (nanoseconds in *t). */
static gcclResult_t both_ways(struct transport* tp, int peer, unsigned char* buf, size_t bytes, int64_t* t) {
  tp_req reqs[2];
  int64_t t0 = clock_now_ns();
  GCCL_CHECK(tp_irecv(tp, peer, buf + bytes, bytes, &reqs[0]));
  GCCL_CHECK(tp_isend(tp, peer, buf, bytes, &reqs[1]));
  GCCL_CHECK(tp_wait(tp, reqs[0]));
  GCCL_CHECK(tp_wait(tp, reqs[1]));
  *t = clock_now_ns() - t0;
  return gcclSuccess;
}

/* The peer: answers every message until the initiator's last. */
static gcclResult_t answer(struct transport* tp, int peer, unsigned char* buf, size_t cap) {
  size_t last = 0;
  for (;;) {
    size_t got = 0;
    int64_t t = 0;
    GCCL_CHECK(recv_upto(tp, peer, buf, cap / 2, &got));
    if (got == PROBE_DONE) return gcclSuccess;
    if (got == PROBE_BOTH) {
      GCCL_CHECK(both_ways(tp, peer, buf, last, &t));
      continue;
    }
    last = got;
    GCCL_CHECK(tp_send(tp, peer, buf, PROBE_ANSWER));
  }
}

static int compare_ns(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return x < y ? -1 : x > y;
}

/* Rank 0's side: the latency, the rate and the duplex factor. */
static gcclResult_t initiate(struct transport* tp, int peer, unsigned char* buf, size_t cap, struct link_figures* out) {
  int64_t start = clock_now_ns(), trips[PROBE_TRIPS];
  memset(buf, 0, cap);
  for (int i = 0; i < PROBE_TRIPS; i++) GCCL_CHECK(round_trip(tp, peer, buf, PROBE_ANSWER, &trips[i]));
  qsort(trips, PROBE_TRIPS, sizeof *trips, compare_ns);
  double alpha = (double)trips[PROBE_TRIPS / 2] * 0.5e-9;
  size_t half = cap / 2, bytes = PROBE_FIRST_BYTES < half ? PROBE_FIRST_BYTES : half;
  int64_t rtt = 0, both = 0;
  for (;;) {
    GCCL_CHECK(round_trip(tp, peer, buf, bytes, &rtt));
    int64_t spent = clock_now_ns() - start;
    if (rtt >= PROBE_LONG_NS || 2 * bytes > half || spent + 5 * rtt > PROBE_BUDGET_NS) break;
    bytes *= 2;
  }
  double one_way = (double)rtt * 1e-9 - 2 * alpha;
  if (one_way <= 0) one_way = (double)rtt * 0.5e-9;
  GCCL_CHECK(tp_send(tp, peer, buf, PROBE_BOTH));
  GCCL_CHECK(both_ways(tp, peer, buf, bytes, &both));
  GCCL_CHECK(tp_send(tp, peer, buf, PROBE_DONE));
  double duplex = ((double)both * 1e-9 - alpha) / one_way; /* less the trigger's latency */
  out->alpha = alpha;
  out->beta = one_way / (double)bytes;
  out->duplex = duplex > 1.0 ? duplex : 1.0;
  out->measured = 1;
  return gcclSuccess;
}

gcclResult_t link_measure(gcclComm_t c) {
  int first_of_node1 = c->ctx.local_size;
  if (first_of_node1 >= c->nranks) return gcclSuccess; /* one node: no link between nodes */
  int64_t start = clock_now_ns();
  struct cost_model env;
  cost_model_links(&env, c->nranks, c->ctx.local_size);
  struct link_figures mine = {.alpha = env.inter.alpha, .beta = env.inter.beta, .duplex = 1.0};
  int named = cost_model_link_from_env(), probe = !named && !c->faults;
  unsigned char* buf = c->ctx.scratch;
  if (probe && c->rank == 0) GCCL_CHECK(initiate(c->tp, first_of_node1, buf, c->ctx.scratch_bytes, &mine));
  if (probe && c->rank == first_of_node1) GCCL_CHECK(answer(c->tp, 0, buf, c->ctx.scratch_bytes));
  struct link_figures all[c->nranks];
  GCCL_CHECK(tp_allgather_small(c->tp, &mine, sizeof mine, all));
  c->link = all[0];
  if (probe || named) tuner_net_from_link(&c->ctx.net, &c->link, c->nranks);
  GCCL_INFO(LOG_INIT,
            "the link between nodes: %.3g Gbit/s, %.3g us, a pair both ways %.2fx one way (%s; %.1f ms): rhd up to "
            "%zu bytes, in-band halving above %zu",
            8e-9 / c->link.beta, c->link.alpha * 1e6, c->link.duplex,
            c->link.measured ? "measured by rank 0"
            : named          ? "named by the environment"
                             : "not measured under GCCL_FAULT",
            (double)(clock_now_ns() - start) * 1e-6, c->ctx.net.rhd_max_bytes, c->ctx.net.halving_min_bytes);
  return gcclSuccess;
}
