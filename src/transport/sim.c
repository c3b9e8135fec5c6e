/* sim.c — the link model (sim.h): a decorator over the local transport that keeps
 * one virtual clock per rank.
 *
 * Clock. Every operation first charges the CPU time the calling thread spent since
 * the previous operation returned (CLOCK_THREAD_CPUTIME_ID): the rank's compute.
 * Time spent inside an operation (spinning, sleeping, the local transport's copy)
 * is not charged; the modelled transfer time replaces it. So each rank behaves as
 * if it had a core of its own, however many ranks share this machine's cores.
 *
 * Messages. A message of b bytes posted by src at its virtual time v to a dst on
 * another node goes through two full-duplex NICs at rate R. The sender's NIC
 * sends it in program order, which is the sender's virtual order:
 *     tx_start = max(v, tx_free[src])     tx_end = tx_free[src] = tx_start + b/R
 * and the sender's wait ends at tx_end. The receiver's NIC takes its b/R seconds
 * in the free gaps of dst's receive timeline from tx_start on; the message
 * arrives when the last of it has (never before tx_end) and is delivered a latency
 * later. So a rank's outgoing bytes share its link, and so do its incoming bytes.
 * The receive timeline is filled by the receiver itself, when its wait for the
 * message completes, in its own program order: filled at the send, it would
 * follow the order in which senders post on the wall clock, and a sender that
 * runs ahead (ranks share cores) would take link time that a message of an
 * earlier step needs. Filling gaps lets a message waited for late still use the
 * link time its virtual time reaches. The receiver's wait ends at the delivery
 * (or later, if its own clock is already past it). On the same node a message is
 * a copy at memory speed: delivered, and sent, at v + b/M.
 *
 * Matching. Messages of a (src, dst) pair complete in post order, so the k-th
 * receive dst posts from src is the k-th send: the sender queues each message's
 * timing on the pair's FIFO before it posts the message, the receiver numbers its
 * receives and looks the timing up when the wait completes.
 *
 * barrier and allgather_small end at the latest clock of all ranks plus one
 * latency when there is more than one node.
 *
 * Pacing: after a blocking operation a rank whose virtual clock is ahead of the
 * wall clock sleeps until they agree, so a caller timing with its own clock sees
 * the modelled link. The two clocks are set together at each operation's entry
 * (the wall clock's origin moved on, per rank, when it has run ahead): a rank's
 * virtual clock counts only its own CPU time, and where ranks outnumber cores,
 * or a rank waits on a late peer, the wall clock gains on it. Anchored once, at
 * the world's creation, every later call would start behind and never sleep,
 * and wall-clock timings would show the machine's memory copies instead of the
 * link. So every operation takes at least its modelled time on the wall. */
#include "transport/sim.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/result.h"
#include "transport/refcount.h"

/* Intra-node messages move at memory speed: one core's memcpy on a server reaches
 * about 10 GB/s. Cheap but not free, so a hierarchical algorithm still pays for
 * its intra-node steps. */
#define SIM_INTRA_BYTES_PER_S 10e9

/* One message of a pair, until the receiver's wait takes it. */
struct sim_msg {
  double start; /* inter-node: tx_start; intra-node: the send's virtual time */
  double span;  /* seconds on the link (inter-node) or of the copy (intra-node) */
  int inter;
  int consumed;
};

/* The FIFO of one (src, dst) pair; message number seq lives at msgs[seq % cap]. */
struct sim_pair {
  struct sim_msg* msgs;
  size_t cap;
  uint64_t head; /* oldest message whose receiver has not waited for it yet */
  uint64_t tail; /* messages posted */
};

/* A busy interval of a receiving NIC. */
struct sim_busy {
  double start, end;
};

/* A rank's receive timeline: busy intervals, sorted and disjoint. */
struct sim_rx {
  struct sim_busy* iv;
  size_t n, cap;
};

struct sim_world {
  pthread_mutex_t mu; /* guards everything below and every rank's bytes_sent */
  struct refcount refs;
  int nranks;
  int nodes;
  struct sim_config cfg;
  int64_t start_ns;       /* the wall clock at virtual time 0 */
  size_t first_cap;       /* a pair FIFO's first capacity: twice a rank's requests */
  double* vt;             /* [nranks] virtual clocks, seconds; each written by its rank only */
  double* tx_free;        /* [nranks] when each rank's NIC has sent all it was given */
  struct sim_rx* rx;      /* [nranks] receive timelines, each written by its rank */
  double* sync_vt;        /* [2][nranks] clocks at barrier entry, banks alternating per call */
  struct sim_pair* pairs; /* [src * nranks + dst] */
};

