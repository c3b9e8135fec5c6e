/* algorithms.h — every collective's algorithms, each a schedule over prims.h
 * (dispatch.c's tables name them). All handle count 0, in place and out of
 * place, nranks 1..N. */
#ifndef GCCL_COLLECTIVES_ALGORITHMS_H
#define GCCL_COLLECTIVES_ALGORITHMS_H

#include "collectives/coll.h"

/* Every algorithm has this signature. */
typedef gcclResult_t coll_algorithm(struct coll_ctx* ctx, const struct coll_args* a);

/* Dense. */
coll_algorithm allreduce_ring, allgather_ring, reducescatter_ring; /* ring.c */
coll_algorithm allreduce_rhd;                                      /* rhd.c */
coll_algorithm allreduce_tree, broadcast_tree, reduce_tree;        /* tree.c */
coll_algorithm allreduce_split;                                    /* split.c */
/* direct.c: threads of one process read their peers' buffers (ctx->peer_send,
 * peer_recv) between barriers. */
coll_algorithm allreduce_direct, allgather_direct, reducescatter_direct, broadcast_direct, reduce_direct;

/* hier.c: dense, or compressed on the inter-node step when a->comp is set. */
coll_algorithm allreduce_hier;
/* Frees ctx->hier (communicator destruction). */
void hier_state_free(struct hier_state* state);

/* Compressed (a->comp set; op sum or avg, divided afterwards by coll_run). They
 * stage the compressor's residual for the whole tensor and leave commit or
 * abort to the caller. */
coll_algorithm allreduce_sra, reducescatter_sra, allgather_frames; /* sra.c */
coll_algorithm allreduce_ring_requant;                             /* ring_requant.c */
coll_algorithm allreduce_sparse_ag, allreduce_sparse_sr;           /* sparse.c */
coll_algorithm allreduce_randk;                                    /* randk_allreduce.c */
coll_algorithm allreduce_powersgd;                                 /* powersgd.c */
/* Elements per segment of ring-requant's frames (at most 4 segments a chunk); tests
 * shrink it to cut small tensors into segments. */
extern size_t ring_requant_segment_elems;

#endif
