/* mpi.c — the MPI transport (mpi.h): gccl's messages on a private communicator.
 * This file holds its operations, its waits, its failure and its creation; the
 * messages themselves (requests in chunks, on lanes) are mpi_lanes.c's.
 *
 * Waiting. MPI progresses only inside MPI calls. A wait polls MPI_Test on its own
 * request, on the lanes' chunked messages and on the control receive, and yields
 * the core between polls (ranks outnumber cores on the test machines). Between
 * slices of codec work, schedules call progress (one such poll, no waiting), so a
 * peer's large message, which needs this rank's answer to its handshake, starts
 * flowing when it arrives instead of when this rank next waits.
 *
 * Failure. Every rank keeps one receive posted on the control tag from any
 * source. A rank whose wait fails, or that aborts, sends a control message to
 * every peer without waiting for it, so peers fail at their next poll instead of
 * after the timeout. Non-blocking collectives cannot be cancelled: one that
 * failed stays pending on buffers the transport owns, so MPI may still complete
 * it safely, and those buffers are never freed. */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "common/result.h"
#include "transport/deadline.h"
#include "transport/mpi_internal.h"

/* A wait polls, yielding the core between polls, for GCCL_MPI_SPIN_US; after that
 * it naps MT_NAP_NS between polls, so that a rank waiting on the network or on a
 * slow peer stops taking a core from the ranks that compute (on the 4-ranks-on-
 * 2-cores test bed, yielding spinners took half the machine). The nap is short
 * against what a link moves meanwhile (12.5 KB at 1 Gbit/s, well inside the socket
 * buffers that MPI fills and drains at each poll), so a large transfer keeps its
 * rate; the spin keeps small messages at MPI's latency. When every rank is on this
 * node MPI copies through shared memory inside the polls themselves, and napping
 * cost up to a third of the busbw (BENCHMARKS.md): there waits spin for 1 s. */
#define MT_SPIN_US_DEFAULT 100
#define MT_SPIN_US_ONE_NODE 1000000
#define MT_NAP_NS 50000L /* 50 us */
/* The first polls of a wait neither read the clock nor give the core away: a
 * small message on its way arrives within them, and a yield at once added a trip
 * through the scheduler to every step of a small allreduce (2.5x MPI_Allreduce's
 * time at 8 bytes, np 2; BENCHMARKS.md). A poll that finds nothing takes about
 * 50 ns, so this is some tens of microseconds. */
#define MT_BUSY_POLLS 1000u
/* How often a wait, or asking whether the transport broke, polls for a peer's
 * control message (control_poll_now_and_then; by the coarse clock, whose tick
 * is a few ms). */
#define MT_CONTROL_POLL_NS 1000000
/* How long cancel_all and destroy give withdrawn requests to settle (never more
 * than the timeout): Open MPI cannot cancel a send, and a receive that has
 * matched completes only once its sender progresses. */
#define MT_SETTLE_NS 2000000000LL

static struct mpi_tp* mt(struct transport* tp) {
  return (struct mpi_tp*)tp;
}

gcclResult_t mpi_error(int rc, const char* call) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0, cls = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
  MPI_Error_class(rc, &cls);
  if (cls == MPI_ERR_TRUNCATE)
    return err_set(gcclInternalError, "%s: a message was longer than its receive (%s)", call, text);
  return err_set(gcclSystemError, "%s failed: %s", call, text);
}

/* ---- failure ------------------------------------------------------------------ */

/* Who broke the transport: a peer (its control message), or this rank. */
enum mt_origin { BY_PEER = 0, BY_FAILURE, BY_ABORT };

/* Marks the transport broken with `reason` (the first failure wins). What this
 * rank broke is also due to be told to the peers. */