enum sim_req_kind { SIM_REQ_NONE = 0, SIM_REQ_SEND, SIM_REQ_RECV };

/* What the decorator remembers of an inner request until its wait. */
struct sim_req {
  enum sim_req_kind kind;
  int peer;
  uint64_t seq;  /* receive: its number among the receives from peer */
  double tx_end; /* send: when this rank's NIC has sent it */
};

struct sim_tp {
  struct transport base;
  struct transport* inner;
  struct sim_world* w;
  double* vt;          /* this rank's clock in the world: written under w->mu by this rank only */
  uint64_t bytes_sent; /* under w->mu, as the next */
  uint64_t inter_bytes_sent;
  double cpu_mark; /* the thread's CPU time when the last operation returned */
  pthread_t mark_thread;
  int marked;
  uint64_t* recv_posted; /* [nranks] receives posted from each peer */
  struct sim_req* reqs;  /* indexed by the inner transport's request handle */
  int nreqs;
  uint64_t sync_calls; /* barriers and allgather_smalls so far: picks the sync_vt bank */
  int64_t pace_origin_ns; /* the wall clock at this rank's virtual time 0, for pacing */
};

static struct sim_tp* st(struct transport* tp) {
  return (struct sim_tp*)tp;
}

static double dmax(double a, double b) {
  return a > b ? a : b;
}

/* ---- world ---------------------------------------------------------------------- */

/* Frees a world and whatever parts of it were allocated (calloc'd, so the rest are NULL). */
static void sim_world_free(struct sim_world* w) {
  size_t n = (size_t)w->nranks;
  if (w->pairs)
    for (size_t i = 0; i < n * n; i++) free(w->pairs[i].msgs);
  if (w->rx)
    for (size_t r = 0; r < n; r++) free(w->rx[r].iv);
  free(w->vt);
  free(w->tx_free);
  free(w->rx);
  free(w->sync_vt);
  free(w->pairs);
  free(w);
}

gcclResult_t sim_world_create(struct sim_world** out, int nranks, const struct sim_config* cfg) {
  *out = NULL;
  size_t n = (size_t)nranks;
  struct sim_world* w = calloc(1, sizeof *w);
  if (!w) return err_set(gcclSystemError, "out of memory creating the link model of %d ranks", nranks);
  w->vt = calloc(n, sizeof *w->vt);
  w->tx_free = calloc(n, sizeof *w->tx_free);
  w->rx = calloc(n, sizeof *w->rx);
  w->sync_vt = calloc(2 * n, sizeof *w->sync_vt);
  w->pairs = calloc(n * n, sizeof *w->pairs);
  w->nranks = nranks;
  if (!w->vt || !w->tx_free || !w->rx || !w->sync_vt || !w->pairs) {
    sim_world_free(w);
    return err_set(gcclSystemError, "out of memory creating the link model of %d ranks", nranks);
  }
  pthread_mutex_init(&w->mu, NULL);
  refcount_init(&w->refs, 1);
  w->cfg = *cfg;
  w->nodes = (nranks + cfg->ranks_per_node - 1) / cfg->ranks_per_node;
  w->first_cap = 2 * (size_t)(32 + 4 * nranks);
  w->start_ns = clock_now_ns();
  *out = w;
  return gcclSuccess;
}

void sim_world_unref(struct sim_world* w) {
  if (!w || !refcount_drop(&w->refs)) return;
  pthread_mutex_destroy(&w->mu);
  sim_world_free(w);
}

/* ---- pair FIFOs (world mutex held) ------------------------------------------------ */

static gcclResult_t pair_push(struct sim_world* w, struct sim_pair* p, struct sim_msg m) {
  if (p->tail - p->head == p->cap) { /* full: double it, messages keep their seq */
    size_t cap = p->cap ? 2 * p->cap : w->first_cap;
    struct sim_msg* msgs = calloc(cap, sizeof *msgs);
    if (!msgs) return err_set(gcclSystemError, "out of memory in the link model");
    for (uint64_t s = p->head; s < p->tail; s++) msgs[s % cap] = p->msgs[s % p->cap];
    free(p->msgs);
    p->msgs = msgs;
    p->cap = cap;
  }
  p->msgs[p->tail % p->cap] = m;
  p->tail++;
  return gcclSuccess;
}

