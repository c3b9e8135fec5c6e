/* board.h — a board in memory that every rank of a communicator reads (the
 * processes of one node, through one shared mapping): each round, every rank
 * posts a record (a 64-bit hash and up to TP_BOARD_MAX_BYTES of data) and reads
 * every rank's record of the same round. The MPI transport offers it as its
 * board_post operation (transport.h) when all ranks share this node.
 *
 * Each rank writes only its own part: two slots, used by odd and even rounds. A
 * slot's round number is written last (release) and read first (acquire), so a
 * reader that sees round n there sees the record of round n. No rank waits for
 * readers before it writes: a rank that posts round n + 1 saw every rank's post
 * of round n, which each rank makes only after it read every post of round
 * n - 1, the slot that round n + 1 reuses. So a post stays readable until its
 * reader posts again. The waiting (timeouts, a peer's failure) is the caller's:
 * board_arrived only looks. */
#ifndef GCCL_TRANSPORT_BOARD_H
#define GCCL_TRANSPORT_BOARD_H

#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

struct board {
  unsigned char* mem; /* board_bytes(nranks), shared by every rank */
  int rank, nranks;
  uint64_t round;        /* this rank's last post; 0 before the first */
  struct tp_post* posts; /* [nranks]: the records of this round read so far */
};

/* Bytes of the shared memory a board of nranks ranks takes. */
size_t board_bytes(int nranks);

/* Attaches this rank to mem (board_bytes(nranks), zero-filled, the same memory
 * on every rank, on a 64-byte line as a mapping is) and touches its own part, so
 * that its pages are faulted in here and not on the first call. Errors:
 * gcclInternalError (mem off a line), gcclSystemError (out of memory). */
gcclResult_t board_init(struct board* b, void* mem, int rank, int nranks);
void board_fini(struct board* b);

/* Posts this rank's record of the next round: hash and `bytes` of data (at most
 * TP_BOARD_MAX_BYTES; data may be NULL when bytes is 0). Its readers find the
 * data as far past a 32-byte boundary as `data` is. */
void board_publish(struct board* b, uint64_t hash, const void* data, size_t bytes);

/* Whether rank r's record of this round has arrived; if so b->posts[r] holds it. */
int board_arrived(struct board* b, int r);

#endif
