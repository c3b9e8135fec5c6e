/* gccl_sim.h — queries of the link model, gccl's simulated network for thread ranks.
 *
 * Thread ranks of one process normally share memory and cores. Setting, before a
 * communicator is created,
 *   GCCL_RANKS_PER_NODE=L   ranks per virtual node (rank r is on node r / L)
 *   GCCL_SIM_LINK_GBPS=G    each rank's network link, Gbit/s, full duplex
 *   GCCL_SIM_LINK_US=U      one-way latency of an inter-node message, microseconds
 *   GCCL_SIM_LINK_PACE=0    optional: do not slow ranks down to the modelled time
 * (either of the two SIM_LINK values turns the model on) makes every rank keep a
 * virtual clock: its own thread's CPU time between communication calls, plus the
 * modelled time of its messages — inter-node ones through its link at G and U,
 * intra-node ones at memory speed. Results are unchanged, bit for bit. With more
 * than one node, algorithms that read peers' memory directly are not used.
 *
 * With pacing (the default) ranks sleep until the wall clock catches up with
 * their virtual clocks, the two set together at every operation, so that each
 * operation takes at least its modelled time on the wall clock, also where ranks
 * outnumber cores (a rank's CPU time, all its virtual clock counts, then lags the
 * wall clock). Wall-clock timings see the modelled link plus whatever compute
 * costs on the shared cores; the functions below read the virtual clock itself,
 * which is what benchmarks should use. */
#ifndef GCCL_SIM_H
#define GCCL_SIM_H

#include <stdint.h>

#include "gccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *seconds = this rank's virtual clock: seconds since its communicator was
 * created, as of its last communication call. gcclInvalidUsage when the
 * communicator was made without the link model. Safe from any thread. */
GCCL_API gcclResult_t gcclCommSimTime(gcclComm_t comm, double* seconds);

/* *bytes = the bytes this rank has sent to its peers (every message, intra- and
 * inter-node; for compressed collectives the frames as they travel), since the
 * communicator was created. gcclInvalidUsage without the link model. */
GCCL_API gcclResult_t gcclCommSimBytesSent(gcclComm_t comm, uint64_t* bytes);

/* *bytes = the part of those bytes sent to ranks on other virtual nodes: what
 * this rank's network link carried. gcclInvalidUsage without the link model. */
GCCL_API gcclResult_t gcclCommSimInterNodeBytesSent(gcclComm_t comm, uint64_t* bytes);

#ifdef __cplusplus
}
#endif

#endif