/* Message seq, which the receiver has now waited for. */
static gcclResult_t pair_take(struct sim_pair* p, uint64_t seq, struct sim_msg* out) {
  if (seq < p->head || seq >= p->tail || p->msgs[seq % p->cap].consumed)
    return err_set(gcclInternalError, "link model: no timing for message %llu of a pair", (unsigned long long)seq);
  struct sim_msg* m = &p->msgs[seq % p->cap];
  *out = *m;
  m->consumed = 1;
  while (p->head < p->tail && p->msgs[p->head % p->cap].consumed) p->head++;
  return gcclSuccess;
}

/* ---- receive timelines (world mutex held) ------------------------------------------ */

/* Drops the intervals of dst's timeline that no message can still need: those
 * ending before `from` (the message being received), before every rank's clock
 * (a message posted from now on starts later) and before the start of every
 * message to dst not yet waited for. */
static void rx_prune(struct sim_world* w, int dst, double from) {
  struct sim_rx* rx = &w->rx[dst];
  double horizon = from;
  for (int r = 0; r < w->nranks; r++) horizon = w->vt[r] < horizon ? w->vt[r] : horizon;
  for (int src = 0; src < w->nranks; src++) {
    const struct sim_pair* p = &w->pairs[(size_t)src * (size_t)w->nranks + (size_t)dst];
    for (uint64_t q = p->head; q < p->tail; q++)
      if (!p->msgs[q % p->cap].consumed && p->msgs[q % p->cap].start < horizon) horizon = p->msgs[q % p->cap].start;
  }
  size_t drop = 0;
  while (drop < rx->n && rx->iv[drop].end <= horizon) drop++;
  if (drop == 0) return;
  memmove(rx->iv, rx->iv + drop, (rx->n - drop) * sizeof *rx->iv);
  rx->n -= drop;
}

/* Marks [a, b] busy; it lies in the gap before interval i. Returns the index of
 * the interval that now holds it. */
static gcclResult_t rx_insert(struct sim_rx* rx, size_t* i, double a, double b) {
  size_t k = *i;
  int join_prev = k > 0 && rx->iv[k - 1].end >= a;
  int join_next = k < rx->n && rx->iv[k].start <= b;
  if (join_prev && join_next) {
    rx->iv[k - 1].end = rx->iv[k].end;
    memmove(rx->iv + k, rx->iv + k + 1, (rx->n - k - 1) * sizeof *rx->iv);
    rx->n--;
    *i = k - 1;
  } else if (join_prev) {
    rx->iv[k - 1].end = b;
    *i = k - 1;
  } else if (join_next) {
    rx->iv[k].start = a;
  } else {
    if (rx->n == rx->cap) {
      size_t cap = rx->cap ? 2 * rx->cap : 16;
      struct sim_busy* iv = realloc(rx->iv, cap * sizeof *iv);
      if (!iv) return err_set(gcclSystemError, "out of memory in the link model");
      rx->iv = iv;
      rx->cap = cap;
    }
    memmove(rx->iv + k + 1, rx->iv + k, (rx->n - k) * sizeof *rx->iv);
    rx->iv[k] = (struct sim_busy){a, b};
    rx->n++;
  }
  return gcclSuccess;
}

/* Receives len seconds' worth of bytes on dst's link from `from` on, in the free
 * gaps; *end = when the last of them has arrived. */
static gcclResult_t rx_reserve(struct sim_world* w, int dst, double from, double len, double* end) {
  struct sim_rx* rx = &w->rx[dst];
  if (rx->n == rx->cap) rx_prune(w, dst, from);
  double s = from, left = len;
  size_t i = 0;
  /* Each turn ends the loop or moves s past a busy interval. */
  while (left > 0) {
    while (i < rx->n && rx->iv[i].end <= s) i++;
    if (i < rx->n && rx->iv[i].start <= s) { /* busy at s */
      s = rx->iv[i].end;
      continue;
    }
    if (i == rx->n || rx->iv[i].start - s >= left) { /* the rest fits in this gap */
      GCCL_CHECK(rx_insert(rx, &i, s, s + left));
      s += left;
      break;
    }
    double gap_end = rx->iv[i].start; /* fill the gap exactly: it joins the next interval */
    GCCL_CHECK(rx_insert(rx, &i, s, gap_end));
    left -= gap_end - s;
    s = gap_end;
  }
  *end = s;
  return gcclSuccess;
}