static void break_transport(struct mpi_tp* t, gcclResult_t reason, enum mt_origin origin, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void break_transport(struct mpi_tp* t, gcclResult_t reason, enum mt_origin origin, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int broke = tp_vbreak(&t->brk, reason, fmt, ap);
  va_end(ap);
  if (!broke) return;
  atomic_store(&t->aborted, origin == BY_ABORT);
  if (origin != BY_PEER) atomic_store(&t->notify_due, 1);
}

/* Sends the control message to every peer, without waiting, if this rank broke
 * the transport and has not told them yet. Only from a thread that may call MPI. */
static void notify_peers(struct mpi_tp* t) {
  if (!atomic_load(&t->notify_due) || !atomic_exchange(&t->notify_due, 0)) return;
  pthread_mutex_lock(&t->ctl_mu);
  t->ctl_out = (struct mt_control){
      .comm_id = t->comm_id, .reason = tp_break_reason(&t->brk), .aborted = atomic_load(&t->aborted)};
  for (int p = 0; p < t->base.nranks; p++) {
    if (p == t->base.rank) continue;
    int rc = MPI_Isend(&t->ctl_out, (int)sizeof t->ctl_out, MPI_BYTE, p, TAG_CONTROL, t->comm, &t->ctl_sends[p]);
    if (rc != MPI_SUCCESS) {
      GCCL_WARN("could not tell rank %d that this rank's communicator failed", p);
      t->ctl_sends[p] = MPI_REQUEST_NULL;
    }
  }
  pthread_mutex_unlock(&t->ctl_mu);
}

/* Checks whether a peer's control message arrived; one that belongs to a freed
 * communicator is dropped and the receive posted again. Skips the check when
 * another thread is making it. */
static void control_poll(struct mpi_tp* t) {
  if (pthread_mutex_trylock(&t->ctl_mu) != 0) return;
  while (t->ctl_recv != MPI_REQUEST_NULL) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&t->ctl_recv, &flag, &st) != MPI_SUCCESS || !flag) break;
    if (t->ctl_in.comm_id == t->comm_id) {
      const char* why = gcclGetErrorString((gcclResult_t)t->ctl_in.reason);
      if (!t->ctl_in.aborted)
        break_transport(t, gcclRemoteError, BY_PEER, "rank %d failed (%s)", st.MPI_SOURCE, why);
      else if (t->ctl_in.reason == gcclRemoteError) /* gcclCommAbort */
        break_transport(t, gcclRemoteError, BY_PEER, "rank %d aborted the communicator", st.MPI_SOURCE);
      else
        break_transport(t, gcclRemoteError, BY_PEER, "rank %d aborted the communicator after a failure (%s)",
                        st.MPI_SOURCE, why);
      break;
    }
    if (MPI_Irecv(&t->ctl_in, (int)sizeof t->ctl_in, MPI_BYTE, MPI_ANY_SOURCE, TAG_CONTROL, t->comm, &t->ctl_recv) !=
        MPI_SUCCESS)
      t->ctl_recv = MPI_REQUEST_NULL;
  }
  pthread_mutex_unlock(&t->ctl_mu);
}

/* control_poll at most once every MT_CONTROL_POLL_NS (by the coarse clock), in
 * whatever thread gets there first: its MPI_Test drives MPI's progress, which
 * yields the core when the node is oversubscribed. Waits ask at every turn, and at
 * np 4 on 2 cores a small allreduce on the board took 0.9-1.1x MPI_Allreduce's
 * time polling each turn, 0.54-0.66x polling once a tick. A peer's failure is
 * then seen within a tick of the coarse clock (a few ms). */
static void control_poll_now_and_then(struct mpi_tp* t) {
  int64_t now = clock_coarse_ns(), last = atomic_load(&t->control_polled_ns);
  if (now - last >= MT_CONTROL_POLL_NS && atomic_compare_exchange_strong(&t->control_polled_ns, &last, now))
    control_poll(t);
}

/* The error of an operation that finds the transport broken. */
static gcclResult_t fail_broken(struct mpi_tp* t) {
  return tp_broken_error(&t->brk, t->base.rank);
}

/* A failure of this rank: the peers may be waiting for it. */
void mpi_tp_fail(struct mpi_tp* t, gcclResult_t res) {
  break_transport(t, res, BY_FAILURE, "%s", err_last());
  notify_peers(t);
}

