/* mpi_lanes.c — the MPI transport's messages (mpi_internal.h).
 *
 * Every request is one message to or from one peer on a single data tag, so
 * MPI's non-overtaking rule is the transport's pair ordering. A message longer
 * than its peer's chunk size (mpi_chunk_to: split_far's pieces for a rank of
 * another node) goes as several MPI messages, one chunk in flight at a time;
 * requests posted after it on the same lane (peer and direction) wait in a FIFO,
 * not yet given to MPI, until its last chunk is posted: posted at once, their
 * messages would slip between its chunks. A receive of unknown size learns where
 * the message ends from a chunk shorter than the chunk size, so a message whose
 * size is a multiple of it ends with an empty one.
 *
 * A request that fails breaks the transport (mpi_tp_fail): its lane is out of
 * step, and the peers may be waiting for this rank.
 *
 * Tagged messages (the in-band agreement's) bypass the lanes: mpi.c's tagged
 * steps post them straight to MPI. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/result.h"
#include "transport/mpi_internal.h"

static gcclResult_t req_alloc(struct mpi_tp* t, int* h) {
  if (t->free_head < 0) {
    int grown = 2 * t->pool_size;
    struct mt_req* pool = realloc(t->pool, (size_t)grown * sizeof *pool);
    if (!pool) return err_set(gcclSystemError, "out of memory growing the MPI request pool to %d", grown);
    memset(pool + t->pool_size, 0, (size_t)(grown - t->pool_size) * sizeof *pool);
    for (int i = t->pool_size; i < grown; i++) pool[i].next = i + 1 < grown ? i + 1 : -1;
    t->free_head = t->pool_size;
    t->pool = pool;
    t->pool_size = grown;
  }
  *h = t->free_head;
  t->free_head = t->pool[*h].next;
  return gcclSuccess;
}

void mpi_lanes_release(struct mpi_tp* t, int h) {
  t->pool[h].state = MT_FREE;
  t->pool[h].next = t->free_head;
  t->free_head = h;
}

static struct mt_lane* lane_of(struct mpi_tp* t, const struct mt_req* r) {
  return &t->lanes[2 * r->peer + (r->is_send ? 0 : 1)];
}

/* Gives MPI the request's next chunk: at most a chunk (mpi_chunk_to) of what is left. */
static int post_chunk(struct mpi_tp* t, struct mt_req* r) {
  size_t left = r->bytes - r->done, chunk = mpi_chunk_to(t, r->peer);
  size_t n = left < chunk ? left : chunk;
  r->posted = n;
  r->last = n < chunk; /* a full chunk is always followed by another, maybe empty */
  r->state = MT_ACTIVE;
  char* at = r->buf ? r->buf + r->done : NULL; /* a message of 0 bytes may have no buffer */
  if (r->is_send) return MPI_Isend(at, (int)n, MPI_BYTE, r->peer, TAG_DATA, t->comm, &r->mreq);
  return MPI_Irecv(at, (int)n, MPI_BYTE, r->peer, TAG_DATA, t->comm, &r->mreq);
}

static void blockers_remove(struct mpi_tp* t, int h) {
  for (int i = 0; i < t->nblockers; i++)
    if (t->blockers[i] == h) {
      t->blockers[i] = t->blockers[--t->nblockers];
      return;
    }
}

static void lane_drain(struct mpi_tp* t, struct mt_lane* lane);

/* Completes request h with `res`; a lane it blocked moves on when it succeeded.
 * After a failure the lane stays blocked: the pair's stream is out of step, and
 * the transport is broken anyway. */
static void req_complete(struct mpi_tp* t, int h, gcclResult_t res) {
  struct mt_req* r = &t->pool[h];
  r->state = MT_DONE;
  r->result = res;
  r->mreq = MPI_REQUEST_NULL;
  struct mt_lane* lane = lane_of(t, r);
  if (lane->blocker != h) return;
  blockers_remove(t, h);
  if (res != gcclSuccess) return; /* still the blocker: the queue never starts */
  lane->blocker = -1;
  lane_drain(t, lane);
}

static void req_fail(struct mpi_tp* t, int h, gcclResult_t res) {
  mpi_tp_fail(t, res);
  req_complete(t, h, res);
}

/* Posts the first chunk of request h; one with more to come blocks its lane. */
static gcclResult_t req_start(struct mpi_tp* t, struct mt_lane* lane, int h) {
  struct mt_req* r = &t->pool[h];
  int rc = post_chunk(t, r);
  if (rc != MPI_SUCCESS) return mpi_tp_fail_mpi(t, rc, r->is_send ? "MPI_Isend" : "MPI_Irecv");
  if (!r->last) {
    lane->blocker = h;
    t->blockers[t->nblockers++] = h;
  }
  return gcclSuccess;
}

