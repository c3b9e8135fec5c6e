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
 * each answered by 8 bytes, until one takes PROBE_LONG_NS, give the rate (one
 * trip that stalled, link_trip_ends_doubling, does not end them). Then both
 * send that size at once: how much longer that takes than one way is the pair's
 * duplex factor. The whole probe stops within PROBE_BUDGET_NS, a stalled trip
 * aside. The initiator decides what comes next and says so with a message of one
 * byte (done), two (both ways, the size last sent) or three (the same in pieces,
 * below), so the peer needs no schedule.
 *
 * Pieces. Over Open MPI's TCP a pair's long messages both ways at once took turns:
 * 32 MiB each way ran at 48% of the 1 Gbit/s test bed's link, where a plain
 * socket carrying both ways ran at 96%. A message above the eager limit (64 KiB)
 * waits for a handshake, and the peer's answer to it queues behind the peer's own
 * long message on their one connection. Pieces of PIECE_BYTES need no handshake
 * (95%). So the pair times both ways again in pieces, and messages between nodes
 * go in pieces (transport split_far) where that ran near full duplex and no slower
 * than whole messages: a network whose messages cost more than their bytes keeps
 * them whole (over shared memory, pieces both ways took 5x one way). Not "only
 * where faster": whole messages take turns in some exchanges, not all (one timing
 * on the test bed showed 1.18x, the next 1.58x), pieces in none. The timing runs
 * where PIECES_FIT times whole messages' both ways still fits the budget, and
 * only on a link slow enough for a piece to outlast several latencies
 * (link_pieces_keep_rate).
 * GCCL_MPI_PIECES on rank 0: 0 never, 1 always.
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
#include "common/env.h"
#include "common/log.h"
#include "common/result.h"
#include "core/comm.h"
#include "transport/transport.h"

#define PROBE_TRIPS 16
#define PROBE_FIRST_BYTES ((size_t)64 << 10)
#define PROBE_LONG_NS 4000000LL    /* 4 ms: long enough to see the rate through the latency */
#define PROBE_STALL 8              /* a trip over this many times its reference stalled */
#define PROBE_BUDGET_NS 30000000LL /* 30 ms for the link; the codec's rates take the rest of 50 */
#define PROBE_ANSWER 8
#define PROBE_DONE 1                   /* the initiator's last message */
#define PROBE_BOTH 2                   /* the next message of the last size goes both ways at once */
#define PROBE_PIECES 3                 /* the same, after messages between nodes are split into pieces */
#define PIECE_BYTES ((size_t)32 << 10) /* half Open MPI's TCP eager limit, its header included */
#define PIECES_SLOWER 1.1              /* pieces both ways at most this times whole messages'... */
#define PIECES_DUPLEX_MAX 1.3          /* ...and at most this times one way in whole messages */
#define PIECES_FIT 1.5                 /* timed where this times whole messages' both ways fits the budget */
#define PIECE_LATENCIES 4              /* pieces only where one takes this many latencies (link_pieces_keep_rate) */
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
static gcclResult_t answer(struct transport* tp, int peer, unsigned char* buf, size_t cap, int node_size) {
  size_t last = 0;
  for (;;) {
    size_t got = 0;
    int64_t t = 0;
    GCCL_CHECK(recv_upto(tp, peer, buf, cap / 2, &got));
    if (got == PROBE_DONE) return gcclSuccess;
    if (got == PROBE_PIECES) tp_split_far(tp, node_size, PIECE_BYTES);
    if (got == PROBE_BOTH || got == PROBE_PIECES) {
      GCCL_CHECK(both_ways(tp, peer, buf, last, &t));
      continue;
    }
    last = got;
    GCCL_CHECK(tp_send(tp, peer, buf, PROBE_ANSWER));
  }
}

int link_trip_ends_doubling(int64_t rtt, int64_t before) {
  return rtt >= PROBE_LONG_NS && rtt <= PROBE_STALL * before;
}

int64_t link_trip_reference(int64_t rtt, int64_t before) {
  int stalled = rtt >= PROBE_LONG_NS && !link_trip_ends_doubling(rtt, before);
  return stalled || rtt < 2 * before ? 2 * before : rtt;
}

static int compare_ns(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return x < y ? -1 : x > y;
}

int link_pieces_keep_rate(double alpha, double beta) {
  return (double)PIECE_BYTES * beta >= PIECE_LATENCIES * alpha;
}

/* After whole messages took `both` both ways: times the same in pieces, and
 * keeps them (out->piece_bytes, out->duplex) where they ran near full duplex and
 * no slower than whole messages, or where `forced`. */
