/* mpi_internal.h — the MPI transport's state, shared by its files: mpi.c (the
 * operations, waiting, failure, creation) and mpi_lanes.c (messages: requests in
 * chunks, one lane per peer and direction). Nothing outside them includes it. */
#ifndef GCCL_TRANSPORT_MPI_INTERNAL_H
#define GCCL_TRANSPORT_MPI_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "transport/board.h"
#include "transport/deadline.h"
#include "transport/mpi.h"

enum { TAG_DATA = 1, TAG_CONTROL = 2 };

enum mt_state { MT_FREE = 0, MT_DEFERRED, MT_ACTIVE, MT_DONE };

struct mt_req {
  enum mt_state state;
  int is_send;
  int peer;
  int next;      /* the next request in its lane's FIFO, or in the free list; -1 ends */
  char* buf;     /* a send's buffer is only read */
  size_t bytes;  /* the message's size; for irecv_upto, the capacity */
  size_t* got;   /* irecv_upto: where the received size goes; NULL otherwise */
  size_t done;   /* bytes of the chunks completed */
  size_t posted; /* bytes of the chunk in flight */
  int last;      /* the chunk in flight is the last the message can have */
  MPI_Request mreq;
  gcclResult_t result; /* MT_DONE */
};

/* The requests of one peer and direction. */
struct mt_lane {
  int blocker;    /* a request with chunks still to post, or -1 */
  int head, tail; /* requests queued behind it, not yet given to MPI */
};

/* What a failing rank tells its peers; `comm_id` keeps a message that arrives
 * after its communicator was freed from breaking a new one (Open MPI reuses
 * context ids, and delivers early messages to the communicator made next). */
struct mt_control {
  uint64_t comm_id;
  int32_t reason;
  int32_t aborted; /* the abort operation, rather than a failed wait */
};

struct mpi_tp {
  struct transport base;
  struct transport_ops ops; /* mpi.c's, with board_post where there is a board */
  MPI_Comm comm;
  int thread_level;
  int64_t timeout_ns;
  int64_t spin_ns; /* how long a wait polls before it naps between polls */
  size_t chunk_bytes;
  size_t far_chunk_bytes; /* split_far's pieces for ranks of other nodes; 0: chunk_bytes */
  int node_size;          /* split_far's nodes: blocks of node_size ranks */
  uint64_t comm_id;

  struct mt_req* pool; /* request handles index it; grows, never shrinks */
  int pool_size;
  int free_head;
  struct mt_lane* lanes; /* [2 * nranks]: sends to peer p at 2p, receives from p at 2p + 1 */
  int* blockers;         /* [2 * nranks]: the lanes' blockers, advanced by every poll */
  int nblockers;

  unsigned char* small_in;  /* [TP_SMALL_MAX] */
  unsigned char* small_out; /* [nranks * TP_SMALL_MAX] */
  MPI_Request coll_req;     /* the non-blocking collective in flight, or one that failed */

  /* Failure: brk.reason is gcclSuccess while the transport works. */
  struct tp_break brk;
  atomic_int notify_due; /* broken here: the peers are still to be told */
  atomic_int aborted;    /* broken by the abort operation */

  pthread_mutex_t ctl_mu;            /* the control messages: polled from several threads */
  _Atomic int64_t control_polled_ns; /* when the broken operation last polled them */
  struct mt_control ctl_in;
  MPI_Request ctl_recv;
  struct mt_control ctl_out;
  MPI_Request* ctl_sends; /* [nranks] */

  struct board board;        /* every rank on this node: mpi_board.c */
  size_t board_bytes;        /* its mapping's size; 0 without a board */
  unsigned board_busy_polls; /* polls of a board wait before it yields: 1 with more ranks than cores */
};

/* ---- mpi.c: failure ----------------------------------------------------------- */

/* Breaks the transport with the failure just recorded (err_last), unless it is
 * broken already, and tells the peers: they may be waiting for this rank. */
void mpi_tp_fail(struct mpi_tp* t, gcclResult_t res);

/* Records the failure of MPI call `call` (mpi_error), breaks the transport with
 * it (mpi_tp_fail) and returns it. */
gcclResult_t mpi_tp_fail_mpi(struct mpi_tp* t, int rc, const char* call);

/* A tagged message's MPI tag: TAG_TAGGED, then 7 bits of the communicator's id,
 * so that a freed communicator's message that Open MPI delivers to the one made
 * next (it reuses context ids) is told apart, then the TP_TAG_BITS of the tag.
 * 31 bits in all: MPI promises only 15, so tagged messages are offered where
 * MPI_TAG_UB reaches them (Open MPI's shared memory and TCP: 2^31 - 1). */
#define TAG_TAGGED (1u << 30)
#define MPI_TAG_OWNER_BITS 7
_Static_assert(TP_TAG_BITS + MPI_TAG_OWNER_BITS == 30, "a tagged message's tag is 31 bits");
static inline uint32_t mpi_tag_tagged(const struct mpi_tp* t, uint32_t tag) {
  uint32_t owner = (uint32_t)(t->comm_id & ((1u << MPI_TAG_OWNER_BITS) - 1));
  return TAG_TAGGED | owner << TP_TAG_BITS | (tag & ((1u << TP_TAG_BITS) - 1));
}

/* ---- mpi_board.c: the board --------------------------------------------------- */

/* Gives the transport a board in shared memory, unless some rank passes wanted =
 * 0, sets GCCL_MPI_BOARD=0 or cannot map one (then none has it, and INFO says
 * why). Every rank must run on this node. Collective. Errors: an MPI call's
 * (mpi_error). */
gcclResult_t mpi_board_create(struct mpi_tp* t, int wanted);
void mpi_board_destroy(struct mpi_tp* t);

/* ---- mpi_lanes.c: messages ------------------------------------------------------ */

/* The size messages to and from peer are split at: split_far's pieces for a
 * rank of another node, else the chunk size. */
static inline size_t mpi_chunk_to(const struct mpi_tp* t, int peer) {
  if (t->far_chunk_bytes && peer / t->node_size != t->base.rank / t->node_size) return t->far_chunk_bytes;
  return t->chunk_bytes;
}

/* Posts a send (is_send) or a receive of `bytes` (with got: up to `bytes`) to or
 * from peer, or queues it behind its lane's chunked message; *out = its handle.
 * Errors: gcclRemoteError (broken), gcclInternalError (peer out of range),
 * gcclSystemError (out of memory), or an MPI call's (mpi_error), which breaks
 * the transport. */
gcclResult_t mpi_lanes_submit(struct mpi_tp* t, int is_send, int peer, const void* buf, size_t bytes, size_t* got,
                              tp_req* out);

/* Moves request h along: tests its chunk in flight, posts the next, completes it. */
void mpi_lanes_advance(struct mpi_tp* t, int h);

/* Returns handle h to the free list. */
void mpi_lanes_release(struct mpi_tp* t, int h);

/* Moves every lane's chunked message along (one poll, no waiting). */
void mpi_lanes_poll(struct mpi_tp* t);

#endif
