/* on_board.h — the agreement of a call on the transport's board (shared memory),
 * with a small dense allreduce's data on it too (on_board.c); agree.c is its only
 * caller, in place of in_band.h's exchange where the transport has a board. */
#ifndef GCCL_COLLECTIVES_ON_BOARD_H
#define GCCL_COLLECTIVES_ON_BOARD_H

#include <stdint.h>

#include "collectives/coll.h"

/* in_band_exchange's contract (in_band.h), on the board: every rank passes the
 * hash of its call's descriptor, and *agreed says whether all hashes (and data
 * sizes) were equal, the same on every rank. With `sum` (a dense allreduce of at
 * most IN_BAND_MAX_BYTES; NULL for the agreement alone) and agreement,
 * sum->recvbuff holds the result (gcclAvg divided), bit-identical on every rank;
 * otherwise the receive buffer is untouched. One round on the board. */
gcclResult_t board_exchange(struct coll_ctx* ctx, uint64_t hash, const struct coll_args* sum, int* agreed);

#endif
