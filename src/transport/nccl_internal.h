/* nccl_internal.h — the NCCL transport's state, shared by its files: nccl.c (the
 * operations, waits, failure, creation and teardown), nccl_wire.c (messages:
 * requests, staging, headers and payloads on the pair streams) and nccl_setup.c
 * (the private communicators). Nothing outside them includes it. */
#ifndef GCCL_TRANSPORT_NCCL_INTERNAL_H
#define GCCL_TRANSPORT_NCCL_INTERNAL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>

#include "common/result.h"
#include "cuda/nccl/nccl_api.h"
#include "transport/deadline.h"
#include "transport/nccl.h"

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
  struct tp_break brk; /* brk.reason is gcclSuccess while the transport works */
};

static inline int is_broken(struct nccl_tp* t) {
  return tp_break_reason(&t->brk) != gcclSuccess;
}

static inline gcclResult_t cuda_fail(cudaError_t e, const char* what) {
  return err_set(gcclSystemError, "CUDA: %s failed: %s", what, cudaGetErrorString(e));
}

/* ---- nccl.c: failure, collectives on `all`, draining ----------------------------- */

/* Breaks the transport with the failure just recorded (err_last), aborts the
 * private communicators (from the thread driving the transport only) and
 * returns res. */
gcclResult_t nccl_tp_fail(struct nccl_tp* t, gcclResult_t res);

/* The error of an operation that finds the transport broken (gcclRemoteError);
 * aborts the private communicators first. */
gcclResult_t nccl_tp_fail_broken(struct nccl_tp* t);

/* Asks NCCL whether a private communicator failed in the background; a failure
 * breaks the transport. */
gcclResult_t nccl_tp_check_async(struct nccl_tp* t);

/* ncclAllGather of `bytes` (at least 1) per rank on `all`, waited for with the
 * timeout; bytes == 0 still synchronises the ranks (a barrier). `what` names it
 * in a timeout's message. A failure breaks the transport. */
gcclResult_t nccl_tp_gather(struct nccl_tp* t, const void* in, size_t bytes, void* out, const char* what);

/* Waits until every stream is idle or deadline_ns passed; 1 when all are idle. */
int nccl_tp_settle(struct nccl_tp* t, int64_t deadline_ns);

/* ---- nccl_wire.c: messages ---------------------------------------------------------- */

/* Adds `add` request handles, each with its event, in a block of their own. */
gcclResult_t nccl_wire_pool_grow(struct nccl_tp* t, int add);

/* ncclSend (is_send) or ncclRecv of n bytes at device address p with `peer` of
 * comm, on stream s, in pieces. */
gcclResult_t nccl_wire_move(struct nccl_tp* t, int is_send, unsigned char* p, size_t n, int peer, ncclComm_t comm,
                            cudaStream_t s);

/* Posts a send (is_send) or a receive of `bytes` (with got: up to `bytes`);
 * *out = its handle. A failure breaks the transport. The NCCL device must be
 * current. */
gcclResult_t nccl_wire_submit(struct nccl_tp* t, int is_send, int peer, const void* buf, size_t bytes, size_t* got,
                              tp_req* out);

/* Moves every peer's receive queue along as far as its events allow. */
void nccl_wire_progress(struct nccl_tp* t);

/* Completes request h with a failure, which breaks the transport: the pair's
 * stream is out of step. */
void nccl_wire_req_fail(struct nccl_tp* t, int h, gcclResult_t res);

/* Returns handle h to the free list. */
void nccl_wire_release(struct nccl_tp* t, int h);

/* ---- nccl_setup.c: the private communicators ------------------------------------------ */

/* Makes `all` from user, the buffers allgather_small needs, and the pair
 * communicators, and connects the pairs; collective over user's ranks, each
 * step agreed on by all (see nccl_transport_create for `mine`). */
gcclResult_t nccl_setup(struct nccl_tp* t, ncclComm_t user, gcclResult_t mine);

/* Destroys (a collective call within a node) or aborts (local; ends kernels
 * stuck on a peer) every private communicator, in the common order. */
void nccl_setup_close_comms(struct nccl_tp* t, int abort);

#endif
