/* subset.c — a transport that is a view of a parent transport on some of its ranks.
 *
 * Point-to-point calls map the peer through members[] and forward; failure
 * handling (cancel_all, abort, broken) is the parent's, since a failure anywhere
 * breaks the whole communicator. The collective primitives cannot use the
 * parent's, which would wait for every rank of the communicator: allgather_small
 * posts one message to and from every other member, and the barrier is an
 * allgather_small of a one-byte token (a member leaves only once every member
 * has arrived). */
#include "transport/subset.h"

#include <stdlib.h>
#include <string.h>

#include "common/result.h"

struct subset_tp {
  struct transport base;
  struct transport* parent;
  int* members;          /* [base.nranks]: group rank -> parent rank */
  unsigned char* tokens; /* [base.nranks]: the barrier's receive slots */
  tp_req* reqs;          /* [2 * base.nranks]: allgather_small's requests */
};

static struct subset_tp* gt(struct transport* tp) {
  return (struct subset_tp*)tp;
}

static gcclResult_t check_peer(struct subset_tp* g, int peer) {
  if (peer < 0 || peer >= g->base.nranks)
    return err_set(gcclInternalError, "subset peer %d is not in [0, %d)", peer, g->base.nranks);
  return gcclSuccess;
}

static gcclResult_t subset_isend(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* req) {
  struct subset_tp* g = gt(tp);
  GCCL_CHECK(check_peer(g, peer));
  return g->parent->ops->isend(g->parent, g->members[peer], buf, bytes, req);
}

static gcclResult_t subset_irecv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* req) {
  struct subset_tp* g = gt(tp);
  GCCL_CHECK(check_peer(g, peer));
  return g->parent->ops->irecv(g->parent, g->members[peer], buf, bytes, req);
}

static gcclResult_t subset_irecv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got, tp_req* req) {
  struct subset_tp* g = gt(tp);
  GCCL_CHECK(check_peer(g, peer));
  return g->parent->ops->irecv_upto(g->parent, g->members[peer], buf, cap, got, req);
}

static gcclResult_t subset_wait(struct transport* tp, tp_req req) {
  struct subset_tp* g = gt(tp);
  return g->parent->ops->wait(g->parent, req);
}

/* Every member sends its bytes to every other member and receives theirs into
 * its slot of out; posting fails only on a broken parent, whose cancel_all (the
 * caller's error path) withdraws what was posted. */
static gcclResult_t subset_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  struct subset_tp* g = gt(tp);
  struct transport* parent = g->parent;
  int n = tp->nranks, me = tp->rank, nreq = 0;
  if (bytes > TP_SMALL_MAX) return err_set(gcclInternalError, "allgather_small of %zu bytes", bytes);
  for (int m = 0; m < n; m++)
    if (m != me)
      GCCL_CHECK(parent->ops->irecv(parent, g->members[m], (char*)out + (size_t)m * bytes, bytes, &g->reqs[nreq++]));
  for (int m = 0; m < n; m++)
    if (m != me) GCCL_CHECK(parent->ops->isend(parent, g->members[m], in, bytes, &g->reqs[nreq++]));
  if (bytes) memmove((char*)out + (size_t)me * bytes, in, bytes);
  return tp_waitall(parent, g->reqs, nreq);
}

static gcclResult_t subset_barrier(struct transport* tp) {
  static const unsigned char token = 1;
  return subset_allgather_small(tp, &token, 1, gt(tp)->tokens);
}

static void subset_cancel_all(struct transport* tp) {
  struct subset_tp* g = gt(tp);
  g->parent->ops->cancel_all(g->parent);
}

static void subset_abort(struct transport* tp, gcclResult_t reason) {
  struct subset_tp* g = gt(tp);
  g->parent->ops->abort(g->parent, reason);
}

static gcclResult_t subset_broken(struct transport* tp) {
  struct subset_tp* g = gt(tp);
  return g->parent->ops->broken(g->parent);
}

static void subset_progress(struct transport* tp) {
  tp_progress(gt(tp)->parent);
}

static void subset_hear_peers(struct transport* tp) {
  tp_hear_peers(gt(tp)->parent);
}

static void subset_destroy(struct transport* tp) {
  struct subset_tp* g = gt(tp);
  free(g->members);
  free(g->tokens);
  free(g->reqs);
  free(g);
}

static const struct transport_ops subset_ops = {
    .name = "subset",
    .isend = subset_isend,
    .irecv = subset_irecv,
    .irecv_upto = subset_irecv_upto,
    .wait = subset_wait,
    .allgather_small = subset_allgather_small,
    .barrier = subset_barrier,
    .cancel_all = subset_cancel_all,
    .abort = subset_abort,
    .broken = subset_broken,
    .destroy = subset_destroy,
    .progress = subset_progress,
    .hear_peers = subset_hear_peers,
};

gcclResult_t subset_transport_create(struct transport** out, struct transport* parent, const int* members, int n) {
  *out = NULL;
  int me = -1;
  for (int m = 0; m < n; m++)
    if (members[m] == parent->rank) me = m;
  if (n < 1 || me < 0)
    return err_set(gcclInternalError, "rank %d is not a member of the subset it views", parent->rank);
  struct subset_tp* g = calloc(1, sizeof *g);
  size_t un = (size_t)n;
  if (g) {
    g->members = malloc(un * sizeof *g->members);
    g->tokens = calloc(un, 1);
    g->reqs = malloc(2 * un * sizeof *g->reqs);
  }
  if (!g || !g->members || !g->tokens || !g->reqs) {
    if (g) subset_destroy(&g->base);
    return err_set(gcclSystemError, "out of memory creating a subset transport of %d ranks", n);
  }
  memcpy(g->members, members, un * sizeof *members);
  g->base.ops = &subset_ops;
  g->base.rank = me;
  g->base.nranks = n;
  g->base.shares_address_space = 0;
  g->base.caller_thread_only = parent->caller_thread_only;
  g->parent = parent;
  *out = &g->base;
  return gcclSuccess;
}
