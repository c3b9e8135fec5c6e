/* in_band_limit.h — how far a small dense allreduce across nodes rides the
 * in-band exchange when the rank count is not a power of two, timed when an MPI
 * communicator is made (in_band_limit.c). */
#ifndef GCCL_CORE_IN_BAND_LIMIT_H
#define GCCL_CORE_IN_BAND_LIMIT_H

#include <stddef.h>

#include "collectives/coll.h"
#include "gccl.h"

/* On a communicator whose ranks span nodes, p not a power of two, exchanging in
 * band, and not under GCCL_FAULT: every rank times the in-band allreduce against
 * split (collectives/split.c), after untimed calls that leave the link busy, at
 * 64, 32 and 16 KiB (the slowest rank's times, each at least what its bytes take
 * at the link's measured rate, alike on every rank; a second time where the
 * first keeps 32 KiB or more in band or contradicts itself, each road's two times
 * then combined), and comm->ctx.net's in_band_max_bytes becomes
 * in_band_limit_fit's limit: 8 KiB or a size timed, which the program's calls
 * then check unless GCCL_ALGO forces an algorithm (road_watch.h). Where rank 0
 * names the limit (GCCL_MPI_IN_BAND_BYTES, 1 to IN_BAND_MAX_BYTES) nothing is
 * timed or checked, faults or not. Needs comm->link (link_measure first).
 * Otherwise it does nothing. Errors: the transport's, or gcclSystemError (out of
 * memory). */
gcclResult_t in_band_limit_measure(gcclComm_t c);

/* The limit that the times of n sizes (bytes[] descending, each with its road's
 * times) contradict least: in band up to it, split above. Split wins a size when
 * it is faster by 5%. The limit is `least` or one of bytes[]; the fewest sizes
 * whose winner it contradicts, then the least sum of |log| of their ratios, then
 * the larger limit. One size timed wrong (a hiccup of split's at 64 KiB) then
 * cannot keep the sizes below it in band that split won. *against (if not NULL):
 * how many sizes it contradicts. */
size_t in_band_limit_fit(const size_t bytes[], const double in_band[], const double split[], int n, size_t least,
                         int* against);

/* The least time calls of `bytes` on `road` (ALGO_IN_BAND or ALGO_SPLIT) take
 * back to back: the bytes their busiest rank sends at the link's measured rate. A
 * few calls pass within a burst allowance faster (in_band_limit.c). */
double in_band_limit_floor(gcclComm_t c, enum coll_algo road, size_t bytes);

#endif
