/* link_probe.h — the network between nodes, timed when an MPI communicator is
 * made (link_probe.c). */
#ifndef GCCL_CORE_LINK_PROBE_H
#define GCCL_CORE_LINK_PROBE_H

#include "collectives/cost_model.h"
#include "gccl.h"

/* On a communicator whose ranks span nodes (of local_size ranks), on every rank
 * once its transport works: rank 0 and the first rank of node 1 time the link
 * between them in about 30 ms unless GCCL_LINK_GBPS names it or GCCL_FAULT is
 * set; every rank takes rank 0's figures into comm->link, comm->ctx.net's
 * crossovers from them, and sends its messages to other nodes in pieces where
 * rank 0 found that they keep full duplex (transport split_far). A communicator
 * of one node keeps zeros. Errors: the transport's. */
gcclResult_t link_measure(gcclComm_t c);

#endif