/* ---- the clock ---------------------------------------------------------------------- */

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Charges the compute since the last operation returned. A different thread (a
 * stream's worker after the caller's) has no mark to charge from. */
/* Moves the pacing origin on so that the wall clock is not ahead of the virtual
 * one (file comment, "Pacing"). *t->vt is written by this rank only. */
static void pace_anchor(struct sim_tp* t) {
  if (!t->w->cfg.pace) return;
  int64_t origin = clock_now_ns() - (int64_t)(*t->vt * 1e9);
  if (origin > t->pace_origin_ns) t->pace_origin_ns = origin;
}

static void op_enter(struct sim_tp* t) {
  if (t->marked && pthread_equal(t->mark_thread, pthread_self())) {
    double spent = thread_cpu_s() - t->cpu_mark;
    pthread_mutex_lock(&t->w->mu);
    *t->vt += spent;
    pthread_mutex_unlock(&t->w->mu);
  }
  pace_anchor(t);
}

static void op_leave(struct sim_tp* t) {
  t->mark_thread = pthread_self();
  t->marked = 1;
  t->cpu_mark = thread_cpu_s();
}

static void advance_to(struct sim_tp* t, double when) {
  pthread_mutex_lock(&t->w->mu);
  *t->vt = dmax(*t->vt, when);
  pthread_mutex_unlock(&t->w->mu);
}

/* Sleeps until the wall clock since this rank's pacing origin reaches its virtual clock. */
static void pace(struct sim_tp* t) {
  if (!t->w->cfg.pace) return;
  int64_t target = t->pace_origin_ns + (int64_t)(*t->vt * 1e9);
  if (clock_now_ns() >= target) return;
  struct timespec ts = {.tv_sec = target / 1000000000, .tv_nsec = target % 1000000000};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* ---- requests ------------------------------------------------------------------------- */

static gcclResult_t track(struct sim_tp* t, tp_req h, struct sim_req r) {
  if (h < 0) return err_set(gcclInternalError, "link model: invalid request handle %d", h);
  if (h >= t->nreqs) {
    int n = 2 * h + 2;
    struct sim_req* grown = realloc(t->reqs, (size_t)n * sizeof *grown);
    if (!grown) return err_set(gcclSystemError, "out of memory in the link model");
    memset(grown + t->nreqs, 0, (size_t)(n - t->nreqs) * sizeof *grown);
    t->reqs = grown;
    t->nreqs = n;
  }
  t->reqs[h] = r;
  return gcclSuccess;
}

/* ---- transport operations ------------------------------------------------------------- */

static gcclResult_t sim_isend(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* h) {
  struct sim_tp* t = st(tp);
  struct sim_world* w = t->w;
  int me = tp->rank;
  op_enter(t);
  double b = (double)bytes;
  struct sim_msg m = {.start = *t->vt, .span = b / SIM_INTRA_BYTES_PER_S};
  pthread_mutex_lock(&w->mu);
  if (me / w->cfg.ranks_per_node != peer / w->cfg.ranks_per_node) {
    m.inter = 1;
    m.start = dmax(*t->vt, w->tx_free[me]);
    m.span = w->cfg.link_bytes_per_s > 0 ? b / w->cfg.link_bytes_per_s : 0;
    w->tx_free[me] = m.start + m.span;
  }
  double tx_end = m.start + m.span;
  /* Queued before the message exists, so its receiver always finds it. A post
   * that then fails breaks the communicator (execute_collective aborts the transport),
   * so the pair's numbering never needs repair. */
  gcclResult_t res = pair_push(w, &w->pairs[(size_t)me * (size_t)w->nranks + (size_t)peer], m);
  if (res == gcclSuccess) t->bytes_sent += bytes;
  if (res == gcclSuccess && m.inter) t->inter_bytes_sent += bytes;
  pthread_mutex_unlock(&w->mu);
  if (res == gcclSuccess) res = t->inner->ops->isend(t->inner, peer, buf, bytes, h);
  if (res == gcclSuccess) res = track(t, *h, (struct sim_req){.kind = SIM_REQ_SEND, .peer = peer, .tx_end = tx_end});
  op_leave(t);
  return res;
}

static gcclResult_t sim_irecv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got, tp_req* h) {
  struct sim_tp* t = st(tp);
  op_enter(t);
  gcclResult_t res = got ? t->inner->ops->irecv_upto(t->inner, peer, buf, cap, got, h)
                         : t->inner->ops->irecv(t->inner, peer, buf, cap, h);
  if (res == gcclSuccess)
    res = track(t, *h, (struct sim_req){.kind = SIM_REQ_RECV, .peer = peer, .seq = t->recv_posted[peer]++});
  op_leave(t);
  return res;
}

