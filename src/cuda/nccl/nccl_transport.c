/* nccl_transport.c — the NCCL transport (nccl_transport.h).
 *
 * A send stages its header and payload into device memory on the copy stream,
 * makes its pair's stream wait for that copy, and launches the ncclSends there;
 * it completes when an event recorded after them does. A receive from peer j
 * waits in j's queue. On j's stream the receives' steps are launched in wire
 * order: header of the first, its payload, header of the next, ... The header of
 * a request is launched as soon as every earlier request's header has been read
 * (the payload it announces must come first on the stream), and only the head
 * of the queue takes its next step once its event completes: its header read
 * (8 bytes back to the host), then its payload received and copied into the
 * caller's buffer. The payload of a message lives in pool memory only while it
 * is in flight.
 *
 * The copy stream carries only copies, which never wait on a peer, so the host
 * may synchronise with it: a copy to or from pageable memory may synchronise
 * with its stream, and on a pair's stream that could wait for a peer. Every
 * stream is non-blocking, so nothing the caller runs on the legacy default
 * stream waits for a kernel stuck on a peer, nor the other way round. */
#include "cuda/nccl/nccl_transport.h"

#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/result.h"
#include "cuda/nccl/nccl_api.h"
#include "device/device_current.h" /* each operation runs with the NCCL device current */

#define NT_HEADER_BYTES 8
/* NCCL 2.28 takes size_t counts; pieces of 1 GiB stay clear of any int-sized
 * limit inside an older NCCL. Both sides cut a message the same way. */
#define NT_PIECE_BYTES ((size_t)1 << 30)
/* CTAs per private communicator. A kernel waiting for its peer occupies its SMs,
 * and up to 2(p-1) of them may wait at once on a GPU (a receive from every peer,
 * a send to every peer); they must all fit, with room left for the caller's
 * compute. The payload is staged from host memory, so a few CTAs move it as fast
 * as it arrives. */
#define NT_MAX_CTAS 2
/* Waits poll with sched_yield for NT_SPIN_NS, then nap NT_NAP_NS between polls:
 * the data moves on the GPU meanwhile, the host only looks at events. */
#define NT_SPIN_NS 200000
#define NT_NAP_NS 20000L
/* How often a wait asks NCCL for asynchronous errors of the private comms. */
#define NT_ASYNC_CHECK_NS 1000000
/* How long cancel_all and destroy give the streams to drain (at most the timeout). */
#define NT_SETTLE_NS 2000000000LL
#define NT_MAX_BLOCKS 24

enum nt_state { NT_FREE = 0, NT_QUEUED, NT_HEADER, NT_PAYLOAD, NT_SENDING, NT_DONE };

struct nt_req {
  enum nt_state state;
  int is_send;
  int peer;
  int next;                            /* the next request in its queue, or in the free list; -1 ends */
  char* buf;                           /* a send's buffer is only read */
  size_t bytes;                        /* a send's size; a receive's expected size, or irecv_upto's capacity */
  size_t size;                         /* a receive: the size its header announced */
  size_t* got;                         /* irecv_upto: where the size goes; NULL otherwise */
  void* dev;                           /* a receive's payload in device memory, while in flight */
  unsigned char wire[NT_HEADER_BYTES]; /* a send's header: read by an asynchronous copy */
  cudaEvent_t ev;
  gcclResult_t result; /* NT_DONE */
};

/* What this rank has with one peer. For itself: only the receive queue, matched
 * with sends to itself on the host. */
struct nt_peer {
  ncclComm_t send_comm, recv_comm; /* this rank -> peer, peer -> this rank */
  int send_to, recv_from;          /* the peer's rank in send_comm, recv_comm */
  cudaStream_t send_stream, recv_stream;
  int head, tail;     /* receives from the peer, in post order */
  int header_busy;    /* a header receive is in flight (or arrived, not yet read) */
  unsigned char* hdr; /* device: where the headers from the peer land, one at a time */
};

struct nccl_tp {
  struct transport base;
  const struct nccl_api* api;
  int device;
  int64_t timeout_ns;
  ncclComm_t all; /* allgather_small and barrier */
  cudaStream_t all_stream, copy_stream;
  cudaEvent_t all_ev;
  cudaMemPool_t mem; /* device memory of messages in flight: grows, released at destroy */
  int have_mem;
  unsigned char* scratch; /* device: small_in, small_out, the peers' header slots */
  unsigned char *small_in, *small_out;
  struct nt_peer* peers;    /* [nranks] */
  int self_head, self_tail; /* sends to this rank itself, not yet matched */

  struct nt_req** reqs; /* request handles index it; the requests never move */
  int nreqs;
  int free_head;
  struct nt_req* blocks[NT_MAX_BLOCKS];
  int nblocks;

  int64_t async_checked_ns;
  int comms_aborted;
  /* Failure: reason is gcclSuccess while the transport works; the thread that
   * wins `breaking` writes fail_msg, then publishes reason. */
  atomic_int breaking;
  atomic_int reason;
  char fail_msg[256];
};

static struct nccl_tp* nt(struct transport* tp) {
  return (struct nccl_tp*)tp;
}

static int is_broken(struct nccl_tp* t) {
  return atomic_load(&t->reason) != gcclSuccess;
}

static gcclResult_t cuda_fail(cudaError_t e, const char* what) {
  return err_set(gcclSystemError, "CUDA: %s failed: %s", what, cudaGetErrorString(e));
}

static void put_le64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* ---- failure ------------------------------------------------------------------ */

