/* transport.h — point-to-point byte movement between the ranks of a communicator.
 *
 * Collectives are written only in these primitives. A transport knows nothing of
 * datatypes, reductions or codecs. Requests are small handles from a per-rank pool
 * owned by the transport, so an error path can withdraw them safely
 * (tp_cancel_all) and nothing is allocated per message.
 *
 * Ordering: messages between one (sender, receiver) pair match in the order they
 * were posted, as MPI's non-overtaking rule with a single tag. A send's bytes must
 * equal the matching receive's bytes (gcclInternalError otherwise).
 *
 * Every wait ends with gcclTimeout after the transport's timeout, or with
 * gcclRemoteError as soon as any rank aborted or failed; both leave the transport
 * broken (every later call fails at once). */
#ifndef GCCL_TRANSPORT_H
#define GCCL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "gccl.h"

typedef int tp_req; /* request handle, >= 0 */

/* Largest message tp_allgather_small carries per rank. */
#define TP_SMALL_MAX 512

/* Largest record a rank posts on a board (board_post). */
#define TP_BOARD_MAX_BYTES ((size_t)64 << 10)

/* One step of an exchange of tagged messages (transport_ops.step_tagged): a send
 * to `to` and a receive from `from` (-1: none), posted together and waited for
 * together. */
struct tp_tagged_step {
  int to, from;
  const void* sbuf;
  size_t sbytes;
  uint32_t stag;
  void* rbuf;
  size_t cap;    /* the receive takes the peer's next tagged message of up to cap bytes */
  size_t got;    /* set by the step: the received message's bytes */
  uint32_t rtag; /* ... and its tag */
  /* NULL, or called once the send is posted, before the wait: posts messages
   * that must reach `to` after the tagged one (collectives/in_band.h). */
  gcclResult_t (*after_send)(void* arg, int peer);
  void* after_send_arg;
};

/* One rank's record on a board: the hash of its call and its data. */
struct tp_post {
  uint64_t hash;
  size_t bytes;
  const void* data;
};

struct transport;

struct transport_ops {
  const char* name;
  /* Post a send / receive; the buffer must stay valid until the request completes. */
  gcclResult_t (*isend)(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* req);
  gcclResult_t (*irecv)(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* req);
  /* A receive of a message whose size the receiver does not know (a compressed
   * frame): up to cap bytes; *got is set when the request completes. A larger
   * message fails the request with gcclInternalError. */
  gcclResult_t (*irecv_upto)(struct transport* tp, int peer, void* buf, size_t cap, size_t* got, tp_req* req);
  /* Block until req completes; the handle is released whatever the result. */
  gcclResult_t (*wait)(struct transport* tp, tp_req req);
  /* Every rank contributes `bytes` (<= TP_SMALL_MAX, same on all ranks) bytes of
   * `in`; `out` receives nranks * bytes, rank r's at out + r*bytes. A barrier. */
  gcclResult_t (*allgather_small)(struct transport* tp, const void* in, size_t bytes, void* out);
  gcclResult_t (*barrier)(struct transport* tp);
  /* After a failure: withdraw this rank's pending requests; returns once no peer
   * can still touch this rank's buffers. Never fails. */
  void (*cancel_all)(struct transport* tp);
  /* Marks every rank of the transport broken with `reason` and wakes all waiters
   * (they return gcclRemoteError). Safe from any thread. */
  void (*abort)(struct transport* tp, gcclResult_t reason);
  /* The reason the transport is broken, or gcclSuccess, as this rank knows it
   * now: it sends and receives nothing (every call asks twice). */
  gcclResult_t (*broken)(struct transport* tp);
  void (*destroy)(struct transport* tp);
  /* Optional (NULL: messages move without the caller, as between threads): lets
   * pending messages move without waiting for any. MPI moves a message only
   * inside MPI calls and answers a large message's handshake there, so a
   * schedule calls this between slices of long codec work: a peer's send then
   * starts when it arrives, not when this rank next waits. */
  void (*progress)(struct transport* tp);
  /* Optional (NULL where news of a peer's failure needs no polling): takes in such
   * news that came while this rank waited for nothing, so that `broken` tells it.
   * gcclCommGetAsyncError calls it, for a watchdog between calls; calls do not:
   * their waits take it in. */
  void (*hear_peers)(struct transport* tp);
  /* Optional (transports that agree in band; NULL otherwise): one step of
   * messages that carry a tag of TP_TAG_BITS bits beside their bytes, in the pair
   * order of the untagged ones, posted and waited for in one operation (struct
   * tp_tagged_step). A tagged receive takes the peer's next tagged message
   * whatever its tag, up to cap bytes, and reports the tag; empty messages
   * travel too. The caller never leaves an untagged message from that peer
   * unreceived before it. One operation rather than posts and waits: these are a
   * small call's only messages, and every layer between the call and MPI shows in
   * its time (BENCHMARKS.md, issue 30). On failure nothing of the step is left
   * pending. */
  gcclResult_t (*step_tagged)(struct transport* tp, struct tp_tagged_step* step);
  /* Optional (NULL unless every rank can read memory every other rank writes:
   * MPI ranks of one node, transport/board.h): posts this rank's record of the
   * next round, its hash and `bytes` (<= TP_BOARD_MAX_BYTES) of data, and waits
   * until every rank posted its record of that round; (*all)[r] is then rank r's.
   * The records stay readable until this rank posts again. Every rank must post
   * as often as the others: a transport that offers it also agrees in band, and
   * step 0 of every call posts exactly once (collectives/agree.c). */
  gcclResult_t (*board_post)(struct transport* tp, uint64_t hash, const void* data, size_t bytes,
                             const struct tp_post** all);
  /* Optional (NULL where a message moves the same whatever its size): from now on,
   * messages to and from ranks of other nodes (blocks of node_size consecutive
   * ranks) travel as pieces of piece_bytes each; 0 sends them whole again. Every
   * rank must set the same, while no message is in flight. Why: over Open MPI's
   * TCP, a pair's long messages both ways at once take turns on their one
   * connection (core/link_probe.c measures it, and decides). */
  void (*split_far)(struct transport* tp, int node_size, size_t piece_bytes);
};