static gcclResult_t sim_irecv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* h) {
  return sim_irecv_upto(tp, peer, buf, bytes, NULL, h);
}

static gcclResult_t sim_wait(struct transport* tp, tp_req h) {
  struct sim_tp* t = st(tp);
  struct sim_world* w = t->w;
  op_enter(t);
  struct sim_req q = {.kind = SIM_REQ_NONE};
  if (h >= 0 && h < t->nreqs) {
    q = t->reqs[h];
    t->reqs[h].kind = SIM_REQ_NONE;
  }
  gcclResult_t res = t->inner->ops->wait(t->inner, h);
  if (res == gcclSuccess && q.kind == SIM_REQ_SEND) advance_to(t, q.tx_end);
  if (res == gcclSuccess && q.kind == SIM_REQ_RECV) {
    struct sim_msg m = {0};
    double deliver_at = 0;
    pthread_mutex_lock(&w->mu);
    res = pair_take(&w->pairs[(size_t)q.peer * (size_t)w->nranks + (size_t)tp->rank], q.seq, &m);
    if (res == gcclSuccess && !m.inter) deliver_at = m.start + m.span;
    if (res == gcclSuccess && m.inter) res = rx_reserve(w, tp->rank, m.start, m.span, &deliver_at);
    if (res == gcclSuccess && m.inter) deliver_at += w->cfg.latency_s;
    *t->vt = dmax(*t->vt, deliver_at);
    pthread_mutex_unlock(&w->mu);
  }
  if (res == gcclSuccess) pace(t);
  op_leave(t);
  return res;
}

/* Publishes this rank's clock in the call's bank before the inner barrier; the
 * banks alternate, as local's allgather_small slots, so a bank is rewritten only
 * after every rank has read it. */
static double* sync_publish(struct sim_tp* t) {
  struct sim_world* w = t->w;
  double* bank = w->sync_vt + (size_t)(t->sync_calls++ & 1) * (size_t)w->nranks;
  pthread_mutex_lock(&w->mu);
  bank[t->base.rank] = *t->vt;
  pthread_mutex_unlock(&w->mu);
  return bank;
}

/* After the inner barrier: every rank leaves at the latest arrival, plus a latency
 * when the barrier crosses nodes. */
static void sync_finish(struct sim_tp* t, const double* bank) {
  struct sim_world* w = t->w;
  pthread_mutex_lock(&w->mu);
  double latest = *t->vt;
  for (int r = 0; r < w->nranks; r++) latest = dmax(latest, bank[r]);
  *t->vt = latest + (w->nodes > 1 ? w->cfg.latency_s : 0);
  pthread_mutex_unlock(&w->mu);
  pace(t);
}

static gcclResult_t sim_barrier(struct transport* tp) {
  struct sim_tp* t = st(tp);
  op_enter(t);
  double* bank = sync_publish(t);
  gcclResult_t res = t->inner->ops->barrier(t->inner);
  if (res == gcclSuccess) sync_finish(t, bank);
  op_leave(t);
  return res;
}

static gcclResult_t sim_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  struct sim_tp* t = st(tp);
  op_enter(t);
  double* bank = sync_publish(t);
  gcclResult_t res = t->inner->ops->allgather_small(t->inner, in, bytes, out);
  if (res == gcclSuccess) sync_finish(t, bank);
  op_leave(t);
  return res;
}

static void sim_cancel_all(struct transport* tp) {
  struct sim_tp* t = st(tp);
  t->inner->ops->cancel_all(t->inner);
  for (int i = 0; i < t->nreqs; i++) t->reqs[i].kind = SIM_REQ_NONE;
}

static void sim_abort(struct transport* tp, gcclResult_t reason) {
  st(tp)->inner->ops->abort(st(tp)->inner, reason);
}

static gcclResult_t sim_broken(struct transport* tp) {
  return st(tp)->inner->ops->broken(st(tp)->inner);
}

static void sim_destroy(struct transport* tp) {
  struct sim_tp* t = st(tp);
  t->inner->ops->destroy(t->inner);
  sim_world_unref(t->w);
  free(t->recv_posted);
  free(t->reqs);
  free(t);
}

