/* link_probe.h — the network between nodes, timed when an MPI communicator is
 * made (link_probe.c). */
#ifndef GCCL_CORE_LINK_PROBE_H
#define GCCL_CORE_LINK_PROBE_H

#include <stdint.h>

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

/* Whether a round trip of `rtt` ns ends the probe's doubling of its message:
 * one long enough to read the rate from, unless it took over 8x `before`, the
 * reference for half the bytes (link_trip_reference), and stalled. On the
 * 1 Gbit/s test bed a rank that lost its core for a few ms made the stalled trip
 * the last, and the link read 0.24 Gbit/s (128 KiB in 4.37 ms) and 0.36 (256
 * KiB in 5.8 ms, 20x its reference), where 579 other probes read 0.67-1.06;
 * their last trips took at most 5.1x their reference. A trip taken for a stall
 * costs one more size, and can take the probe past its 30 ms: 5 ms of sleep
 * injected into the answer to 256 KiB made it 31-42 ms. A stall of the last size
 * that stays under 8x (5 ms at 512 KiB) still reads the link slow. */
int link_trip_ends_doubling(int64_t rtt, int64_t before);

/* The reference for twice the bytes, after a trip of `rtt` ns whose own was
 * `before` (the first: the median trip of 8 bytes): the trip, or twice `before`
 * where that is longer or the trip stalled. Never less than twice: a trip after
 * a slow one passes partly within a token bucket refilled meanwhile (128 KiB in
 * 1569 us, then 256 KiB in 253), and the trip after it would look stalled. */
int64_t link_trip_reference(int64_t rtt, int64_t before);

/* Whether messages in pieces keep a link's rate (alpha s latency, beta s per
 * byte): where a piece (32 KiB) takes at least 4 latencies. A lane has one piece
 * in flight at a time (transport/mpi_lanes.c), so each costs its bytes and a
 * turnaround. The probe times pieces at its last size, a few MiB, and cannot
 * time more within its budget: on the test bed at 10 Gbit/s (32 KiB in 27 us, a
 * latency of 10-11 us) it kept pieces in 6 of 18 creations, and 2 ranks' dense
 * allreduce then took 1.51x Open MPI's at 8 MiB and 2.06x at 32 MiB, where whole
 * messages took 0.89-0.92x. At 1 Gbit/s a piece takes 13 latencies, and pieces
 * made 4 ranks' 100 MiB 1.84x faster. */
int link_pieces_keep_rate(double alpha, double beta);

#endif
