/* in_band_limit.h — how far a small dense allreduce across nodes rides the
 * in-band exchange when the rank count is not a power of two, timed when an MPI
 * communicator is made (in_band_limit.c). */
#ifndef GCCL_CORE_IN_BAND_LIMIT_H
#define GCCL_CORE_IN_BAND_LIMIT_H

#include "gccl.h"

/* On a communicator whose ranks span nodes, p not a power of two, exchanging in
 * band, and not under GCCL_FAULT: every rank times the in-band allreduce against
 * split (collectives/split.c), after untimed calls that leave the link busy,
 * from IN_BAND_MAX_BYTES down, halving while split is faster (the slowest rank's
 * times, each at least what its bytes take at the link's measured rate, alike on
 * every rank), and comm->ctx.net's in_band_max_bytes becomes the first size
 * down to 16 KiB where split was not faster, or 8 KiB. Needs comm->link
 * (link_measure first). Otherwise it does nothing. Errors: the transport's, or gcclSystemError
 * (out of memory). */
gcclResult_t in_band_limit_measure(gcclComm_t c);

#endif