/* A failed MPI call breaks the transport: the peers may be waiting for this rank. */
gcclResult_t mpi_tp_fail_mpi(struct mpi_tp* t, int rc, const char* call) {
  gcclResult_t res = mpi_error(rc, call);
  mpi_tp_fail(t, res);
  return res;
}

/* A wait that ran out of time breaks the transport and tells the peers. */
static gcclResult_t time_out(struct mpi_tp* t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

static gcclResult_t time_out(struct mpi_tp* t, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gcclResult_t res = deadline_expired(t->base.rank, t->timeout_ns, fmt, ap);
  va_end(ap);
  mpi_tp_fail(t, gcclTimeout);
  return res;
}

/* A wait in progress: its polls, and when it started to give the core away. */
struct mt_waiting {
  unsigned polls;
  unsigned busy_polls; /* the first polls, which neither read the clock nor give the core away; >= 1 */
  int64_t start_ns;
};

/* One round of a loop that waits: gcclRemoteError once the transport is broken
 * (by a peer's control message too), gcclTimeout (nothing recorded: the caller
 * says what it waited for) past the timeout; otherwise, after the first
 * busy polls, gives the core away for a moment. */
static gcclResult_t poll_step(struct mpi_tp* t, struct mt_waiting* w) {
  mpi_lanes_poll(t);
  notify_peers(t); /* below MPI_THREAD_MULTIPLE an abort leaves it to this thread */
  if (tp_break_reason(&t->brk) != gcclSuccess) return fail_broken(t);
  if (++w->polls < w->busy_polls) return gcclSuccess;
  int64_t now = clock_now_ns();
  if (w->polls == w->busy_polls) w->start_ns = now;
  control_poll_now_and_then(t);
  return deadline_pause(w->start_ns, now, t->timeout_ns, t->spin_ns, MT_NAP_NS);
}

/* ---- transport operations -------------------------------------------------------- */

static gcclResult_t mt_isend(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* req) {
  return mpi_lanes_submit(mt(tp), 1, peer, buf, bytes, NULL, req);
}

static gcclResult_t mt_irecv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* req) {
  return mpi_lanes_submit(mt(tp), 0, peer, buf, bytes, NULL, req);
}

static gcclResult_t mt_irecv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got, tp_req* req) {
  return mpi_lanes_submit(mt(tp), 0, peer, buf, cap, got, req);
}

/* A request that fails stays with MPI until cancel_all withdraws it (its buffer
 * may still be in use); its handle is the caller's no more. */
static gcclResult_t mt_wait(struct transport* tp, tp_req h) {
  struct mpi_tp* t = mt(tp);
  if (h < 0 || h >= t->pool_size || t->pool[h].state == MT_FREE) {
    if (tp_break_reason(&t->brk) != gcclSuccess) return fail_broken(t);
    return err_set(gcclInternalError, "MPI transport: wait on request %d, which is not pending", h);
  }
  struct mt_waiting w = {0, MT_BUSY_POLLS, 0};
  for (;;) {
    mpi_lanes_advance(t, h);
    struct mt_req* r = &t->pool[h];
    if (r->state == MT_DONE) {
      gcclResult_t res = r->result;
      mpi_lanes_release(t, h);
      if (res != gcclSuccess && tp_break_reason(&t->brk) == gcclSuccess) mpi_tp_fail(t, res);
      return res;
    }
    gcclResult_t res = poll_step(t, &w);
    if (res == gcclTimeout) {
      r = &t->pool[h];
      if (r->is_send) return time_out(t, "rank %d to receive its message", r->peer);
      return time_out(t, "a message from rank %d", r->peer);
    }
    if (res != gcclSuccess) return res;
  }
}

