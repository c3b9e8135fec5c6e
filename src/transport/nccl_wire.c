/* nccl_wire.c — the NCCL transport's messages (nccl_internal.h).
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/nccl_internal.h"

static void put_le64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* ---- requests ------------------------------------------------------------------- */

/* Adds `add` request handles, each with its event, in a block of their own. */
gcclResult_t nccl_wire_pool_grow(struct nccl_tp* t, int add) {
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
  if (t->free_head < 0) GCCL_CHECK(nccl_wire_pool_grow(t, t->nreqs));
  *h = t->free_head;
  t->free_head = t->reqs[*h]->next;
  return gcclSuccess;
}

void nccl_wire_release(struct nccl_tp* t, int h) {
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

void nccl_wire_req_fail(struct nccl_tp* t, int h, gcclResult_t res) {
  t->reqs[h]->state = NT_DONE;
  t->reqs[h]->result = res;
  nccl_tp_fail(t, res);
}

/* ---- the wire -------------------------------------------------------------------- */

gcclResult_t nccl_wire_move(struct nccl_tp* t, int is_send, unsigned char* p, size_t n, int peer, ncclComm_t comm,
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
  gcclResult_t res = nccl_wire_move(t, 1, dev, NT_HEADER_BYTES, pe->send_to, pe->send_comm, pe->send_stream);
  if (res == gcclSuccess && r->bytes)
    res = nccl_wire_move(t, 1, dev + NT_HEADER_BYTES, r->bytes, pe->send_to, pe->send_comm, pe->send_stream);
  e = cudaFreeAsync(dev, pe->send_stream);
  if (res != gcclSuccess) return res;
  if (e == cudaSuccess) e = cudaEventRecord(r->ev, pe->send_stream);
  if (e != cudaSuccess) return cuda_fail(e, "queueing a send");
  r->state = NT_SENDING;
  return gcclSuccess;
}

static gcclResult_t header_start(struct nccl_tp* t, struct nt_peer* pe, struct nt_req* r) {
  GCCL_CHECK(nccl_wire_move(t, 0, pe->hdr, NT_HEADER_BYTES, pe->recv_from, pe->recv_comm, pe->recv_stream));
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
    GCCL_CHECK(nccl_wire_move(t, 0, r->dev, r->size, pe->recv_from, pe->recv_comm, pe->recv_stream));
    e = cudaEventRecord(r->ev, pe->recv_stream);
    if (e != cudaSuccess) return cuda_fail(e, "queueing a receive");
    r->state = NT_PAYLOAD;
  }
  if (next >= 0) {
    gcclResult_t res = header_start(t, pe, t->reqs[next]);
    if (res != gcclSuccess) nccl_wire_req_fail(t, next, res);
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
      nccl_wire_req_fail(t, h, res);
      return;
    }
  }
}

void nccl_wire_progress(struct nccl_tp* t) {
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
    if (res != gcclSuccess) nccl_tp_fail(t, res);
  }
}

gcclResult_t nccl_wire_submit(struct nccl_tp* t, int is_send, int peer, const void* buf, size_t bytes, size_t* got,
                              tp_req* out) {
  if (is_broken(t)) return nccl_tp_fail_broken(t);
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
    if (res != gcclSuccess) nccl_wire_release(t, h);
  } else {
    queue_push(t, &pe->head, &pe->tail, h);
    if (!pe->header_busy) res = header_start(t, pe, r);
    /* A failed one stays queued, finished, until cancel_all clears the queues. */
    if (res != gcclSuccess) r->state = NT_DONE;
  }
  if (res != gcclSuccess) return nccl_tp_fail(t, res);
  *out = h;
  return gcclSuccess;
}
