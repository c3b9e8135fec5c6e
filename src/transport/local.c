/* local.c — the local transport: ranks are threads of one process.
 *
 * A send is a descriptor (address, bytes) queued on the (sender, receiver)
 * channel; the receiver copies straight out of the sender's buffer — one copy per
 * message — and then completes both requests. The sender's buffer is therefore
 * read until its request completes (rendezvous semantics, like a synchronous
 * MPI send). Every rank progresses its pending receives while it waits for
 * anything, so a rank waiting on its own send never blocks a peer that waits on
 * it (the ring's sendrecv pattern).
 *
 * One mutex per world guards all queues; each rank sleeps on its own condition
 * variable after a short spin of sched_yield, which matters on this 2-core machine
 * where ranks often outnumber cores. */
#include "transport/local.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#include "common/clock.h"
#include "common/log.h"
#include "common/result.h"
#include "transport/refcount.h"

/* Yields before sleeping on the condition variable: a futex wake costs several
 * microseconds, a yield about one, and most waits here are short. */
#define LT_SPIN_YIELDS 200
/* A barrier first spins on its generation with the CPU's pause hint: when every
 * rank has a core, the last arrival lands within a few hundred nanoseconds, far
 * below a yield or a futex wake. Kept short, since with more ranks than cores the
 * rank being waited for may need this very core. */
#define LT_SPIN_PAUSES 512

enum lt_state { LT_FREE = 0, LT_POSTED, LT_COPYING, LT_DONE };

struct lt_req {
  struct lt_req* next; /* link in a channel queue (sends) or the pending-receive list */
  enum lt_state state;
  int is_send;
  int peer;
  const void* sbuf;
  void* rbuf;
  size_t bytes;  /* exact size; for a receive with got != NULL, its capacity */
  size_t* got;   /* irecv_upto: where the sent size goes */
  gcclResult_t result;
};

struct lt_rank {
  pthread_cond_t cv;
  atomic_uint events;           /* bumped on every wake-up aimed at this rank */
  struct lt_req* pool;          /* this rank's request handles */
  int pool_size;
  struct lt_req *recv_head, *recv_tail; /* posted receives, in post order */
  int inflight_reads;           /* peers copying out of this rank's send buffers now */
};

struct lt_chan {
  struct lt_req *head, *tail;
};

struct local_world {
  int nranks;
  struct refcount refs; /* one per holder: each endpoint, and its creator until it drops it */
  pthread_mutex_t mu;
  atomic_int broken;
  gcclResult_t reason;
  atomic_int bar_arrived;  /* ranks inside the current barrier */
  atomic_uint_fast64_t bar_gen; /* barriers completed */
  atomic_int bar_sleepers; /* ranks waiting on their condition variable */
  int spin_pauses;         /* LT_SPIN_PAUSES, or 0 when ranks outnumber cores */
  unsigned char* slots; /* [2][nranks][TP_SMALL_MAX] for allgather_small */
  struct lt_chan* chans; /* [src * nranks + dst] */
  struct lt_rank ranks[];
};

struct local_tp {
  struct transport base;
  struct local_world* w;
  int64_t timeout_ns;
  uint64_t small_calls;
};

static struct local_tp* lt(struct transport* tp) { return (struct local_tp*)tp; }

/* ---- world ---------------------------------------------------------------- */

gcclResult_t local_world_create(struct local_world** out, int nranks) {
  *out = NULL;
  size_t n = (size_t)nranks;
  struct local_world* w = calloc(1, sizeof *w + n * sizeof(struct lt_rank));
  if (!w) return err_set(gcclSystemError, "out of memory creating a local world of %d ranks", nranks);
  w->nranks = nranks;
  refcount_init(&w->refs, 1);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  w->spin_pauses = (cores > 0 && nranks <= cores) ? LT_SPIN_PAUSES : 0;
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  for (int r = 0; r < nranks; r++) pthread_cond_init(&w->ranks[r].cv, &ca);
  pthread_condattr_destroy(&ca);
  w->chans = calloc(n * n, sizeof *w->chans);
  w->slots = calloc(2 * n, TP_SMALL_MAX);
  int pool_size = 32 + 4 * nranks; /* linear algorithms post one request per peer */
  for (int r = 0; r < nranks; r++) {
    w->ranks[r].pool = calloc((size_t)pool_size, sizeof(struct lt_req));
    w->ranks[r].pool_size = pool_size;
  }
  int ok = w->chans && w->slots;
  for (int r = 0; r < nranks; r++) ok = ok && w->ranks[r].pool;
  if (!ok) {
    local_world_unref(w);
    return err_set(gcclSystemError, "out of memory creating a local world of %d ranks", nranks);
  }
  *out = w;
  return gcclSuccess;
}