/* Waits for the non-blocking collective in coll_req. */
static gcclResult_t wait_collective(struct mpi_tp* t, const char* name) {
  struct mt_waiting w = {0, MT_BUSY_POLLS, 0};
  for (;;) {
    int flag = 0;
    int rc = MPI_Test(&t->coll_req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_tp_fail_mpi(t, rc, name);
    if (flag) return gcclSuccess;
    gcclResult_t res = poll_step(t, &w);
    if (res == gcclTimeout) return time_out(t, "every rank to join %s", name);
    if (res != gcclSuccess) return res;
  }
}

/* The collective runs on the transport's own buffers, which outlive a collective
 * that never completes. */
static gcclResult_t mt_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  struct mpi_tp* t = mt(tp);
  if (bytes > TP_SMALL_MAX) return err_set(gcclInternalError, "allgather_small of %zu bytes", bytes);
  if (tp_break_reason(&t->brk) != gcclSuccess) return fail_broken(t);
  if (bytes) memcpy(t->small_in, in, bytes);
  int rc = MPI_Iallgather(t->small_in, (int)bytes, MPI_BYTE, t->small_out, (int)bytes, MPI_BYTE, t->comm, &t->coll_req);
  if (rc != MPI_SUCCESS) return mpi_tp_fail_mpi(t, rc, "MPI_Iallgather");
  GCCL_CHECK(wait_collective(t, "MPI_Iallgather"));
  if (bytes) memcpy(out, t->small_out, bytes * (size_t)tp->nranks);
  return gcclSuccess;
}

static gcclResult_t mt_barrier(struct transport* tp) {
  struct mpi_tp* t = mt(tp);
  if (tp_break_reason(&t->brk) != gcclSuccess) return fail_broken(t);
  int rc = MPI_Ibarrier(t->comm, &t->coll_req);
  if (rc != MPI_SUCCESS) return mpi_tp_fail_mpi(t, rc, "MPI_Ibarrier");
  return wait_collective(t, "MPI_Ibarrier");
}

/* Polls reqs until all completed or deadline_ns passed; frees what is left
 * (MPI completes it in the background) and returns how many that were. */
static int settle(MPI_Request* reqs, int n, int64_t deadline_ns) {
  int left = n;
  while (left > 0) {
    left = 0;
    for (int i = 0; i < n; i++) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      if (MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        reqs[i] = MPI_REQUEST_NULL; /* settled badly */
      else if (!flag)
        left++;
    }
    if (left == 0 || clock_now_ns() >= deadline_ns) break;
    sched_yield();
  }
  for (int i = 0; i < n; i++)
    if (reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&reqs[i]);
  return left;
}

static int64_t settle_deadline(struct mpi_tp* t) {
  return deadline_after(t->timeout_ns, MT_SETTLE_NS);
}

/* Cancels every request given to MPI and gives them a bounded time to settle;
 * requests queued behind a lane's blocker were never posted. */
static void mt_cancel_all(struct transport* tp) {
  struct mpi_tp* t = mt(tp);
  notify_peers(t); /* below MPI_THREAD_MULTIPLE an abort leaves it to this thread */
  int64_t deadline = settle_deadline(t);
  int stuck = 0;
  for (int i = 0; i < t->pool_size; i++)
    if (t->pool[i].state == MT_ACTIVE) MPI_Cancel(&t->pool[i].mreq);
  for (int i = 0; i < t->pool_size; i++)
    if (t->pool[i].state == MT_ACTIVE) stuck += settle(&t->pool[i].mreq, 1, deadline);
  if (stuck)
    GCCL_WARN(
        "MPI transport: %d requests did not settle within %lld ms of their cancellation; MPI may still use "
        "their buffers",
        stuck, (long long)((t->timeout_ns < MT_SETTLE_NS ? t->timeout_ns : MT_SETTLE_NS) / 1000000));
  for (int i = 0; i < t->pool_size; i++) {
    t->pool[i].state = MT_FREE;
    t->pool[i].next = i + 1 < t->pool_size ? i + 1 : -1;
  }
  t->free_head = 0;
  for (int i = 0; i < 2 * t->base.nranks; i++) t->lanes[i] = (struct mt_lane){-1, -1, -1};
  t->nblockers = 0;
}

