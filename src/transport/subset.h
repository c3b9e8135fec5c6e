/* subset.h — a transport that is a view of a parent transport restricted to a
 * subset of its ranks, for collectives that run on part of a communicator (the
 * inter-node step of the hierarchical allreduce).
 *
 * Group rank g is parent rank members[g]. Messages go through the parent, with
 * its request handles, its ordering between each pair and its failure state;
 * barrier and allgather_small exchange point-to-point messages among the members
 * only. The view never claims a shared address space, so every algorithm run on
 * it uses messages. */
#ifndef GCCL_TRANSPORT_SUBSET_H
#define GCCL_TRANSPORT_SUBSET_H

#include "transport/transport.h"

/* Creates the view of `parent` on members[0, n) (distinct parent ranks, the
 * parent's own rank among them; members is copied). destroy frees only the view.
 * gcclInternalError when the parent's rank is not a member, gcclSystemError when
 * out of memory. */
gcclResult_t subset_transport_create(struct transport** out, struct transport* parent, const int* members, int n);

#endif
