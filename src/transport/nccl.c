/* nccl.c — the NCCL transport (nccl.h): its operations, its waits, its failure,
 * its creation and its teardown. Its messages (staging, headers, payloads, the
 * receive queues) are nccl_wire.c's; its private communicators nccl_setup.c's.
 *
 * Waits poll CUDA events; every poll also moves every peer's queue of receives
 * along, and now and then asks NCCL for asynchronous errors. Every operation
 * runs with the NCCL communicator's device current (device_enter) and gives the
 * caller's back. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/result.h"
#include "device/device_current.h" /* each operation runs with the NCCL device current */
#include "transport/deadline.h"
#include "transport/nccl_internal.h"

static struct nccl_tp* nt(struct transport* tp) {
  return (struct nccl_tp*)tp;
}

/* ---- failure ------------------------------------------------------------------ */

/* Aborts the private communicators once the transport is broken: the transport
 * never uses them again. Only from the thread driving the transport. */
static void abort_comms(struct nccl_tp* t) {
  if (t->comms_aborted) return;
  t->comms_aborted = 1;
  nccl_setup_close_comms(t, 1);
}

gcclResult_t nccl_tp_fail(struct nccl_tp* t, gcclResult_t res) {
  tp_break(&t->brk, res, "%s", err_last());
  abort_comms(t);
  return res;
}

gcclResult_t nccl_tp_fail_broken(struct nccl_tp* t) {
  abort_comms(t); /* broken by abort(), from another thread, or by a wait here */
  return tp_broken_error(&t->brk, t->base.rank);
}