void local_world_ref(struct local_world* w) {
  refcount_take(&w->refs);
}

void local_world_unref(struct local_world* w) {
  if (!w || !refcount_drop(&w->refs)) return;
  pthread_mutex_destroy(&w->mu);
  for (int r = 0; r < w->nranks; r++) pthread_cond_destroy(&w->ranks[r].cv);
  for (int r = 0; r < w->nranks; r++) free(w->ranks[r].pool);
  free(w->chans);
  free(w->slots);
  free(w);
}

/* ---- waking and waiting (world mutex held) ---------------------------------- */

static void wake(struct local_world* w, int r) {
  atomic_fetch_add(&w->ranks[r].events, 1);
  pthread_cond_signal(&w->ranks[r].cv);
}

static void wake_all(struct local_world* w) {
  for (int r = 0; r < w->nranks; r++) {
    atomic_fetch_add(&w->ranks[r].events, 1);
    pthread_cond_broadcast(&w->ranks[r].cv);
  }
}

static void break_world(struct local_world* w, gcclResult_t reason) {
  if (!atomic_load(&w->broken)) {
    w->reason = reason;
    atomic_store(&w->broken, 1);
  }
  wake_all(w);
}

/* Sleeps until something is aimed at rank `me` (spinning first), or fails with
 * gcclRemoteError if the world broke, or gcclTimeout past the deadline. */
static gcclResult_t block(struct local_tp* t, int64_t deadline_ns, int* spins) {
  struct local_world* w = t->w;
  struct lt_rank* me = &w->ranks[t->base.rank];
  if (atomic_load(&w->broken))
    return err_set(gcclRemoteError, "a peer failed or aborted the communicator (%s)", gcclGetErrorString(w->reason));
  int64_t now = clock_now_ns();
  if (now >= deadline_ns) {
    break_world(w, gcclTimeout);
    return err_set(gcclTimeout, "rank %d waited %lld ms for a peer (GCCL_TIMEOUT_MS)", t->base.rank,
                   (long long)(t->timeout_ns / 1000000));
  }
  if (*spins < LT_SPIN_YIELDS) {
    unsigned seen = atomic_load(&me->events);
    pthread_mutex_unlock(&w->mu);
    for (; *spins < LT_SPIN_YIELDS && atomic_load(&me->events) == seen; ++*spins) sched_yield();
    pthread_mutex_lock(&w->mu);
    return gcclSuccess;
  }
  int64_t until = deadline_ns < now + 100000000 ? deadline_ns : now + 100000000;
  struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
  pthread_cond_timedwait(&me->cv, &w->mu, &ts);
  return gcclSuccess;
}

/* The error a rank gets once the world is broken. */
static gcclResult_t lt_fail_broken(struct local_tp* t) {
  pthread_mutex_lock(&t->w->mu);
  gcclResult_t reason = t->w->reason;
  pthread_mutex_unlock(&t->w->mu);
  return err_set(gcclRemoteError, "a peer failed or aborted the communicator (%s)", gcclGetErrorString(reason));
}

/* ---- requests ---------------------------------------------------------------- */

static struct lt_req* req_get(struct local_tp* t, tp_req h) {
  struct lt_rank* me = &t->w->ranks[t->base.rank];
  return (h >= 0 && h < me->pool_size) ? &me->pool[h] : NULL;
}

static gcclResult_t req_alloc(struct local_tp* t, tp_req* h) {
  struct lt_rank* me = &t->w->ranks[t->base.rank];
  for (int i = 0; i < me->pool_size; i++)
    if (me->pool[i].state == LT_FREE) {
      memset(&me->pool[i], 0, sizeof me->pool[i]);
      me->pool[i].state = LT_POSTED;
      *h = i;
      return gcclSuccess;
    }
  return err_set(gcclInternalError, "rank %d has more than %d requests outstanding", t->base.rank, me->pool_size);
}

/* Matches this rank's posted receives with queued sends, in post order, and does
 * the copies. The mutex is released around each memcpy. */
