/* in_band_limit.h — how far a small dense allreduce across nodes rides the
 * in-band exchange when the rank count is not a power of two, timed when an MPI
 * communicator is made (in_band_limit.c). */
#ifndef GCCL_CORE_IN_BAND_LIMIT_H
#define GCCL_CORE_IN_BAND_LIMIT_H

#include "gccl.h"

/* On a communicator whose ranks span nodes, p not a power of two, exchanging in
 * band, and not under GCCL_FAULT: every rank times the in-band allreduce against
 * the ring at a few sizes up to IN_BAND_MAX_BYTES, and comm->ctx.net's
 * in_band_max_bytes becomes the largest size up to which in band was never
 * slower (the slowest rank's times, alike on every rank). Otherwise it does
 * nothing. Errors: the transport's, or gcclSystemError (out of memory). */
gcclResult_t in_band_limit_measure(gcclComm_t c);

#endif