static gcclResult_t time_out(struct nccl_tp* t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

static gcclResult_t time_out(struct nccl_tp* t, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gcclResult_t res = deadline_expired(t->base.rank, t->timeout_ns, fmt, ap);
  va_end(ap);
  return nccl_tp_fail(t, res);
}

gcclResult_t nccl_tp_check_async(struct nccl_tp* t) {
  for (int i = -1; i < 2 * t->base.nranks; i++) {
    ncclComm_t c = i < 0 ? t->all : i % 2 ? t->peers[i / 2].recv_comm : t->peers[i / 2].send_comm;
    if (c == NULL) continue;
    ncclResult_t e = ncclSuccess;
    ncclResult_t r = t->api->comm_get_async_error(c, &e);
    if (r != ncclSuccess) e = r;
    if (e != ncclSuccess && e != ncclInProgress)
      return nccl_tp_fail(t, nccl_fail(t->api, e, c, "an operation on a private communicator"));
  }
  return gcclSuccess;
}

/* One round of a loop that waits for something started at start_ns: an error
 * once the transport is broken or NCCL reports one, gcclTimeout (nothing
 * recorded: the caller says what it waited for) past the timeout; otherwise
 * gives the core away for a moment. */
static gcclResult_t poll_step(struct nccl_tp* t, int64_t start_ns) {
  if (is_broken(t)) return nccl_tp_fail_broken(t);
  int64_t now = clock_now_ns();
  if (now - t->async_checked_ns >= NT_ASYNC_CHECK_NS) {
    t->async_checked_ns = now;
    GCCL_CHECK(nccl_tp_check_async(t));
  }
  return deadline_pause(start_ns, now, t->timeout_ns, NT_SPIN_NS, NT_NAP_NS);
}

/* ---- transport operations -------------------------------------------------------- */

static gcclResult_t op_submit(struct transport* tp, int is_send, int peer, const void* buf, size_t bytes, size_t* got,
                              tp_req* req) {
  struct nccl_tp* t = nt(tp);
  int prev = device_enter(t->device);
  gcclResult_t res = nccl_wire_submit(t, is_send, peer, buf, bytes, got, req);
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
    if (is_broken(t)) return nccl_tp_fail_broken(t);
    return err_set(gcclInternalError, "NCCL transport: wait on request %d, which is not pending", h);
  }
  int64_t start = clock_now_ns();
  for (;;) {
    if (!is_broken(t)) nccl_wire_progress(t);
    struct nt_req* r = t->reqs[h];
    if (r->state == NT_SENDING && !is_broken(t)) {
      cudaError_t e = cudaEventQuery(r->ev);
      if (e == cudaSuccess) {
        r->state = NT_DONE;
        r->result = gcclSuccess;
      } else if (e != cudaErrorNotReady) {
        nccl_wire_req_fail(t, h, cuda_fail(e, "waiting for a send"));
      }
    }
    if (r->state == NT_DONE) {
      gcclResult_t res = r->result;
      nccl_wire_release(t, h);
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

gcclResult_t nccl_tp_gather(struct nccl_tp* t, const void* in, size_t bytes, void* out, const char* what) {
  if (is_broken(t)) return nccl_tp_fail_broken(t);
  size_t n = bytes ? bytes : 1;
  cudaError_t e = bytes ? cudaMemcpyAsync(t->small_in, in, bytes, cudaMemcpyHostToDevice, t->all_stream)
                        : cudaMemsetAsync(t->small_in, 0, 1, t->all_stream);
  if (e != cudaSuccess) return nccl_tp_fail(t, cuda_fail(e, "copying to the device"));
  ncclResult_t r = t->api->all_gather(t->small_in, t->small_out, n, ncclUint8, t->all, t->all_stream);
  if (r != ncclSuccess) return nccl_tp_fail(t, nccl_fail(t->api, r, t->all, "ncclAllGather"));
  if ((e = cudaEventRecord(t->all_ev, t->all_stream)) != cudaSuccess)
    return nccl_tp_fail(t, cuda_fail(e, "queueing ncclAllGather"));
  int64_t start = clock_now_ns();
  while ((e = cudaEventQuery(t->all_ev)) == cudaErrorNotReady) {
    nccl_wire_progress(t); /* messages may still be arriving for requests not yet waited */
    gcclResult_t res = poll_step(t, start);
    if (res == gcclTimeout) return time_out(t, "every rank to join %s", what);
    if (res != gcclSuccess) return res;
  }
  if (e != cudaSuccess) return nccl_tp_fail(t, cuda_fail(e, "ncclAllGather"));
  if (bytes) {
    e = cudaMemcpyAsync(out, t->small_out, bytes * (size_t)t->base.nranks, cudaMemcpyDeviceToHost, t->all_stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(t->all_stream);
    if (e != cudaSuccess) return nccl_tp_fail(t, cuda_fail(e, "copying from the device"));
  }
  return gcclSuccess;
}

static gcclResult_t nt_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  struct nccl_tp* t = nt(tp);
  if (bytes > TP_SMALL_MAX) return err_set(gcclInternalError, "allgather_small of %zu bytes", bytes);
  int prev = device_enter(t->device);
  gcclResult_t res = nccl_tp_gather(t, in, bytes, out, "ncclAllGather");
  device_leave(prev);
  return res;
}

static gcclResult_t nt_barrier(struct transport* tp) {
  struct nccl_tp* t = nt(tp);
  int prev = device_enter(t->device);
  gcclResult_t res = nccl_tp_gather(t, NULL, 0, NULL, "a barrier");
  device_leave(prev);
  return res;
}

int nccl_tp_settle(struct nccl_tp* t, int64_t deadline_ns) {
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

static int64_t settle_deadline(const struct nccl_tp* t) {
  return deadline_after(t->timeout_ns, NT_SETTLE_NS);
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
    tp_break(&t->brk, gcclRemoteError, "rank %d withdrew %d requests in flight", t->base.rank, in_flight);
  if (is_broken(t)) abort_comms(t);
  int idle = nccl_tp_settle(t, settle_deadline(t));
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
  tp_break(&t->brk, reason, "rank %d aborted the communicator (%s)", tp->rank, gcclGetErrorString(reason));
}

static gcclResult_t nt_broken(struct transport* tp) {
  return tp_break_reason(&nt(tp)->brk);
}

/* Frees everything; the communicators are destroyed when the transport is
 * healthy and idle, else aborted. */
static void nt_free(struct nccl_tp* t) {
  int prev = device_enter(t->device);
  if (t->reqs) cancel_requests(t);
  if (!is_broken(t) && !nccl_tp_settle(t, settle_deadline(t)))
    tp_break(&t->brk, gcclRemoteError, "rank %d destroyed the communicator with messages in flight", t->base.rank);
  if (is_broken(t))
    abort_comms(t);
  else
    nccl_setup_close_comms(t, 0); /* waits for the peers on this node to destroy theirs */
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

/* ---- creation -------------------------------------------------------------------- */

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
  gcclResult_t res = nccl_setup(t, user, mine);
  device_leave(prev);
  if (res != gcclSuccess) {
    /* Aborted, not destroyed: destroying synchronises the ranks of a node, and a
     * peer whose split failed holds no such communicator. */
    tp_break(&t->brk, res, "its setup failed");
    nt_free(t);
    return res;
  }
  *out = &t->base;
  return gcclSuccess;
}