static void progress(struct local_tp* t) {
  struct local_world* w = t->w;
  int self = t->base.rank;
  struct lt_rank* me = &w->ranks[self];
  for (struct lt_req *prev = NULL, *r = me->recv_head; r;) {
    struct lt_chan* ch = &w->chans[(size_t)r->peer * (size_t)w->nranks + (size_t)self];
    struct lt_req* s = ch->head;
    if (!s) {
      prev = r;
      r = r->next;
      continue;
    }
    /* Dequeue both, copy without the lock, complete both. */
    ch->head = s->next;
    if (!ch->head) ch->tail = NULL;
    if (prev) prev->next = r->next;
    else me->recv_head = r->next;
    if (me->recv_tail == r) me->recv_tail = prev;
    s->state = r->state = LT_COPYING;
    w->ranks[r->peer].inflight_reads++;
    gcclResult_t res = gcclSuccess;
    pthread_mutex_unlock(&w->mu);
    if (r->got ? s->bytes > r->bytes : s->bytes != r->bytes)
      res = err_set(gcclInternalError, "rank %d sent %zu bytes, rank %d expected %s%zu", r->peer, s->bytes, self,
                    r->got ? "at most " : "", r->bytes);
    else if (s->bytes)
      memcpy(r->rbuf, s->sbuf, s->bytes);
    if (res == gcclSuccess && r->got) *r->got = s->bytes;
    pthread_mutex_lock(&w->mu);
    s->result = r->result = res;
    s->state = r->state = LT_DONE;
    w->ranks[r->peer].inflight_reads--;
    wake(w, r->peer);
    /* The list may have changed while unlocked only by this thread: restart. */
    prev = NULL;
    r = me->recv_head;
  }
}

/* Withdraws every request of this rank and waits until no peer reads its buffers. */
static void cancel_locked(struct local_tp* t) {
  struct local_world* w = t->w;
  int self = t->base.rank;
  struct lt_rank* me = &w->ranks[self];
  me->recv_head = me->recv_tail = NULL;
  for (int d = 0; d < w->nranks; d++) {
    struct lt_chan* ch = &w->chans[(size_t)self * (size_t)w->nranks + (size_t)d];
    ch->head = ch->tail = NULL; /* only this rank's sends live on its outgoing channels */
  }
  while (me->inflight_reads > 0) pthread_cond_wait(&me->cv, &w->mu);
  for (int i = 0; i < me->pool_size; i++) me->pool[i].state = LT_FREE;
}

/* ---- transport operations -------------------------------------------------------- */

static gcclResult_t lt_isend(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* h) {
  struct local_tp* t = lt(tp);
  struct local_world* w = t->w;
  pthread_mutex_lock(&w->mu);
  gcclResult_t res = req_alloc(t, h);
  if (res == gcclSuccess) {
    struct lt_req* s = &w->ranks[tp->rank].pool[*h];
    s->is_send = 1;
    s->peer = peer;
    s->sbuf = buf;
    s->bytes = bytes;
    struct lt_chan* ch = &w->chans[(size_t)tp->rank * (size_t)w->nranks + (size_t)peer];
    if (ch->tail) ch->tail->next = s;
    else ch->head = s;
    ch->tail = s;
    wake(w, peer);
  }
  pthread_mutex_unlock(&w->mu);
  return res;
}

static gcclResult_t lt_irecv_upto(struct transport* tp, int peer, void* buf, size_t bytes, size_t* got, tp_req* h) {
  struct local_tp* t = lt(tp);
  struct local_world* w = t->w;
  pthread_mutex_lock(&w->mu);
  gcclResult_t res = req_alloc(t, h);
  if (res == gcclSuccess) {
    struct lt_rank* me = &w->ranks[tp->rank];
    struct lt_req* r = &me->pool[*h];
    r->peer = peer;
    r->rbuf = buf;
    r->bytes = bytes;
    r->got = got;
    if (me->recv_tail) me->recv_tail->next = r;
    else me->recv_head = r;
    me->recv_tail = r;
  }
  pthread_mutex_unlock(&w->mu);
  return res;
}

static gcclResult_t lt_irecv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* h) {
  return lt_irecv_upto(tp, peer, buf, bytes, NULL, h);
}

static gcclResult_t lt_wait(struct transport* tp, tp_req h) {
  struct local_tp* t = lt(tp);
  struct local_world* w = t->w;
  struct lt_req* q = req_get(t, h);
  if (!q) return err_set(gcclInternalError, "wait on an invalid request handle %d", h);
  int64_t deadline = clock_now_ns() + t->timeout_ns;
  int spins = 0;
  gcclResult_t res = gcclSuccess;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    if (q->state == LT_FREE) { /* withdrawn by an earlier failure */
      res = err_set(atomic_load(&w->broken) ? gcclRemoteError : gcclInternalError, "request was withdrawn");
      break;
    }
    progress(t);
    if (q->state == LT_DONE) {
      res = q->result;
      q->state = LT_FREE;
      break;
    }
    res = block(t, deadline, &spins);
    if (res != gcclSuccess) {
      cancel_locked(t);
      break;
    }
  }
  pthread_mutex_unlock(&w->mu);
  return res;
}

