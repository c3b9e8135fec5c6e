/* link_probe.h — the link between nodes, timed at communicator creation for
 * GCCL_COMPRESS=auto:SPEC (link_probe.c). */
#ifndef GCCL_CORE_LINK_PROBE_H
#define GCCL_CORE_LINK_PROBE_H

#include "collectives/cost_model.h"
#include "gccl.h"

/* Times the link between rank 0 and the first rank of node 1 (ranks
 * [local_size, 2 local_size)) in under 30 ms; every rank calls it. On rank 0
 * fills *link (alpha: half a small round trip; beta: seconds per byte of a long
 * message); the others take no part but the two ranks' and leave *link alone, as
 * does a communicator of one node. Errors: the transport's. */
gcclResult_t link_probe(gcclComm_t c, struct cost_link* link);

#endif
