/* in_band.h — the agreement of a call on point-to-point messages, with a small
 * dense allreduce's data riding along (in_band.c); agree.c is its only caller. */
#ifndef GCCL_COLLECTIVES_IN_BAND_H
#define GCCL_COLLECTIVES_IN_BAND_H

#include <stdint.h>

#include "collectives/coll.h"

/* The largest allreduce, in bytes, whose data can ride the exchange. Every rank
 * receives up to this much whatever its own call, so that calls that differ in
 * size meet as a mismatch and never as a truncated message. */
#define IN_BAND_MAX_BYTES ((size_t)64 << 10)
/* Scratch the exchange takes from ctx->scratch: its data and a peer's message. */
#define IN_BAND_SCRATCH_BYTES (2 * IN_BAND_MAX_BYTES)

/* Every rank passes the hash of its call's descriptor. On return *agreed says
 * whether all hashes were equal, the same on every rank. With `sum` (a dense
 * allreduce of at most IN_BAND_MAX_BYTES; NULL for the agreement alone), its
 * data rides the same messages and, if the calls agreed, sum->recvbuff holds the
 * result (gcclAvg divided), bit-identical on every rank; otherwise the receive
 * buffer is untouched. Recursive doubling: ceil(log2 p) rounds, two more when p
 * is not a power of two. */
gcclResult_t in_band_exchange(struct coll_ctx* ctx, uint64_t hash, const struct coll_args* sum, int* agreed);

#endif