static void break_transport(struct nccl_tp* t, gcclResult_t reason, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void break_transport(struct nccl_tp* t, gcclResult_t reason, const char* fmt, ...) {
  if (atomic_exchange(&t->breaking, 1)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->fail_msg, sizeof t->fail_msg, fmt, ap);
  va_end(ap);
  atomic_store(&t->reason, reason);
}

/* ---- the pair communicators ------------------------------------------------------ */

/* This rank's partner in round `round` of a round-robin tournament of n (even)
 * players, by the circle method: player n-1 stays put, the others rotate; every
 * pair meets exactly once in n-1 rounds. A partner >= nranks is a bye. */
static int partner_of(int x, int round, int n) {
  int m = n - 1;
  if (x == m) return round;
  if (x == round) return m;
  return ((2 * round - x) % m + m) % m;
}

static int rounds_of(int nranks) {
  return nranks + (nranks & 1) - 1;
}

/* Where this rank keeps the communicator of round `round`, direction `dir` (0:
 * the pair's lower rank sends, 1: the higher), and the peer's rank in it; NULL
 * on a bye. Rounds and directions in order are the order in which every rank
 * makes, connects and destroys them: NCCL synchronises a communicator's ranks
 * in each of these, so a rank that went another way would wait for ever. */
static ncclComm_t* pair_slot(struct nccl_tp* t, int round, int dir, int** peer_in_comm) {
  int me = t->base.rank, nranks = t->base.nranks;
  int peer = partner_of(me, round, nranks + (nranks & 1));
  if (peer >= nranks) return NULL;
  struct nt_peer* pe = &t->peers[peer];
  int sending = (dir == 0) == (me < peer);
  if (peer_in_comm) *peer_in_comm = sending ? &pe->send_to : &pe->recv_from;
  return sending ? &pe->send_comm : &pe->recv_comm;
}

/* Destroys (a collective call within a node) or aborts (local; ends kernels
 * stuck on a peer) every private communicator, in the common order. */
static void close_comms(struct nccl_tp* t, int abort) {
  ncclResult_t (*fn)(ncclComm_t) = abort ? t->api->comm_abort : t->api->comm_destroy;
  for (int round = 0; round < rounds_of(t->base.nranks) && t->peers; round++)
    for (int dir = 0; dir < 2; dir++) {
      ncclComm_t* slot = pair_slot(t, round, dir, NULL);
      if (slot && *slot) fn(*slot);
      if (slot) *slot = NULL;
    }
  if (t->all) fn(t->all);
  t->all = NULL;
}

/* Aborts the private communicators once the transport is broken: the transport
 * never uses them again. Only from the thread driving the transport. */
static void abort_comms(struct nccl_tp* t) {
  if (t->comms_aborted) return;
  t->comms_aborted = 1;
  close_comms(t, 1);
}

/* Breaks the transport with the failure just recorded (err_last) and returns it. */
static gcclResult_t fail_transport(struct nccl_tp* t, gcclResult_t res) {
  break_transport(t, res, "%s", err_last());
  abort_comms(t);
  return res;
}

static gcclResult_t fail_broken(struct nccl_tp* t) {
  abort_comms(t); /* broken by abort(), from another thread, or by a wait here */
  return err_set(gcclRemoteError, "rank %d: the communicator is broken: %s", t->base.rank, t->fail_msg);
}

static gcclResult_t time_out(struct nccl_tp* t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

static gcclResult_t time_out(struct nccl_tp* t, const char* fmt, ...) {
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  gcclResult_t res = err_set(gcclTimeout, "rank %d waited %lld ms for %s (GCCL_TIMEOUT_MS)", t->base.rank,
                             (long long)(t->timeout_ns / 1000000), what);
  return fail_transport(t, res);
}

/* Completes request h with a failure, which breaks the transport: the pair's
 * stream is out of step. */
static void req_fail(struct nccl_tp* t, int h, gcclResult_t res) {
  t->reqs[h]->state = NT_DONE;
  t->reqs[h]->result = res;
  fail_transport(t, res);
}

/* Asks NCCL whether a private communicator failed in the background. */
static gcclResult_t check_async(struct nccl_tp* t) {
  for (int i = -1; i < 2 * t->base.nranks; i++) {
    ncclComm_t c = i < 0 ? t->all : i % 2 ? t->peers[i / 2].recv_comm : t->peers[i / 2].send_comm;
    if (c == NULL) continue;
    ncclResult_t e = ncclSuccess;
    ncclResult_t r = t->api->comm_get_async_error(c, &e);
    if (r != ncclSuccess) e = r;
    if (e != ncclSuccess && e != ncclInProgress)
      return fail_transport(t, nccl_fail(t->api, e, c, "an operation on a private communicator"));
  }
  return gcclSuccess;
}

/* One round of a loop that waits for something started at start_ns: an error
 * once the transport is broken or NCCL reports one, gcclTimeout (nothing
 * recorded: the caller says what it waited for) past the timeout; otherwise
 * gives the core away for a moment. */
static gcclResult_t poll_step(struct nccl_tp* t, int64_t start_ns) {
  if (is_broken(t)) return fail_broken(t);
  int64_t now = clock_now_ns();
  if (now - t->async_checked_ns >= NT_ASYNC_CHECK_NS) {
    t->async_checked_ns = now;
    GCCL_CHECK(check_async(t));
  }
  int64_t waited = now - start_ns;
  if (waited >= t->timeout_ns) return gcclTimeout;
  if (waited < NT_SPIN_NS) {
    sched_yield();
  } else {
    struct timespec nap = {0, NT_NAP_NS};
    nanosleep(&nap, NULL);
  }
  return gcclSuccess;
}

/* ---- requests ------------------------------------------------------------------- */

/* Adds `add` request handles, each with its event, in a block of their own. */
static gcclResult_t pool_grow(struct nccl_tp* t, int add) {
  if (t->nblocks == NT_MAX_BLOCKS) return err_set(gcclInternalError, "NCCL transport: %d requests pending", t->nreqs);
  struct nt_req** idx = realloc(t->reqs, (size_t)(t->nreqs + add) * sizeof *idx);
  if (!idx) return err_set(gcclSystemError, "out of memory growing the NCCL request pool");
  t->reqs = idx;
  struct nt_req* block = calloc((size_t)add, sizeof *block);
  if (!block) return err_set(gcclSystemError, "out of memory growing the NCCL request pool");
  for (int i = 0; i < add; i++) {
    cudaError_t e = cudaEventCreateWithFlags(&block[i].ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      while (i-- > 0) cudaEventDestroy(block[i].ev);
      free(block);
      return cuda_fail(e, "creating request events");
    }
  }
  for (int i = 0; i < add; i++) {
    block[i].next = i + 1 < add ? t->nreqs + i + 1 : t->free_head;
    idx[t->nreqs + i] = &block[i];
  }
  t->free_head = t->nreqs;
  t->nreqs += add;
  t->blocks[t->nblocks++] = block;
  return gcclSuccess;
}

static gcclResult_t req_alloc(struct nccl_tp* t, int* h) {
  if (t->free_head < 0) GCCL_CHECK(pool_grow(t, t->nreqs));
  *h = t->free_head;
  t->free_head = t->reqs[*h]->next;
  return gcclSuccess;
}

static void req_release(struct nccl_tp* t, int h) {
  t->reqs[h]->state = NT_FREE;
  t->reqs[h]->next = t->free_head;
  t->free_head = h;
}

/* Appends h to a queue given by its head and tail. */
static void queue_push(struct nccl_tp* t, int* head, int* tail, int h) {
  t->reqs[h]->next = -1;
  if (*tail >= 0)
    t->reqs[*tail]->next = h;
  else
    *head = h;
  *tail = h;
}

static int queue_pop(struct nccl_tp* t, int* head, int* tail) {
  int h = *head;
  *head = t->reqs[h]->next;
  if (*head < 0) *tail = -1;
  return h;
}

/* ---- the wire -------------------------------------------------------------------- */

/* ncclSend / ncclRecv of n bytes at p, in pieces. */
static gcclResult_t move(struct nccl_tp* t, int is_send, unsigned char* p, size_t n, int peer, ncclComm_t comm,
                         cudaStream_t s) {
  for (size_t off = 0; off < n; off += NT_PIECE_BYTES) {
    size_t k = n - off < NT_PIECE_BYTES ? n - off : NT_PIECE_BYTES;
    ncclResult_t r = is_send ? t->api->send(p + off, k, ncclUint8, peer, comm, s)
                             : t->api->recv(p + off, k, ncclUint8, peer, comm, s);
    if (r != ncclSuccess) return nccl_fail(t->api, r, comm, is_send ? "ncclSend" : "ncclRecv");
  }
  return gcclSuccess;
}

/* Stages header and payload on the copy stream, sends them on the pair's stream
 * once copied, and frees the staging after the sends, in stream order. */
static gcclResult_t send_start(struct nccl_tp* t, struct nt_req* r) {
  struct nt_peer* pe = &t->peers[r->peer];
  unsigned char* dev = NULL;
  cudaError_t e = cudaMallocFromPoolAsync((void**)&dev, NT_HEADER_BYTES + r->bytes, t->mem, t->copy_stream);
  if (e != cudaSuccess) return cuda_fail(e, "allocating device memory for a send");
  put_le64(r->wire, r->bytes);
  e = cudaMemcpyAsync(dev, r->wire, NT_HEADER_BYTES, cudaMemcpyHostToDevice, t->copy_stream);
  if (e == cudaSuccess && r->bytes)
    e = cudaMemcpyAsync(dev + NT_HEADER_BYTES, r->buf, r->bytes, cudaMemcpyDefault, t->copy_stream);
  if (e == cudaSuccess) e = cudaEventRecord(r->ev, t->copy_stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(pe->send_stream, r->ev, 0);
  if (e != cudaSuccess) {
    cudaFreeAsync(dev, t->copy_stream);
    return cuda_fail(e, "copying a message to the device");
  }
  gcclResult_t res = move(t, 1, dev, NT_HEADER_BYTES, pe->send_to, pe->send_comm, pe->send_stream);
  if (res == gcclSuccess && r->bytes)
    res = move(t, 1, dev + NT_HEADER_BYTES, r->bytes, pe->send_to, pe->send_comm, pe->send_stream);
  e = cudaFreeAsync(dev, pe->send_stream);
  if (res != gcclSuccess) return res;
  if (e == cudaSuccess) e = cudaEventRecord(r->ev, pe->send_stream);
  if (e != cudaSuccess) return cuda_fail(e, "queueing a send");
  r->state = NT_SENDING;
  return gcclSuccess;
}

static gcclResult_t header_start(struct nccl_tp* t, struct nt_peer* pe, struct nt_req* r) {
  GCCL_CHECK(move(t, 0, pe->hdr, NT_HEADER_BYTES, pe->recv_from, pe->recv_comm, pe->recv_stream));
  cudaError_t e = cudaEventRecord(r->ev, pe->recv_stream);
  if (e != cudaSuccess) return cuda_fail(e, "queueing a receive");
  r->state = NT_HEADER;
  pe->header_busy = 1;
  return gcclSuccess;
}

static void recv_complete(struct nccl_tp* t, struct nt_peer* pe, struct nt_req* r) {
  queue_pop(t, &pe->head, &pe->tail);
  if (r->got) *r->got = r->size;
  r->state = NT_DONE;
  r->result = gcclSuccess;
}

/* The head's header arrived: checks the size, launches the payload's receive,
 * and then the next request's header, which follows it on the wire. */
static gcclResult_t header_arrived(struct nccl_tp* t, struct nt_peer* pe, struct nt_req* r) {
  unsigned char b[NT_HEADER_BYTES];
  cudaError_t e = cudaMemcpyAsync(b, pe->hdr, NT_HEADER_BYTES, cudaMemcpyDeviceToHost, t->copy_stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(t->copy_stream);
  if (e != cudaSuccess) return cuda_fail(e, "reading a message header");
  pe->header_busy = 0;
  uint64_t size = get_le64(b);
  if (r->got ? size > r->bytes : size != r->bytes)
    return err_set(gcclInternalError, "rank %d sent a message of %llu bytes, rank %d expected %s%zu", r->peer,
                   (unsigned long long)size, t->base.rank, r->got ? "at most " : "", r->bytes);
  r->size = (size_t)size;
  int next = r->next;
  if (size == 0) {
    recv_complete(t, pe, r);
  } else {
    e = cudaMallocFromPoolAsync(&r->dev, r->size, t->mem, pe->recv_stream);
    if (e != cudaSuccess) return cuda_fail(e, "allocating device memory for a receive");
    GCCL_CHECK(move(t, 0, r->dev, r->size, pe->recv_from, pe->recv_comm, pe->recv_stream));
    e = cudaEventRecord(r->ev, pe->recv_stream);
    if (e != cudaSuccess) return cuda_fail(e, "queueing a receive");
    r->state = NT_PAYLOAD;
  }
  if (next >= 0) {
    gcclResult_t res = header_start(t, pe, t->reqs[next]);
    if (res != gcclSuccess) req_fail(t, next, res);
  }
  return gcclSuccess;
}

/* The head's payload arrived: into the caller's buffer, and the memory back to the pool. */
static gcclResult_t payload_arrived(struct nccl_tp* t, struct nt_peer* pe, struct nt_req* r) {
  cudaError_t e = cudaMemcpyAsync(r->buf, r->dev, r->size, cudaMemcpyDefault, t->copy_stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(t->copy_stream); /* the buffer may be pinned: async */
  if (e != cudaSuccess) return cuda_fail(e, "copying a message from the device");
  cudaFreeAsync(r->dev, t->copy_stream);
  r->dev = NULL;
  recv_complete(t, pe, r);
  return gcclSuccess;
}

/* Moves the receive queue of peer p along as far as its events allow. */
static void advance(struct nccl_tp* t, int p) {
  struct nt_peer* pe = &t->peers[p];
  while (pe->head >= 0 && !is_broken(t)) {
    int h = pe->head;
    struct nt_req* r = t->reqs[h];
    if (r->state != NT_HEADER && r->state != NT_PAYLOAD) return;
    cudaError_t e = cudaEventQuery(r->ev);
    if (e == cudaErrorNotReady) return;
    gcclResult_t res = e != cudaSuccess        ? cuda_fail(e, "waiting for a receive")
                       : r->state == NT_HEADER ? header_arrived(t, pe, r)
                                               : payload_arrived(t, pe, r);
    if (res != gcclSuccess) {
      req_fail(t, h, res);
      return;
    }
  }
}

static void progress(struct nccl_tp* t) {
  for (int p = 0; p < t->base.nranks; p++)
    if (p != t->base.rank && t->peers[p].head >= 0) advance(t, p);
}

/* Messages to this rank itself: the oldest send meets the oldest receive on the host. */
static void self_match(struct nccl_tp* t) {
  struct nt_peer* pe = &t->peers[t->base.rank];
  while (t->self_head >= 0 && pe->head >= 0) {
    struct nt_req* s = t->reqs[queue_pop(t, &t->self_head, &t->self_tail)];
    struct nt_req* r = t->reqs[queue_pop(t, &pe->head, &pe->tail)];
    gcclResult_t res = gcclSuccess;
    if (r->got ? s->bytes > r->bytes : s->bytes != r->bytes) {
      res = err_set(gcclInternalError, "rank %d sent itself %zu bytes and expected %s%zu", t->base.rank, s->bytes,
                    r->got ? "at most " : "", r->bytes);
    } else {
      if (s->bytes) memmove(r->buf, s->buf, s->bytes);
      if (r->got) *r->got = s->bytes;
    }
    s->state = r->state = NT_DONE;
    s->result = r->result = res;
    if (res != gcclSuccess) fail_transport(t, res);
  }
}

/* ---- transport operations -------------------------------------------------------- */

static gcclResult_t submit(struct nccl_tp* t, int is_send, int peer, const void* buf, size_t bytes, size_t* got,
                           tp_req* out) {
  if (is_broken(t)) return fail_broken(t);
  if (peer < 0 || peer >= t->base.nranks)
    return err_set(gcclInternalError, "NCCL transport: peer %d is not in [0, %d)", peer, t->base.nranks);
  int h = -1;
  GCCL_CHECK(req_alloc(t, &h));
  struct nt_req* r = t->reqs[h];
  cudaEvent_t ev = r->ev;
  *r = (struct nt_req){.state = NT_QUEUED,
                       .is_send = is_send,
                       .peer = peer,
                       .next = -1,
                       .buf = (char*)(uintptr_t)buf,
                       .bytes = bytes,
                       .got = got,
                       .ev = ev};
  struct nt_peer* pe = &t->peers[peer];
  gcclResult_t res = gcclSuccess;
  if (peer == t->base.rank) {
    if (is_send)
      queue_push(t, &t->self_head, &t->self_tail, h);
    else
      queue_push(t, &pe->head, &pe->tail, h);
    self_match(t);
  } else if (is_send) {
    res = send_start(t, r);
    if (res != gcclSuccess) req_release(t, h);
  } else {
    queue_push(t, &pe->head, &pe->tail, h);
    if (!pe->header_busy) res = header_start(t, pe, r);
    /* A failed one stays queued, finished, until cancel_all clears the queues. */
    if (res != gcclSuccess) r->state = NT_DONE;
  }
  if (res != gcclSuccess) return fail_transport(t, res);
  *out = h;
  return gcclSuccess;
}

static gcclResult_t op_submit(struct transport* tp, int is_send, int peer, const void* buf, size_t bytes, size_t* got,
                              tp_req* req) {
  struct nccl_tp* t = nt(tp);
  int prev = device_enter(t->device);
  gcclResult_t res = submit(t, is_send, peer, buf, bytes, got, req);
  device_leave(prev);
  return res;
}

static gcclResult_t nt_isend(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* req) {
  return op_submit(tp, 1, peer, buf, bytes, NULL, req);
}

static gcclResult_t nt_irecv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* req) {
  return op_submit(tp, 0, peer, buf, bytes, NULL, req);
}

static gcclResult_t nt_irecv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got, tp_req* req) {
  return op_submit(tp, 0, peer, buf, cap, got, req);
}

/* A request that fails stays pending until cancel_all withdraws it; its handle
 * is the caller's no more. */
static gcclResult_t wait_req(struct nccl_tp* t, tp_req h) {
  if (h < 0 || h >= t->nreqs || t->reqs[h]->state == NT_FREE) {
    if (is_broken(t)) return fail_broken(t);
    return err_set(gcclInternalError, "NCCL transport: wait on request %d, which is not pending", h);
  }
  int64_t start = clock_now_ns();
  for (;;) {
    if (!is_broken(t)) progress(t);
    struct nt_req* r = t->reqs[h];
    if (r->state == NT_SENDING && !is_broken(t)) {
      cudaError_t e = cudaEventQuery(r->ev);
      if (e == cudaSuccess) {
        r->state = NT_DONE;
        r->result = gcclSuccess;
      } else if (e != cudaErrorNotReady) {
        req_fail(t, h, cuda_fail(e, "waiting for a send"));
      }
    }
    if (r->state == NT_DONE) {
      gcclResult_t res = r->result;
      req_release(t, h);
      return res;
    }
    gcclResult_t res = poll_step(t, start);
    if (res == gcclTimeout) {
      if (r->is_send) return time_out(t, "rank %d to receive its message", r->peer);
      return time_out(t, "a message from rank %d", r->peer);
    }
    if (res != gcclSuccess) return res;
  }
}

static gcclResult_t nt_wait(struct transport* tp, tp_req h) {
  struct nccl_tp* t = nt(tp);
  int prev = device_enter(t->device);
  gcclResult_t res = wait_req(t, h);
  device_leave(prev);
  return res;
}

/* ncclAllGather of `bytes` (at least 1) per rank on `all`, waited for with the
 * timeout; bytes == 0 still synchronises the ranks (a barrier). */
static gcclResult_t gather(struct nccl_tp* t, const void* in, size_t bytes, void* out, const char* what) {
  if (is_broken(t)) return fail_broken(t);
  size_t n = bytes ? bytes : 1;
  cudaError_t e = bytes ? cudaMemcpyAsync(t->small_in, in, bytes, cudaMemcpyHostToDevice, t->all_stream)
                        : cudaMemsetAsync(t->small_in, 0, 1, t->all_stream);
  if (e != cudaSuccess) return fail_transport(t, cuda_fail(e, "copying to the device"));
  ncclResult_t r = t->api->all_gather(t->small_in, t->small_out, n, ncclUint8, t->all, t->all_stream);
  if (r != ncclSuccess) return fail_transport(t, nccl_fail(t->api, r, t->all, "ncclAllGather"));
  if ((e = cudaEventRecord(t->all_ev, t->all_stream)) != cudaSuccess)
    return fail_transport(t, cuda_fail(e, "queueing ncclAllGather"));
  int64_t start = clock_now_ns();
  while ((e = cudaEventQuery(t->all_ev)) == cudaErrorNotReady) {
    progress(t); /* messages may still be arriving for requests not yet waited */
    gcclResult_t res = poll_step(t, start);
    if (res == gcclTimeout) return time_out(t, "every rank to join %s", what);
    if (res != gcclSuccess) return res;
  }
  if (e != cudaSuccess) return fail_transport(t, cuda_fail(e, "ncclAllGather"));
  if (bytes) {
    e = cudaMemcpyAsync(out, t->small_out, bytes * (size_t)t->base.nranks, cudaMemcpyDeviceToHost, t->all_stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(t->all_stream);
    if (e != cudaSuccess) return fail_transport(t, cuda_fail(e, "copying from the device"));
  }
  return gcclSuccess;
}

static gcclResult_t nt_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  struct nccl_tp* t = nt(tp);
  if (bytes > TP_SMALL_MAX) return err_set(gcclInternalError, "allgather_small of %zu bytes", bytes);
  int prev = device_enter(t->device);
  gcclResult_t res = gather(t, in, bytes, out, "ncclAllGather");
  device_leave(prev);
  return res;
}

static gcclResult_t nt_barrier(struct transport* tp) {
  struct nccl_tp* t = nt(tp);
  int prev = device_enter(t->device);
  gcclResult_t res = gather(t, NULL, 0, NULL, "a barrier");
  device_leave(prev);
  return res;
}

/* Waits until every stream is idle or deadline_ns passed; 1 when all are idle. */
static int settle(struct nccl_tp* t, int64_t deadline_ns) {
  for (;;) {
    int busy = 0;
    for (int i = -2; i < 2 * t->base.nranks && !busy; i++) {
      cudaStream_t s = i == -2 ? t->all_stream
                       : i < 0 ? t->copy_stream
                       : i % 2 ? t->peers[i / 2].recv_stream
                               : t->peers[i / 2].send_stream;
      if (s != NULL && cudaStreamQuery(s) == cudaErrorNotReady) busy = 1;
    }
    if (!busy) return 1;
    if (clock_now_ns() >= deadline_ns) return 0;
    struct timespec nap = {0, NT_NAP_NS};
    nanosleep(&nap, NULL);
  }
}

/* Now plus ns, at most the timeout (which may be "for ever"), without overflow. */
static int64_t deadline_after(const struct nccl_tp* t, int64_t ns) {
  int64_t now = clock_now_ns();
  if (ns > t->timeout_ns) ns = t->timeout_ns;
  return ns > INT64_MAX - now ? INT64_MAX : now + ns;
}

static int64_t settle_deadline(const struct nccl_tp* t) {
  return deadline_after(t, NT_SETTLE_NS);
}

/* Withdraws every request. Ones in flight cannot be taken back from NCCL: they
 * break the transport, whose communicators are then aborted, which ends their
 * kernels; the device memory they held goes back to the pool once the streams
 * are idle. */
static void cancel_requests(struct nccl_tp* t) {
  int in_flight = 0;
  for (int h = 0; h < t->nreqs; h++)
    if (t->reqs[h]->state != NT_FREE && t->reqs[h]->state != NT_DONE) in_flight++;
  if (in_flight && !is_broken(t))
    break_transport(t, gcclRemoteError, "rank %d withdrew %d requests in flight", t->base.rank, in_flight);
  if (is_broken(t)) abort_comms(t);
  int idle = settle(t, settle_deadline(t));
  if (!idle)
    GCCL_WARN("NCCL transport: streams still busy %lld ms after the abort", (long long)(NT_SETTLE_NS / 1000000));
  for (int h = 0; h < t->nreqs; h++) {
    struct nt_req* r = t->reqs[h];
    if (r->dev && idle) cudaFreeAsync(r->dev, t->copy_stream);
    r->dev = NULL; /* else leaked: a kernel may still write it */
    r->state = NT_FREE;
    r->next = h + 1 < t->nreqs ? h + 1 : -1;
  }
  t->free_head = t->nreqs ? 0 : -1;
  for (int p = 0; p < t->base.nranks; p++) {
    t->peers[p].head = t->peers[p].tail = -1;
    t->peers[p].header_busy = 0;
  }
  t->self_head = t->self_tail = -1;
}

static void nt_cancel_all(struct transport* tp) {
  struct nccl_tp* t = nt(tp);
  int pending = 0;
  for (int h = 0; h < t->nreqs; h++) pending |= t->reqs[h]->state != NT_FREE;
  if (!pending) return; /* e.g. after a mismatch found by the agreement: still usable */
  int prev = device_enter(t->device);
  cancel_requests(t);
  device_leave(prev);
}

static void nt_abort(struct transport* tp, gcclResult_t reason) {
  struct nccl_tp* t = nt(tp);
  break_transport(t, reason, "rank %d aborted the communicator (%s)", tp->rank, gcclGetErrorString(reason));
}

static gcclResult_t nt_broken(struct transport* tp) {
  return (gcclResult_t)atomic_load(&nt(tp)->reason);
}

/* Frees everything; the communicators are destroyed when the transport is
 * healthy and idle, else aborted. */
static void nt_free(struct nccl_tp* t) {
  int prev = device_enter(t->device);
  if (t->reqs) cancel_requests(t);
  if (!is_broken(t) && !settle(t, settle_deadline(t)))
    break_transport(t, gcclRemoteError, "rank %d destroyed the communicator with messages in flight", t->base.rank);
  if (is_broken(t))
    abort_comms(t);
  else
    close_comms(t, 0); /* waits for the peers on this node to destroy theirs */
  for (int p = 0; p < t->base.nranks && t->peers; p++) {
    if (t->peers[p].send_stream) cudaStreamDestroy(t->peers[p].send_stream);
    if (t->peers[p].recv_stream) cudaStreamDestroy(t->peers[p].recv_stream);
  }
  if (t->scratch) {
    cudaFreeAsync(t->scratch, t->copy_stream);
    cudaStreamSynchronize(t->copy_stream);
  }
  if (t->all_ev) cudaEventDestroy(t->all_ev);
  if (t->all_stream) cudaStreamDestroy(t->all_stream);
  if (t->copy_stream) cudaStreamDestroy(t->copy_stream);
  for (int h = 0; h < t->nreqs; h++) cudaEventDestroy(t->reqs[h]->ev);
  for (int b = 0; b < t->nblocks; b++) free(t->blocks[b]);
  if (t->have_mem) cudaMemPoolDestroy(t->mem);
  device_leave(prev);
  free(t->reqs);
  free(t->peers);
  free(t);
}

static void nt_destroy(struct transport* tp) {
  nt_free(nt(tp));
}

static const struct transport_ops nccl_ops = {
    .name = "nccl",
    .isend = nt_isend,
    .irecv = nt_irecv,
    .irecv_upto = nt_irecv_upto,
    .wait = nt_wait,
    .allgather_small = nt_allgather_small,
    .barrier = nt_barrier,
    .cancel_all = nt_cancel_all,
    .abort = nt_abort,
    .broken = nt_broken,
    .destroy = nt_destroy,
};

/* ---- setup ----------------------------------------------------------------------- */

/* One ncclCommSplit of parent with the transport's configuration. */
static gcclResult_t split(struct nccl_tp* t, ncclComm_t parent, int color, int key, ncclComm_t* out) {
  /* Blocking, so that every later call is synchronous; no shared resources,
   * which would serialise the pairs' kernels; few CTAs (NT_MAX_CTAS). */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  cfg.splitShare = 0;
  cfg.minCTAs = 1;
  cfg.maxCTAs = NT_MAX_CTAS;
  *out = NULL;
  /* NCCL writes the new communicator from a thread of its own when the parent is
   * non-blocking (the caller's may be): into a cell that outlives a timeout. */
  ncclComm_t* cell = calloc(1, sizeof *cell);
  if (!cell) return err_set(gcclSystemError, "out of memory splitting a communicator");
  ncclResult_t r = t->api->comm_split(parent, color, key, cell, &cfg);
  int64_t start = clock_now_ns();
  ncclComm_t made = NULL;
  while (r == ncclInProgress) {
    made = __atomic_load_n(cell, __ATOMIC_ACQUIRE);
    if (made && t->api->comm_get_async_error(made, &r) != ncclSuccess) r = ncclInternalError;
    if (r == ncclInProgress && clock_now_ns() - start >= t->timeout_ns) {
      GCCL_WARN("ncclCommSplit still running after %lld ms: abandoned", (long long)(t->timeout_ns / 1000000));
      return err_set(gcclTimeout, "ncclCommSplit did not finish within %lld ms (GCCL_TIMEOUT_MS)",
                     (long long)(t->timeout_ns / 1000000));
    }
    struct timespec nap = {0, NT_NAP_NS};
    nanosleep(&nap, NULL);
  }
  if (r != ncclSuccess) {
    if (made) t->api->comm_abort(made); /* a failed non-blocking split leaves it to the caller */
    free(cell);
    return nccl_fail(t->api, r, parent, "ncclCommSplit");
  }
  *out = *cell;
  free(cell);
  return gcclSuccess;
}

/* Every rank's `mine`, learnt by all: the first failure, or gcclSuccess. */
static gcclResult_t agree(struct nccl_tp* t, gcclResult_t mine, const char* step) {
  int32_t me = (int32_t)mine;
  int32_t* all = malloc((size_t)t->base.nranks * sizeof *all);
  if (!all) return err_set(gcclSystemError, "gcclCommInitNccl: out of memory for %d ranks", t->base.nranks);
  gcclResult_t res = gather(t, &me, sizeof me, all, "the setup");
  for (int r = 0; r < t->base.nranks && res == gcclSuccess && mine == gcclSuccess; r++)
    if (all[r] != gcclSuccess)
      res = err_set(gcclSystemError, "gcclCommInitNccl: rank %d could not %s (%s)", r, step,
                    gcclGetErrorString((gcclResult_t)all[r]));
  free(all);
  return mine != gcclSuccess ? mine : res;
}

/* Two splits of `all` per round, in the common order: the pair's lower ->
 * higher communicator, then higher -> lower, each with its sender first. Every
 * split is made even after one failed, since the other ranks wait in each. */
static gcclResult_t split_pairs(struct nccl_tp* t) {
  int me = t->base.rank, n = t->base.nranks + (t->base.nranks & 1);
  gcclResult_t res = gcclSuccess;
  for (int round = 0; round < rounds_of(t->base.nranks); round++) {
    int peer = partner_of(me, round, n);
    for (int dir = 0; dir < 2; dir++) {
      int* peer_in_comm = NULL;
      ncclComm_t* slot = pair_slot(t, round, dir, &peer_in_comm);
      ncclComm_t bye = NULL;
      int sending = slot && slot == &t->peers[peer].send_comm;
      gcclResult_t r =
          split(t, t->all, slot ? (me < peer ? me : peer) : NCCL_SPLIT_NOCOLOR, sending ? 0 : 1, slot ? slot : &bye);
      if (r == gcclSuccess && slot) {
        int in_pair = 0;
        ncclResult_t nr = t->api->comm_user_rank(*slot, &in_pair);
        *peer_in_comm = 1 - in_pair;
        if (nr != ncclSuccess) r = nccl_fail(t->api, nr, *slot, "ncclCommUserRank");
      }
      if (res == gcclSuccess) res = r;
    }
  }
  return res;
}

/* A one-byte message each way on every pair, round by round, lower -> higher
 * first: NCCL connects a pair on its first message, which blocks the host until
 * the peer connects too, so it must happen here, in the same order everywhere
 * (and every round is run even after a failure: the partners wait in it). */
static gcclResult_t connect_pairs(struct nccl_tp* t) {
  int me = t->base.rank, n = t->base.nranks + (t->base.nranks & 1);
  gcclResult_t res = gcclSuccess;
  for (int round = 0; round < rounds_of(t->base.nranks); round++) {
    int peer = partner_of(me, round, n);
    for (int dir = 0; dir < 2; dir++) {
      ncclComm_t* slot = pair_slot(t, round, dir, NULL);
      if (!slot) continue;
      struct nt_peer* pe = &t->peers[peer];
      gcclResult_t r = slot == &pe->send_comm ? move(t, 1, t->small_in, 1, pe->send_to, pe->send_comm, pe->send_stream)
                                              : move(t, 0, pe->hdr, 1, pe->recv_from, pe->recv_comm, pe->recv_stream);
      if (res == gcclSuccess) res = r;
    }
  }
  if (res != gcclSuccess) return res;
  if (!settle(t, deadline_after(t, t->timeout_ns)))
    return err_set(gcclTimeout, "rank %d waited %lld ms for its peers to connect (GCCL_TIMEOUT_MS)", me,
                   (long long)(t->timeout_ns / 1000000));
  return check_async(t);
}

/* What allgather_small, and so the agreement, needs. */
static gcclResult_t setup_gather(struct nccl_tp* t) {
  cudaError_t e = cudaStreamCreateWithFlags(&t->all_stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&t->copy_stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&t->all_ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return cuda_fail(e, "creating streams");
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = t->device;
  if ((e = cudaMemPoolCreate(&t->mem, &props)) != cudaSuccess) return cuda_fail(e, "creating a memory pool");
  t->have_mem = 1;
  uint64_t keep = UINT64_MAX; /* memory freed to the pool stays there for the next messages */
  if ((e = cudaMemPoolSetAttribute(t->mem, cudaMemPoolAttrReleaseThreshold, &keep)) != cudaSuccess)
    return cuda_fail(e, "configuring a memory pool");
  size_t n = (size_t)t->base.nranks;
  e = cudaMallocFromPoolAsync((void**)&t->scratch, TP_SMALL_MAX * (1 + n) + NT_HEADER_BYTES * n, t->mem,
                              t->copy_stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(t->copy_stream);
  if (e != cudaSuccess) return cuda_fail(e, "allocating device memory");
  t->small_in = t->scratch;
  t->small_out = t->scratch + TP_SMALL_MAX;
  for (size_t p = 0; p < n; p++) t->peers[p].hdr = t->scratch + TP_SMALL_MAX * (1 + n) + NT_HEADER_BYTES * p;
  return gcclSuccess;
}

static gcclResult_t setup_rest(struct nccl_tp* t) {
  GCCL_CHECK(pool_grow(t, 32 + 4 * t->base.nranks)); /* linear algorithms post one request per peer */
  for (int p = 0; p < t->base.nranks; p++) {
    if (p == t->base.rank) continue;
    cudaError_t e = cudaStreamCreateWithFlags(&t->peers[p].send_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&t->peers[p].recv_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cuda_fail(e, "creating streams");
  }
  return gcclSuccess;
}

/* CUDA feeds a process's streams to the GPU through CUDA_DEVICE_MAX_CONNECTIONS
 * hardware queues (8 unless set, at most 32); streams that share a queue can
 * wait for each other's work, and the pair streams' kernels wait on peers. */
static void warn_queues(int nranks) {
  int streams = 2 * (nranks - 1) + 2;
  const char* env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  int queues = env ? atoi(env) : 8;
  if (streams > queues)
    GCCL_WARN(
        "NCCL transport: %d CUDA streams per GPU share %d hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): a "
        "receive waiting for one peer may hold up other messages; set CUDA_DEVICE_MAX_CONNECTIONS=32",
        streams, queues);
}

static gcclResult_t create(struct nccl_tp* t, ncclComm_t user, gcclResult_t mine) {
  warn_queues(t->base.nranks);
  int64_t start = clock_now_ns();
  GCCL_CHECK(split(t, user, 0, t->base.rank, &t->all));
  GCCL_CHECK(setup_gather(t)); /* without it this rank cannot agree: the others time out */
  gcclResult_t res = mine != gcclSuccess ? mine : setup_rest(t);
  GCCL_CHECK(agree(t, res, "set up its part of the communicator"));
  GCCL_CHECK(agree(t, split_pairs(t), "split the pair communicators"));
  GCCL_CHECK(agree(t, connect_pairs(t), "connect its pairs"));
  GCCL_INFO(LOG_INIT, "NCCL transport on device %d: %d pair communicators from %d splits in %.1f ms", t->device,
            2 * (t->base.nranks - 1), 1 + 2 * rounds_of(t->base.nranks), (clock_now_ns() - start) / 1e6);
  return gcclSuccess;
}

gcclResult_t nccl_transport_create(struct transport** out, ncclComm_t user, int64_t timeout_ms, gcclResult_t mine) {
  *out = NULL;
  const struct nccl_api* api = NULL;
  GCCL_CHECK(nccl_api_get(&api));
  int rank = 0, nranks = 0, device = 0;
  ncclResult_t r = api->comm_user_rank(user, &rank);
  if (r == ncclSuccess) r = api->comm_count(user, &nranks);
  if (r == ncclSuccess) r = api->comm_cu_device(user, &device);
  if (r != ncclSuccess) return nccl_fail(api, r, user, "querying the communicator");
  struct nccl_tp* t = calloc(1, sizeof *t);
  if (t) t->peers = calloc((size_t)nranks, sizeof *t->peers);
  if (!t || !t->peers) {
    free(t);
    return err_set(gcclSystemError, "out of memory creating the NCCL transport for %d ranks", nranks);
  }
  t->api = api;
  t->device = device;
  t->timeout_ns = timeout_ms * 1000000;
  t->free_head = t->self_head = t->self_tail = -1;
  for (int p = 0; p < nranks; p++) t->peers[p].head = t->peers[p].tail = -1;
  t->base.ops = &nccl_ops;
  t->base.rank = rank;
  t->base.nranks = nranks;
  t->base.shares_address_space = 0;
  t->base.caller_thread_only = 0;
  int prev = device_enter(t->device);
  gcclResult_t res = create(t, user, mine);
  device_leave(prev);
  if (res != gcclSuccess) {
    /* Aborted, not destroyed: destroying synchronises the ranks of a node, and a
     * peer whose split failed holds no such communicator. */
    break_transport(t, res, "its setup failed");
    nt_free(t);
    return res;
  }
  *out = &t->base;
  return gcclSuccess;
}