/* ---- tagged steps ------------------------------------------------------------------
 * A step's messages are one MPI message each, on its own requests outside the
 * pool and the lanes, posted and tested in one loop: they are the in-band
 * agreement's, a small call's only messages (collectives/in_band.c), whose calls
 * take 12-15 us at 2 ranks on the 1 Gbit/s test bed, where every layer between
 * gcclAllReduce and MPI shows. Through the pool (a request and a wait each) the
 * drop-in's small calls took 1.02x Open MPI's allreduce there, 1.01x with these
 * steps and reduce.c's short sums (BENCHMARKS.md, issue 30).
 *
 * Receives take MPI_ANY_TAG on the data communicator, so they could also match a
 * data or control message from their peer; on a working communicator none is
 * ever unmatched then: a call's first messages are its agreement's, the previous
 * call's data were all received, and the control receive, posted at creation,
 * takes control messages first. What one does meet, a message that a freed
 * communicator left to the one made with its context id, or a second control
 * message after the transport broke, is dropped and the receive posted again
 * (one longer than the receive fails it, as any message would, and breaks the
 * transport). A second private communicator for tagged messages was tried: after
 * a failed call's stranded send, Open MPI's context-id agreement for the next
 * communicator never ended. */

/* A tagged receive that completed with status st: its size and tag into the
 * step, or, if the message was not this communicator's tagged message, the
 * receive posted again (*req). */
static int take_tagged(struct mpi_tp* t, struct tp_tagged_step* s, MPI_Request* req, const MPI_Status* st) {
  uint32_t mask = (1u << TP_TAG_BITS) - 1, wire = (uint32_t)st->MPI_TAG;
  if ((wire & ~mask) != (mpi_tag_tagged(t, 0) & ~mask))
    return MPI_Irecv(s->rbuf, (int)s->cap, MPI_BYTE, s->from, MPI_ANY_TAG, t->comm, req);
  int count = 0;
  MPI_Get_count(st, MPI_BYTE, &count);
  s->got = (size_t)count;
  s->rtag = wire & mask;
  return MPI_SUCCESS;
}

/* Tests the step's receive and send (reqs[0], reqs[1]; MPI_REQUEST_NULL once done). */
static gcclResult_t test_step(struct mpi_tp* t, struct tp_tagged_step* s, MPI_Request reqs[2]) {
  int flag = 0, rc = MPI_SUCCESS;
  if (reqs[0] != MPI_REQUEST_NULL) {
    MPI_Status st;
    rc = MPI_Test(&reqs[0], &flag, &st);
    if (rc == MPI_SUCCESS && flag) rc = take_tagged(t, s, &reqs[0], &st);
    if (rc != MPI_SUCCESS) {
      char call[64];
      snprintf(call, sizeof call, "MPI_Test of a tagged receive from rank %d", s->from);
      return mpi_tp_fail_mpi(t, rc, call);
    }
  }
  if (reqs[1] != MPI_REQUEST_NULL) {
    rc = MPI_Test(&reqs[1], &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char call[64];
      snprintf(call, sizeof call, "MPI_Test of a tagged send to rank %d", s->to);
      return mpi_tp_fail_mpi(t, rc, call);
    }
  }
  return gcclSuccess;
}

static gcclResult_t post_step(struct mpi_tp* t, struct tp_tagged_step* s, MPI_Request reqs[2]) {
  int n = t->base.nranks;
  if (s->to >= n || s->from >= n || s->sbytes > INT_MAX || s->cap > INT_MAX)
    return err_set(gcclInternalError, "MPI transport: a tagged step to %d and from %d of %d ranks, %zu and %zu bytes",
                   s->to, s->from, n, s->sbytes, s->cap);
  int rc = MPI_SUCCESS;
  if (s->from >= 0) rc = MPI_Irecv(s->rbuf, (int)s->cap, MPI_BYTE, s->from, MPI_ANY_TAG, t->comm, &reqs[0]);
  if (rc != MPI_SUCCESS) return mpi_tp_fail_mpi(t, rc, "MPI_Irecv (tagged)");
  if (s->to < 0) return gcclSuccess;
  rc = MPI_Isend(s->sbuf, (int)s->sbytes, MPI_BYTE, s->to, (int)mpi_tag_tagged(t, s->stag), t->comm, &reqs[1]);
  if (rc != MPI_SUCCESS) return mpi_tp_fail_mpi(t, rc, "MPI_Isend (tagged)");
  return s->after_send ? s->after_send(s->after_send_arg, s->to) : gcclSuccess;
}