static const struct transport_ops sim_ops = {
    .name = "local+link-model",
    .isend = sim_isend,
    .irecv = sim_irecv,
    .irecv_upto = sim_irecv_upto,
    .wait = sim_wait,
    .allgather_small = sim_allgather_small,
    .barrier = sim_barrier,
    .cancel_all = sim_cancel_all,
    .abort = sim_abort,
    .broken = sim_broken,
    .destroy = sim_destroy,
};

/* ---- creation and queries ---------------------------------------------------------- */

gcclResult_t sim_transport_create(struct transport** out, struct transport* inner, struct sim_world* w) {
  *out = NULL;
  struct sim_tp* t = calloc(1, sizeof *t);
  if (t) t->recv_posted = calloc((size_t)inner->nranks, sizeof *t->recv_posted);
  if (t) t->nreqs = 32 + 4 * inner->nranks; /* the local transport's pool */
  if (t) t->reqs = calloc((size_t)t->nreqs, sizeof *t->reqs);
  if (!t || !t->recv_posted || !t->reqs) {
    if (t) free(t->recv_posted);
    if (t) free(t->reqs);
    free(t);
    return err_set(gcclSystemError, "out of memory creating the link model");
  }
  t->base.ops = &sim_ops;
  t->base.rank = inner->rank;
  t->base.nranks = inner->nranks;
  /* The direct algorithms read peers' buffers in place: that would bypass the link. */
  t->base.shares_address_space = w->nodes > 1 ? 0 : inner->shares_address_space;
  t->base.caller_thread_only = inner->caller_thread_only;
  t->inner = inner;
  t->w = w;
  t->vt = &w->vt[inner->rank];
  t->pace_origin_ns = w->start_ns;
  refcount_take(&w->refs);
  if (inner->rank == 0)
    GCCL_INFO(LOG_INIT | LOG_TRANSPORT,
              "link model: %d ranks on %d virtual nodes of %d, link %.6g Gbit/s%s, latency %.6g us, "
              "intra-node %.3g GB/s, pacing %s",
              inner->nranks, w->nodes, w->cfg.ranks_per_node, w->cfg.link_bytes_per_s * 8 / 1e9,
              w->cfg.link_bytes_per_s > 0 ? "" : " (unlimited)", w->cfg.latency_s * 1e6, SIM_INTRA_BYTES_PER_S / 1e9,
              w->cfg.pace ? "on" : "off (GCCL_SIM_LINK_PACE=0)");
  *out = &t->base;
  return gcclSuccess;
}

gcclResult_t sim_transport_join(struct transport** out, struct transport* inner, const struct sim_config* cfg) {
  *out = NULL;
  struct sim_world* mine = NULL;
  gcclResult_t made = gcclSuccess;
  if (inner->rank == 0) {
    made = sim_world_create(&mine, inner->nranks, cfg);
    /* One reference per rank, taken below. */
    if (made == gcclSuccess) refcount_init(&mine->refs, inner->nranks);
  }
  struct sim_world* all[inner->nranks];
  gcclResult_t res = inner->ops->allgather_small(inner, &mine, sizeof mine, all);
  /* A rank whose exchange failed cannot tell whether the others got the world
   * (the last one into a barrier may pass it as the first times out), so rank 0
   * drops only its own reference; the communicator is broken either way. */
  if (res != gcclSuccess) {
    sim_world_unref(mine);
    return res;
  }
  struct sim_world* w = all[0];
  if (!w) return made != gcclSuccess ? made : err_set(gcclSystemError, "rank 0 could not create the link model");
  res = sim_transport_create(out, inner, w);
  sim_world_unref(w); /* the decorator took its own */
  return res;
}

int sim_transport_is(const struct transport* tp) {
  return tp && tp->ops == &sim_ops;
}

double sim_transport_time(struct transport* tp) {
  struct sim_tp* t = st(tp);
  pthread_mutex_lock(&t->w->mu);
  double vt = *t->vt;
  pthread_mutex_unlock(&t->w->mu);
  return vt;
}

void sim_transport_bytes_sent(struct transport* tp, uint64_t* all, uint64_t* inter_node) {
  struct sim_tp* t = st(tp);
  pthread_mutex_lock(&t->w->mu);
  *all = t->bytes_sent;
  *inter_node = t->inter_bytes_sent;
  pthread_mutex_unlock(&t->w->mu);
}