/* Starts the queued requests of a lane whose blocker posted its last chunk, in
 * order, until one of them blocks it again. */
static void lane_drain(struct mpi_tp* t, struct mt_lane* lane) {
  while (lane->blocker < 0 && lane->head >= 0) {
    int h = lane->head;
    lane->head = t->pool[h].next;
    if (lane->head < 0) lane->tail = -1;
    gcclResult_t res = req_start(t, lane, h);
    if (res != gcclSuccess) req_fail(t, h, res);
  }
}

/* Tests request h's chunk in flight; when it completed, accounts for it and
 * posts the next chunk or completes the request. */
void mpi_lanes_advance(struct mpi_tp* t, int h) {
  struct mt_req* r = &t->pool[h];
  if (r->state != MT_ACTIVE) return;
  int flag = 0;
  MPI_Status st;
  int rc = MPI_Test(&r->mreq, &flag, &st);
  if (rc != MPI_SUCCESS) {
    char call[64];
    snprintf(call, sizeof call, "MPI_Test of a %s rank %d", r->is_send ? "send to" : "receive from", r->peer);
    req_fail(t, h, mpi_error(rc, call));
    return;
  }
  if (!flag) return;
  size_t got = r->posted;
  if (!r->is_send) {
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    got = (size_t)count;
  }
  if (!r->got && got != r->posted) {
    req_fail(t, h,
             err_set(gcclInternalError, "rank %d sent a message of another size than the %zu bytes rank %d expected",
                     r->peer, r->bytes, t->base.rank));
    return;
  }
  r->done += got;
  int ends = r->got ? got < mpi_chunk_to(t, r->peer) : r->last;
  if (ends) {
    if (r->got) *r->got = r->done;
    req_complete(t, h, gcclSuccess);
    return;
  }
  rc = post_chunk(t, r);
  if (rc != MPI_SUCCESS) {
    req_fail(t, h, mpi_error(rc, r->is_send ? "MPI_Isend" : "MPI_Irecv"));
    return;
  }
  struct mt_lane* lane = lane_of(t, r);
  if (r->last && lane->blocker == h) {
    blockers_remove(t, h);
    lane->blocker = -1;
    lane_drain(t, lane);
  }
}

/* Moves every lane's chunked message along. Walks down, so that entries moved
 * or added by mpi_lanes_advance are not visited twice. */
void mpi_lanes_poll(struct mpi_tp* t) {
  for (int i = t->nblockers - 1; i >= 0; i--)
    if (i < t->nblockers) mpi_lanes_advance(t, t->blockers[i]);
}

/* A new request, once the transport works and peer exists; *h = its handle. */
static gcclResult_t req_new(struct mpi_tp* t, int is_send, int peer, const void* buf, size_t bytes, size_t* got,
                            int* h) {
  if (tp_break_reason(&t->brk) != gcclSuccess) return tp_broken_error(&t->brk, t->base.rank);
  if (peer < 0 || peer >= t->base.nranks)
    return err_set(gcclInternalError, "MPI transport: peer %d is not in [0, %d)", peer, t->base.nranks);
  GCCL_CHECK(req_alloc(t, h));
  /* Field by field: a compound literal zeroed the whole request first with rep
   * stos, 4% of an 8-byte allreduce over shared memory. */
  struct mt_req* r = &t->pool[*h];
  r->state = MT_FREE;
  r->is_send = is_send;
  r->peer = peer;
  r->next = -1;
  r->buf = (char*)(uintptr_t)buf;
  r->bytes = bytes;
  r->got = got;
  r->done = r->posted = 0;
  r->last = 0;
  r->mreq = MPI_REQUEST_NULL;
  r->result = gcclSuccess;
  return gcclSuccess;
}

gcclResult_t mpi_lanes_submit(struct mpi_tp* t, int is_send, int peer, const void* buf, size_t bytes, size_t* got,
                              tp_req* out) {
  int h = -1;
  GCCL_CHECK(req_new(t, is_send, peer, buf, bytes, got, &h));
  struct mt_req* r = &t->pool[h];
  struct mt_lane* lane = lane_of(t, r);
  if (lane->blocker >= 0) { /* behind a chunked message: queued */
    r->state = MT_DEFERRED;
    if (lane->tail >= 0)
      t->pool[lane->tail].next = h;
    else
      lane->head = h;
    lane->tail = h;
  } else {
    gcclResult_t res = req_start(t, lane, h);
    if (res != gcclSuccess) {
      mpi_lanes_release(t, h);
      return res;
    }
  }
  *out = h;
  return gcclSuccess;
}