static gcclResult_t mt_step_tagged(struct transport* tp, struct tp_tagged_step* s) {
  struct mpi_tp* t = mt(tp);
  if (tp_break_reason(&t->brk) != gcclSuccess) return fail_broken(t);
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}; /* the receive, the send */
  gcclResult_t res = post_step(t, s, reqs);
  struct mt_waiting w = {0, MT_BUSY_POLLS, 0};
  while (res == gcclSuccess) {
    res = test_step(t, s, reqs);
    if (res != gcclSuccess || (reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL)) break;
    res = poll_step(t, &w);
    if (res == gcclTimeout)
      res = reqs[0] != MPI_REQUEST_NULL ? time_out(t, "a message from rank %d", s->from)
                                        : time_out(t, "rank %d to receive its message", s->to);
  }
  if (res != gcclSuccess) { /* withdrawn as cancel_all withdraws the pool's (Open MPI cannot cancel a send) */
    if (reqs[0] != MPI_REQUEST_NULL) MPI_Cancel(&reqs[0]);
    if (settle(reqs, 2, settle_deadline(t)))
      GCCL_WARN("MPI transport: a tagged message did not settle after a failed step; MPI may still use its buffer");
  }
  return res;
}

static void mt_abort(struct transport* tp, gcclResult_t reason) {
  struct mpi_tp* t = mt(tp);
  break_transport(t, reason, BY_ABORT, "rank %d aborted the communicator (%s)", tp->rank, gcclGetErrorString(reason));
  if (t->thread_level >= MPI_THREAD_MULTIPLE) notify_peers(t);
}

/* Reads the flag only. Every call asks twice, and a poll of the control receive
 * runs Open MPI's progress engine, which gives the core away where ranks
 * outnumber cores. Polled at each call, small allreduces took 2x as long; polled
 * once a tick of the coarse clock, the call that met the tick paid for it: on the
 * 1 Gbit/s test bed at 5 ranks on 2 cores, a 4-byte call's way in to its first
 * message took 0.4-3.4 us per rank on average, 0.3 us without the poll
 * (BENCHMARKS.md, issue 30). A call learns of a peer's failure in its waits. */
static gcclResult_t mt_broken(struct transport* tp) {
  return tp_break_reason(&mt(tp)->brk);
}

/* For gcclCommGetAsyncError, maybe from a watchdog thread: served within a tick.
 * Below MPI_THREAD_MULTIPLE that thread must not call MPI, and nothing is polled. */
static void mt_hear_peers(struct transport* tp) {
  struct mpi_tp* t = mt(tp);
  if (t->thread_level >= MPI_THREAD_MULTIPLE) control_poll_now_and_then(t);
}

static void mt_free(struct mpi_tp* t, int keep_small_buffers) {
  free(t->pool);
  free(t->lanes);
  free(t->blockers);
  free(t->ctl_sends);
  if (!keep_small_buffers) {
    free(t->small_in);
    free(t->small_out);
  }
  pthread_mutex_destroy(&t->ctl_mu);
  free(t);
}

static void mt_destroy(struct transport* tp) {
  struct mpi_tp* t = mt(tp);
  int finalized = 0, coll_pending = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    mt_cancel_all(tp);
    int64_t deadline = settle_deadline(t);
    pthread_mutex_lock(&t->ctl_mu);
    if (t->ctl_recv != MPI_REQUEST_NULL) MPI_Cancel(&t->ctl_recv);
    settle(&t->ctl_recv, 1, deadline);
    settle(t->ctl_sends, t->base.nranks, deadline);
    /* Control messages of other failing ranks that arrived unreceived. */
    int flag = 1;
    while (flag) {
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_CONTROL, t->comm, &flag, &st) != MPI_SUCCESS) break;
      if (flag) MPI_Recv(&t->ctl_in, (int)sizeof t->ctl_in, MPI_BYTE, st.MPI_SOURCE, TAG_CONTROL, t->comm, &st);
    }
    pthread_mutex_unlock(&t->ctl_mu);
    if (t->coll_req != MPI_REQUEST_NULL) {
      /* Only a failed collective is still pending here, and it cannot be cancelled
       * nor freed: it stays with MPI, on buffers kept for it. */
      flag = 0;
      coll_pending = MPI_Test(&t->coll_req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag;
    }
    MPI_Comm_free(&t->comm);
  }
  mpi_board_destroy(t);
  mt_free(t, coll_pending);
}

