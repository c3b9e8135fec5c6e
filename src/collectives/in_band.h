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

/* With the agreement alone, a message on the transport's plain messages that the
 * exchange posts to every peer for its caller (collectives/split.c's first
 * round): to a peer it exchanges no tagged message with, before its first step;
 * to the others right after its tagged message to them, its only one in an
 * agreement alone. A tagged receive takes any tag (transport/mpi_lanes.c), so a
 * plain message must never reach a peer before a tagged one of the same call. */
struct in_band_early {
  gcclResult_t (*send)(void* arg, int peer);
  void* arg;
};

/* Every rank passes the hash of its call's descriptor. On return *agreed says
 * whether all hashes were equal, the same on every rank. With `sum` (a dense
 * allreduce of at most IN_BAND_MAX_BYTES; NULL for the agreement alone), its
 * data rides the same messages and, if the calls agreed, sum->recvbuff holds the
 * result (gcclAvg divided), bit-identical on every rank; otherwise the receive
 * buffer is untouched. `early` (NULL: none) needs sum NULL. Recursive doubling:
 * ceil(log2 p) rounds, two more when p is not a power of two. */
gcclResult_t in_band_exchange(struct coll_ctx* ctx, uint64_t hash, const struct coll_args* sum,
                              const struct in_band_early* early, int* agreed);

/* Bytes the busiest rank sends in an in-band allreduce of `bytes`: with p not a
 * power of two, a host of a folded rank (core/in_band_limit.c's floor). */
double in_band_busiest_bytes(const struct coll_ctx* ctx, size_t bytes);

#endif