/* Bits of a tagged message's tag. (The MPI transport offers tagged messages where
 * MPI's tags reach 2^31 - 1, which MPI does not promise, and keeps the 8 bits
 * above these for a marker and the communicator's identity: a message of a freed
 * communicator that reaches its successor is dropped, not taken.) */
#define TP_TAG_BITS 23

struct transport {
  const struct transport_ops* ops;
  int rank;
  int nranks;
  /* Non-zero when every rank's buffers are addressable from every other rank
   * (threads of one process): enables the "direct" algorithms. */
  int shares_address_space;
  /* Non-zero when only the threads that call gccl may drive the transport (MPI
   * initialised below MPI_THREAD_MULTIPLE): streams and groups, which run
   * collectives on gccl's worker threads, are refused. */
  int caller_thread_only;
  /* Non-zero when a collective of the library below costs a round of its own on
   * top of point-to-point messages (MPI): step 0 of a call, the agreement, then
   * travels on tagged point-to-point messages (the ops' step_tagged), and a small
   * dense allreduce's data rides with it (collectives/in_band.c). Also a promise
   * that a message, once posted, arrives: such a call, and any dense allreduce,
   * reduce-scatter or allgather, ends without a closing barrier (core/execute.c). */
  int agree_in_band;
};

/* The operations, called through these and nowhere else outside src/transport
 * (schedules use collectives/prims.h, which adds what they share). */
static inline const char* tp_name(const struct transport* tp) {
  return tp->ops->name;
}
static inline gcclResult_t tp_isend(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* req) {
  return tp->ops->isend(tp, peer, buf, bytes, req);
}
static inline gcclResult_t tp_irecv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* req) {
  return tp->ops->irecv(tp, peer, buf, bytes, req);
}
static inline gcclResult_t tp_irecv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got,
                                         tp_req* req) {
  return tp->ops->irecv_upto(tp, peer, buf, cap, got, req);
}
static inline gcclResult_t tp_wait(struct transport* tp, tp_req req) {
  return tp->ops->wait(tp, req);
}
static inline gcclResult_t tp_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  return tp->ops->allgather_small(tp, in, bytes, out);
}
static inline gcclResult_t tp_barrier(struct transport* tp) {
  return tp->ops->barrier(tp);
}
static inline void tp_cancel_all(struct transport* tp) {
  tp->ops->cancel_all(tp);
}
static inline void tp_abort(struct transport* tp, gcclResult_t reason) {
  tp->ops->abort(tp, reason);
}
static inline gcclResult_t tp_broken(struct transport* tp) {
  return tp->ops->broken(tp);
}
static inline void tp_destroy(struct transport* tp) {
  tp->ops->destroy(tp);
}

static inline gcclResult_t tp_step_tagged(struct transport* tp, struct tp_tagged_step* step) {
  return tp->ops->step_tagged(tp, step);
}

static inline int tp_has_board(const struct transport* tp) {
  return tp->ops->board_post != NULL;
}
static inline gcclResult_t tp_board_post(struct transport* tp, uint64_t hash, const void* data, size_t bytes,
                                         const struct tp_post** all) {
  return tp->ops->board_post(tp, hash, data, bytes, all);
}

static inline int tp_can_split_far(const struct transport* tp) {
  return tp->ops->split_far != NULL;
}
static inline void tp_split_far(struct transport* tp, int node_size, size_t piece_bytes) {
  tp->ops->split_far(tp, node_size, piece_bytes);
}

/* Blocking forms over the non-blocking primitives. */
gcclResult_t tp_send(struct transport* tp, int peer, const void* buf, size_t bytes);
gcclResult_t tp_recv(struct transport* tp, int peer, void* buf, size_t bytes);
/* Sends to `to` and receives from `from` at the same time (no deadlock in rings). */
gcclResult_t tp_sendrecv(struct transport* tp, int to, const void* sbuf, size_t sbytes, int from, void* rbuf,
                         size_t rbytes);
/* Waits for all n requests; returns the first failure (all are released). */
gcclResult_t tp_waitall(struct transport* tp, const tp_req* reqs, int n);
/* The transport's progress, where it has one (transport_ops.progress). */
static inline void tp_progress(struct transport* tp) {
  if (tp->ops->progress) tp->ops->progress(tp);
}
static inline void tp_hear_peers(struct transport* tp) {
  if (tp->ops->hear_peers) tp->ops->hear_peers(tp);
}

#endif