/* Waits on the board as on a message: polling for a peer's control message now
 * and then, so that a peer's failure or abort ends it, and the timeout holds. */
static gcclResult_t mt_board_post(struct transport* tp, uint64_t hash, const void* data, size_t bytes,
                                  const struct tp_post** all) {
  struct mpi_tp* t = mt(tp);
  if (tp_break_reason(&t->brk) != gcclSuccess) return fail_broken(t);
  if (bytes > TP_BOARD_MAX_BYTES) return err_set(gcclInternalError, "a board post of %zu bytes", bytes);
  board_publish(&t->board, hash, data, bytes);
  struct mt_waiting w = {0, t->board_busy_polls, 0};
  for (int r = 0; r < tp->nranks; r++)
    while (!board_arrived(&t->board, r)) {
      gcclResult_t res = poll_step(t, &w);
      if (res == gcclTimeout) return time_out(t, "rank %d to post its call on the board", r);
      if (res != gcclSuccess) return res;
    }
  *all = t->board.posts;
  return gcclSuccess;
}

static void mt_progress(struct transport* tp) {
  struct mpi_tp* t = mt(tp);
  mpi_lanes_poll(t);
  control_poll(t); /* its MPI_Test drives MPI's progress engine */
}

static void mt_split_far(struct transport* tp, int node_size, size_t piece_bytes) {
  struct mpi_tp* t = mt(tp);
  t->node_size = node_size > 0 ? node_size : tp->nranks;
  t->far_chunk_bytes = piece_bytes < t->chunk_bytes ? piece_bytes : 0;
}

static const struct transport_ops mpi_ops = {
    .name = "mpi",
    .isend = mt_isend,
    .irecv = mt_irecv,
    .irecv_upto = mt_irecv_upto,
    .wait = mt_wait,
    .allgather_small = mt_allgather_small,
    .barrier = mt_barrier,
    .cancel_all = mt_cancel_all,
    .abort = mt_abort,
    .broken = mt_broken,
    .destroy = mt_destroy,
    .progress = mt_progress,
    .hear_peers = mt_hear_peers,
    .step_tagged = mt_step_tagged,
    .split_far = mt_split_far,
};

gcclResult_t mpi_transport_add_board(struct transport* tp, int wanted) {
  struct mpi_tp* t = mt(tp);
  GCCL_CHECK(mpi_board_create(t, wanted));
  if (!t->board_bytes) return gcclSuccess;
  t->ops.board_post = mt_board_post;
  /* With more ranks than cores, the peer a wait spins for may be off its core:
   * at np 4 on 2 cores, 4 bytes took 2.1x MPI_Allreduce's time after the usual
   * busy polls, 0.9x yielding at the first poll that finds nothing
   * (BENCHMARKS.md, issue 30). */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  t->board_busy_polls = cpus > 0 && tp->nranks > cpus ? 1 : MT_BUSY_POLLS;
  return gcclSuccess;
}

size_t mpi_transport_chunk_bytes(const struct transport* tp) {
  return ((const struct mpi_tp*)tp)->chunk_bytes;
}

size_t mpi_transport_chunk_to(const struct transport* tp, int peer) {
  return mpi_chunk_to((const struct mpi_tp*)tp, peer);
}

