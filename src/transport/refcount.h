/* refcount.h — the reference count of state that the endpoints of one
 * communicator share (the local transport's world, the link model's world):
 * each endpoint holds a reference, and whoever drops the last one frees it.
 *
 * Any thread may take or drop a reference. Dropping one publishes every write
 * its holder made to the shared state, and the last drop sees them all, so the
 * thread that frees needs no lock (nothing else can reach the state by then). */
#ifndef GCCL_TRANSPORT_REFCOUNT_H
#define GCCL_TRANSPORT_REFCOUNT_H

#include <stdatomic.h>

struct refcount {
  atomic_int n;
};

/* Starts the count at n references; before the state is shared with any thread. */
static inline void refcount_init(struct refcount* r, int n) {
  atomic_init(&r->n, n);
}

/* Takes a reference; the caller must hold one already (or be its creator). */
static inline void refcount_take(struct refcount* r) {
  atomic_fetch_add_explicit(&r->n, 1, memory_order_relaxed);
}

/* Drops a reference. Returns 1 when it was the last: the caller then frees the
 * state. Returns 0 otherwise; the caller must not touch the state any more. */
static inline int refcount_drop(struct refcount* r) {
  return atomic_fetch_sub_explicit(&r->n, 1, memory_order_acq_rel) == 1;
}

#endif