static gcclResult_t try_pieces(struct transport* tp, int peer, unsigned char* buf, size_t bytes, int node_size,
                               int64_t both, int forced, struct link_figures* out) {
  int64_t both_p = 0;
  GCCL_CHECK(tp_send(tp, peer, buf, PROBE_PIECES));
  tp_split_far(tp, node_size, PIECE_BYTES);
  GCCL_CHECK(both_ways(tp, peer, buf, bytes, &both_p));
  /* Against one way in whole messages, as the rate is: a message of pieces needs
   * no handshake, so it passes a shaper's burst sooner and one way in pieces
   * looked faster than the link (1.3-1.65 Gbit/s on the 1 Gbit/s test bed). */
  double duplex = ((double)both_p * 1e-9 - out->alpha) / (out->beta * (double)bytes);
  if (!forced && (both_p > PIECES_SLOWER * both || duplex > PIECES_DUPLEX_MAX)) return gcclSuccess;
  out->duplex = duplex > 1.0 ? duplex : 1.0;
  out->piece_bytes = (int32_t)PIECE_BYTES;
  return gcclSuccess;
}

/* Rank 0's side: the latency, the rate, the duplex factor and the pieces. */
static gcclResult_t initiate(struct transport* tp, int peer, unsigned char* buf, size_t cap, int node_size,
                             struct link_figures* out) {
  int64_t start = clock_now_ns(), trips[PROBE_TRIPS];
  memset(buf, 0, cap);
  for (int i = 0; i < PROBE_TRIPS; i++) GCCL_CHECK(round_trip(tp, peer, buf, PROBE_ANSWER, &trips[i]));
  qsort(trips, PROBE_TRIPS, sizeof *trips, compare_ns);
  double alpha = (double)trips[PROBE_TRIPS / 2] * 0.5e-9;
  size_t half = cap / 2, bytes = PROBE_FIRST_BYTES < half ? PROBE_FIRST_BYTES : half;
  int64_t before = trips[PROBE_TRIPS / 2], rtt = 0, both = 0;
  for (;;) {
    GCCL_CHECK(round_trip(tp, peer, buf, bytes, &rtt));
    GCCL_TRACE(LOG_INIT, "link probe: %zu bytes there, %d back in %.0f us", bytes, PROBE_ANSWER, (double)rtt * 1e-3);
    int64_t spent = clock_now_ns() - start;
    int64_t took = link_trip_reference(rtt, before); /* what this size takes, a stall aside */
    if (link_trip_ends_doubling(rtt, before) || 2 * bytes > half || spent + 5 * took > PROBE_BUDGET_NS) break;
    before = took;
    bytes *= 2;
  }
  double one_way = (double)rtt * 1e-9 - 2 * alpha;
  if (one_way <= 0) one_way = (double)rtt * 0.5e-9;
  GCCL_CHECK(tp_send(tp, peer, buf, PROBE_BOTH));
  GCCL_CHECK(both_ways(tp, peer, buf, bytes, &both));
  double duplex = ((double)both * 1e-9 - alpha) / one_way; /* less the trigger's latency */
  out->alpha = alpha;
  out->beta = one_way / (double)bytes;
  out->duplex = duplex > 1.0 ? duplex : 1.0;
  out->measured = 1;
  int64_t pieces = env_int("GCCL_MPI_PIECES", -1); /* 0 never, 1 always, else measured */
  int fits = (double)(clock_now_ns() - start) + PIECES_FIT * (double)both <= (double)PROBE_BUDGET_NS;
  int worth = link_pieces_keep_rate(alpha, out->beta);
  if (tp_can_split_far(tp) && (pieces == 1 || (pieces != 0 && fits && worth)))
    GCCL_CHECK(try_pieces(tp, peer, buf, bytes, node_size, both, pieces == 1, out));
  return tp_send(tp, peer, buf, PROBE_DONE);
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
  int node_size = c->ctx.local_size;
  if (probe && c->rank == 0) GCCL_CHECK(initiate(c->tp, first_of_node1, buf, c->ctx.scratch_bytes, node_size, &mine));
  if (probe && c->rank == first_of_node1) GCCL_CHECK(answer(c->tp, 0, buf, c->ctx.scratch_bytes, node_size));
  struct link_figures all[c->nranks];
  GCCL_CHECK(tp_allgather_small(c->tp, &mine, sizeof mine, all));
  c->link = all[0];
  /* Rank 0's choice on every rank (the probing pair may have split already); no
   * message is in flight after the allgather. */
  if (tp_can_split_far(c->tp)) tp_split_far(c->tp, node_size, (size_t)c->link.piece_bytes);
  if (probe || named) tuner_net_from_link(&c->ctx.net, &c->link, c->nranks);
  GCCL_INFO(LOG_INIT,
            "the link between nodes: %.3g Gbit/s, %.3g us, a pair both ways %.2fx one way, messages %s (%s; %.1f "
            "ms): rhd up to %zu bytes, in-band halving above %zu",
            8e-9 / c->link.beta, c->link.alpha * 1e6, c->link.duplex, c->link.piece_bytes ? "in pieces" : "whole",
            c->link.measured ? "measured by rank 0"
            : named          ? "named by the environment"
                             : "not measured under GCCL_FAULT",
            (double)(clock_now_ns() - start) * 1e-6, c->ctx.net.rhd_max_bytes, c->ctx.net.halving_min_bytes);
  return gcclSuccess;
}