/* GCCL_MPI_CHUNK_BYTES, else 1 GiB; at most INT_MAX (MPI counts are ints). */
static size_t chunk_bytes_from_env(void) {
  int64_t v = env_int("GCCL_MPI_CHUNK_BYTES", (int64_t)MPI_TP_CHUNK_BYTES_DEFAULT);
  if (v < 1 || v > INT_MAX) {
    GCCL_WARN("ignoring GCCL_MPI_CHUNK_BYTES=%lld: must be in [1, %d]", (long long)v, INT_MAX);
    v = (int64_t)MPI_TP_CHUNK_BYTES_DEFAULT;
  }
  return (size_t)v;
}

gcclResult_t mpi_transport_create(struct transport** out, MPI_Comm comm, uint64_t comm_id, int64_t timeout_ms,
                                  int thread_level, int one_node) {
  *out = NULL;
  int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Comm_set_errhandler");
  int rank = 0, nranks = 0;
  if ((rc = MPI_Comm_rank(comm, &rank)) != MPI_SUCCESS) return mpi_error(rc, "MPI_Comm_rank");
  if ((rc = MPI_Comm_size(comm, &nranks)) != MPI_SUCCESS) return mpi_error(rc, "MPI_Comm_size");

  struct mpi_tp* t = calloc(1, sizeof *t);
  if (!t) return err_set(gcclSystemError, "out of memory creating the MPI transport");
  pthread_mutex_init(&t->ctl_mu, NULL);
  size_t n = (size_t)nranks;
  t->pool_size = 32 + 4 * nranks; /* linear algorithms post one request per peer */
  t->pool = calloc((size_t)t->pool_size, sizeof *t->pool);
  t->lanes = malloc(2 * n * sizeof *t->lanes);
  t->blockers = malloc(2 * n * sizeof *t->blockers);
  t->ctl_sends = malloc(n * sizeof *t->ctl_sends);
  t->small_in = malloc(TP_SMALL_MAX);
  t->small_out = malloc(n * TP_SMALL_MAX);
  if (!t->pool || !t->lanes || !t->blockers || !t->ctl_sends || !t->small_in || !t->small_out) {
    mt_free(t, 0);
    return err_set(gcclSystemError, "out of memory creating the MPI transport for %d ranks", nranks);
  }
  for (int i = 0; i < t->pool_size; i++) t->pool[i].next = i + 1 < t->pool_size ? i + 1 : -1;
  for (size_t i = 0; i < 2 * n; i++) t->lanes[i] = (struct mt_lane){-1, -1, -1};
  for (size_t i = 0; i < n; i++) t->ctl_sends[i] = MPI_REQUEST_NULL;
  t->coll_req = MPI_REQUEST_NULL;
  t->comm = comm;
  int* tag_ub = NULL;
  int has_ub = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &has_ub);
  int tags_fit = has_ub && tag_ub && (int64_t)*tag_ub >= 2 * (int64_t)TAG_TAGGED - 1; /* mpi_tag_tagged's */
  t->thread_level = thread_level;
  t->timeout_ns = timeout_ms * 1000000;
  t->chunk_bytes = chunk_bytes_from_env();
  t->node_size = nranks;
  int64_t spin_us = env_int("GCCL_MPI_SPIN_US", one_node ? MT_SPIN_US_ONE_NODE : MT_SPIN_US_DEFAULT);
  t->spin_ns = (spin_us < INT64_MAX / 1000 ? spin_us : INT64_MAX / 1000) * 1000;
  t->comm_id = comm_id;
  rc = MPI_Irecv(&t->ctl_in, (int)sizeof t->ctl_in, MPI_BYTE, MPI_ANY_SOURCE, TAG_CONTROL, comm, &t->ctl_recv);
  if (rc != MPI_SUCCESS) {
    mt_free(t, 0);
    return mpi_error(rc, "MPI transport: posting the control receive (MPI_Irecv)");
  }
  t->ops = mpi_ops;
  t->base.ops = &t->ops;
  t->base.rank = rank;
  t->base.nranks = nranks;
  t->base.shares_address_space = 0;
  t->base.caller_thread_only = thread_level < MPI_THREAD_MULTIPLE;
  t->base.agree_in_band = tags_fit;
  *out = &t->base;
  return gcclSuccess;
}
