/* prims.h — what every schedule is made of, so that an algorithm reads as its
 * steps and nothing else (NCCL's prims play this part):
 *
 *  - messages: posts that skip empty messages (both sides derive every length,
 *    so both skip the same ones), blocking forms, the transport's progress;
 *  - request slots: a slot holds a pending request or -1, so a schedule keeps
 *    one slot per peer or per step and waits for any or all of them;
 *  - neighbours: the ring's next and previous rank, a binomial tree's parent and
 *    children;
 *  - the workspace carver: a schedule's layout function takes its areas from a
 *    carver twice, once to measure and once to point into the workspace;
 *  - the frame verbs of the compressed schedules: encode and send, decode (a
 *    slice at a time with progress), receive-check-decode-add, forward; and the
 *    steps that touch the caller's buffers (on the GPU for device calls).
 *
 * Schedules call these and never the transport's operations. */
#ifndef GCCL_COLLECTIVES_PRIMS_H
#define GCCL_COLLECTIVES_PRIMS_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/coll.h"
#include "compress/compressor.h"
#include "transport/transport.h"

/* ---- messages ---- */

/* Post a send or receive of `bytes` into slot *req; an empty message posts
 * nothing and leaves *req at -1. */
gcclResult_t prim_post_send(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* req);
gcclResult_t prim_post_recv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* req);
/* A frame whose size the receiver does not know: up to cap bytes, *got when done. */
gcclResult_t prim_post_recv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got, tp_req* req);
/* A step of tagged messages (transports that agree in band), sent and received
 * together: a send is posted even when empty, since its tag is news; a receive
 * takes the peer's next tagged message, up to cap (struct tp_tagged_step). */
static inline gcclResult_t prim_step_tagged(struct transport* tp, struct tp_tagged_step* step) {
  return tp_step_tagged(tp, step);
}
/* Blocking forms (empty messages skipped). */
gcclResult_t prim_send(struct transport* tp, int peer, const void* buf, size_t bytes);
gcclResult_t prim_recv(struct transport* tp, int peer, void* buf, size_t bytes);
/* Every rank's `bytes` (<= TP_SMALL_MAX) of `in`, rank r's at out + r * bytes. */
static inline gcclResult_t prim_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  return tp_allgather_small(tp, in, bytes, out);
}
static inline gcclResult_t prim_barrier(struct transport* tp) {
  return tp_barrier(tp);
}
/* Elements decoded between two calls of the transport's progress: ~0.3 ms. MPI
 * moves a large message only once its receiver has answered the sender's
 * handshake, inside an MPI call: a rank decoding for 10 ms in one go holds up
 * every frame sent to it meanwhile (BENCHMARKS.md: a ring step's median 112
 * instead of 120-125 ms with slices, on the 1 Gbit/s test bed). */
#define PRIM_PROGRESS_SLICE ((size_t)1 << 18)
/* Lets pending messages move between slices of long codec work (MPI, where a
 * large message moves only inside MPI calls; nothing for threads). */
static inline void prim_progress(struct transport* tp) {
  tp_progress(tp);
}

/* ---- request slots ---- */

static inline void prim_slots_clear(tp_req* slots, size_t n) {
  for (size_t i = 0; i < n; i++) slots[i] = -1;
}
/* Waits for the request in *slot if one is pending, and clears the slot. */
gcclResult_t prim_wait(struct transport* tp, tp_req* slot);
/* Waits for every pending slot of n, clearing all; returns the first failure. */
gcclResult_t prim_wait_all(struct transport* tp, tp_req* slots, size_t n);

/* ---- neighbours ---- */

static inline int prim_mod(int x, int p) {
  return ((x % p) + p) % p;
}
struct prim_ring {
  int next, prev;
};
static inline struct prim_ring prim_ring_of(int rank, int nranks) {
  struct prim_ring r = {prim_mod(rank + 1, nranks), prim_mod(rank - 1, nranks)};
  return r;
}

/* Binomial tree rooted at `root`: ranks relabelled v = (rank - root) mod p; a
 * rank's parent is v with its lowest set bit cleared, its children v + 2^i for
 * each 2^i below that bit (every power of two for the root) while v + 2^i < p. */
