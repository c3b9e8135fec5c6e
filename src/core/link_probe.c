/* link_probe.c — what GCCL_COMPRESS=auto:SPEC knows of the link between nodes,
 * measured when an MPI communicator is made (dropin.h, dropin_measure).
 *
 * auto: used to assume 10 Gbit/s and 20 us unless told (GCCL_LINK_GBPS,
 * GCCL_LINK_US), wrong by 10x or more on a 1 or 100 Gbit/s network. Here rank 0
 * and the first rank of node 1 time round trips: PROBE_TRIPS of 8 bytes give
 * the latency (half the median round trip), then messages of doubling size,
 * each answered by 8 bytes, until one takes PROBE_LONG_NS, give the rate. The
 * whole probe stops within PROBE_BUDGET_NS. The initiator decides when to stop
 * and says so with a message of one byte, so the peer needs no schedule.
 *
 * Every rank must decide alike, so only rank 0's figures count: the link's, its
 * codec rates and its reduction rate travel to every rank (allgather_small),
 * replacing what each process measured for itself. */
#include "core/link_probe.h"

#include <stdlib.h>
#include <string.h>

#include "collectives/cost_model.h"
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

/* The peer: answers every message until the initiator's last. */
static gcclResult_t answer(struct transport* tp, int peer, unsigned char* buf, size_t cap) {
  for (;;) {
    size_t got = 0;
    GCCL_CHECK(recv_upto(tp, peer, buf, cap, &got));
    if (got == PROBE_DONE) return gcclSuccess;
    GCCL_CHECK(tp_send(tp, peer, buf, PROBE_ANSWER));
  }
}

static int compare_ns(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return x < y ? -1 : x > y;
}

/* Rank 0's side: the latency and the rate. */
static gcclResult_t initiate(struct transport* tp, int peer, unsigned char* buf, size_t cap, struct cost_link* link) {
  int64_t start = clock_now_ns(), trips[PROBE_TRIPS];
  memset(buf, 0, cap);
  for (int i = 0; i < PROBE_TRIPS; i++) GCCL_CHECK(round_trip(tp, peer, buf, PROBE_ANSWER, &trips[i]));
  qsort(trips, PROBE_TRIPS, sizeof *trips, compare_ns);
  double alpha = (double)trips[PROBE_TRIPS / 2] * 0.5e-9;
  size_t bytes = PROBE_FIRST_BYTES < cap ? PROBE_FIRST_BYTES : cap;
  int64_t rtt = 0;
  for (;;) {
    GCCL_CHECK(round_trip(tp, peer, buf, bytes, &rtt));
    int64_t spent = clock_now_ns() - start;
    if (rtt >= PROBE_LONG_NS || 2 * bytes > cap || spent + 3 * rtt > PROBE_BUDGET_NS) break;
    bytes *= 2;
  }
  GCCL_CHECK(tp_send(tp, peer, buf, PROBE_DONE));
  double one_way = (double)rtt * 1e-9 - 2 * alpha;
  link->alpha = alpha;
  link->beta = (one_way > 0 ? one_way : (double)rtt * 0.5e-9) / (double)bytes;
  return gcclSuccess;
}

gcclResult_t link_probe(gcclComm_t c, struct cost_link* link) {
  int first_of_node1 = c->ctx.local_size;
  if (first_of_node1 >= c->nranks) return gcclSuccess; /* one node: no link between nodes */
  unsigned char* buf = c->ctx.scratch;
  if (c->rank == 0) return initiate(c->tp, first_of_node1, buf, c->ctx.scratch_bytes, link);
  if (c->rank == first_of_node1) return answer(c->tp, 0, buf, c->ctx.scratch_bytes);
  return gcclSuccess;
}