/* Sense by generation: the last rank to arrive resets the count and advances the
 * generation; the others wait for the generation to move. The fast path takes no
 * lock; a rank that has to sleep announces itself in bar_sleepers, and the last
 * arrival, which reads bar_sleepers after advancing the generation (both seq_cst),
 * then wakes everyone under the mutex. */
static gcclResult_t lt_barrier(struct transport* tp) {
  struct local_tp* t = lt(tp);
  struct local_world* w = t->w;
  if (atomic_load(&w->broken)) return lt_fail_broken(t);
  uint64_t gen = atomic_load(&w->bar_gen);
  if (atomic_fetch_add(&w->bar_arrived, 1) == w->nranks - 1) {
    atomic_store(&w->bar_arrived, 0);
    atomic_store(&w->bar_gen, gen + 1);
    if (atomic_load(&w->bar_sleepers)) {
      pthread_mutex_lock(&w->mu);
      wake_all(w);
      pthread_mutex_unlock(&w->mu);
    }
    return gcclSuccess;
  }
  for (int i = 0; i < w->spin_pauses; i++) {
    if (atomic_load_explicit(&w->bar_gen, memory_order_acquire) != gen) return gcclSuccess;
    cpu_relax();
  }
  int64_t deadline = clock_now_ns() + t->timeout_ns;
  int spins = 0;
  gcclResult_t res = gcclSuccess;
  pthread_mutex_lock(&w->mu);
  atomic_fetch_add(&w->bar_sleepers, 1);
  while (atomic_load(&w->bar_gen) == gen && (res = block(t, deadline, &spins)) == gcclSuccess) {
  }
  atomic_fetch_sub(&w->bar_sleepers, 1);
  pthread_mutex_unlock(&w->mu);
  return res;
}

/* Slots alternate between two banks: a rank can only reuse a bank after every
 * rank passed the next call's barrier, hence after they all finished reading it. */
static gcclResult_t lt_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  struct local_tp* t = lt(tp);
  struct local_world* w = t->w;
  if (bytes > TP_SMALL_MAX) return err_set(gcclInternalError, "allgather_small of %zu bytes", bytes);
  unsigned char* bank = w->slots + (size_t)(t->small_calls++ & 1) * (size_t)w->nranks * TP_SMALL_MAX;
  memcpy(bank + (size_t)tp->rank * TP_SMALL_MAX, in, bytes);
  GCCL_CHECK(lt_barrier(tp));
  for (int r = 0; r < w->nranks; r++) memcpy((char*)out + (size_t)r * bytes, bank + (size_t)r * TP_SMALL_MAX, bytes);
  return gcclSuccess;
}

static void lt_cancel_all(struct transport* tp) {
  struct local_world* w = lt(tp)->w;
  pthread_mutex_lock(&w->mu);
  cancel_locked(lt(tp));
  pthread_mutex_unlock(&w->mu);
}

static void lt_abort(struct transport* tp, gcclResult_t reason) {
  struct local_world* w = lt(tp)->w;
  pthread_mutex_lock(&w->mu);
  break_world(w, reason);
  pthread_mutex_unlock(&w->mu);
}

static gcclResult_t lt_broken(struct transport* tp) {
  struct local_world* w = lt(tp)->w;
  if (!atomic_load(&w->broken)) return gcclSuccess;
  pthread_mutex_lock(&w->mu);
  gcclResult_t r = w->reason;
  pthread_mutex_unlock(&w->mu);
  return r;
}

static void lt_destroy(struct transport* tp) {
  lt_cancel_all(tp);
  local_world_unref(lt(tp)->w);
  free(tp);
}

static const struct transport_ops local_ops = {
    .name = "local",
    .isend = lt_isend,
    .irecv = lt_irecv,
    .irecv_upto = lt_irecv_upto,
    .wait = lt_wait,
    .allgather_small = lt_allgather_small,
    .barrier = lt_barrier,
    .cancel_all = lt_cancel_all,
    .abort = lt_abort,
    .broken = lt_broken,
    .destroy = lt_destroy,
};

gcclResult_t local_transport_create(struct transport** out, struct local_world* w, int rank, int64_t timeout_ms) {
  *out = NULL;
  struct local_tp* t = calloc(1, sizeof *t);
  if (!t) return err_set(gcclSystemError, "out of memory creating a transport");
  t->base.ops = &local_ops;
  t->base.rank = rank;
  t->base.nranks = w->nranks;
  t->base.shares_address_space = 1;
  t->w = w;
  t->timeout_ns = timeout_ms * 1000000;
  local_world_ref(w);
  *out = &t->base;
  return gcclSuccess;
}