#define PRIM_TREE_MAX_CHILDREN 31 /* enough for any int rank count */
struct prim_tree {
  int parent; /* -1 at the root */
  int nchildren;
  int children[PRIM_TREE_MAX_CHILDREN]; /* nearest first: v+1, v+2, v+4, ... */
};
struct prim_tree prim_tree_of(int rank, int root, int nranks);

/* ---- the workspace carver ---- */

/* A layout function takes every area of a call from a carver: first from one
 * with base NULL, which only adds up the bytes, then (prim_carve_workspace)
 * from the communicator's workspace. Areas are 64-byte aligned. */
struct prim_carver {
  unsigned char* base;
  size_t used;
};
static inline size_t prim_align64(size_t bytes) {
  return (bytes + 63) & ~(size_t)63;
}
static inline void* prim_carve(struct prim_carver* c, size_t bytes) {
  void* at = c->base ? c->base + c->used : NULL;
  c->used += prim_align64(bytes);
  return at;
}
#define PRIM_CARVE(carver, type, n) ((type*)prim_carve((carver), (size_t)(n) * sizeof(type)))
/* Points the measured carver at a workspace of c->used bytes (coll_workspace),
 * ready for the layout's second pass. */
gcclResult_t prim_carve_workspace(struct coll_ctx* ctx, struct prim_carver* c);

/* ---- frame verbs ---- */

/* Encodes n elements of src (dt), at element `first` of the compressor's tensor,
 * into frame (cap bytes; *bytes its size) with error feedback `ef` at `stage`;
 * encode-and-send also posts it to peer in slot *req (the frame stays untouched
 * until the send completes). */
struct prim_encode {
  struct gcclCompressor* comp;
  const void* src;
  gcclDataType_t dt;
  size_t first, n;
  enum ef_mode ef;
  uint32_t stage;
};
gcclResult_t prim_encode(const struct prim_encode* e, unsigned char* frame, size_t cap, size_t* bytes);
gcclResult_t prim_encode_send(struct transport* tp, int peer, const struct prim_encode* e, unsigned char* frame,
                              size_t cap, size_t* bytes, tp_req* req);
/* Checks a frame of n fp32 elements and decodes it into dst (added when add,
 * else stored as if added to +0.0f), a slice at a time with the transport's
 * progress between slices where the frame decodes by ranges. */
gcclResult_t prim_decode(struct transport* tp, const void* frame, size_t bytes, size_t n, float* dst, int add);
/* Receive-check-decode-add: waits for the frame in *slot, then prim_decode. */
gcclResult_t prim_recv_decode(struct transport* tp, tp_req* slot, const void* frame, const size_t* bytes, size_t n,
                              float* dst, int add);
/* Passes a received frame on unchanged to peer (a ring's allgather). */
static inline gcclResult_t prim_forward(struct transport* tp, int peer, const void* frame, size_t bytes, tp_req* req) {
  return prim_post_send(tp, peer, frame, bytes, req);
}

/* The steps of the one-frame schedules (sparse-ag, sparse-sr, randk, the
 * compressed allgather) that touch the caller's buffers, on the GPU when
 * a->device_send / a->device_recv are set (one_frame.c):
 *  - the rank's whole input as one fp32 frame with error feedback (EF_ADD, stage
 *    0) into frame[0, cap);
 *  - the fp32 output: elements [at, at + n) cleared (out: recvbuff's, or an fp32
 *    sum the schedule keeps for other dtypes), a validated frame of n elements
 *    added into them, or written there as frame_decode_f32_to does. */
gcclResult_t coll_encode_input(const struct coll_args* a, void* frame, size_t cap, size_t* frame_bytes);
gcclResult_t coll_output_clear(const struct coll_args* a, float* out, size_t n);
gcclResult_t coll_output_add(const struct coll_args* a, const void* frame, size_t frame_bytes, float* out, size_t n);
gcclResult_t coll_output_frame(const struct coll_args* a, const void* frame, size_t frame_bytes, size_t at, size_t n,
                               float* stage);

#endif
