/* board.c — the board's memory and its rounds (board.h).
 *
 * Rank r's part is two slots, each a 32-byte head (round, hash, bytes, shift)
 * followed by the data, so that a small record travels in the cache line of its
 * round number: at 4 bytes a post is one line written and one line read per peer.
 *
 * The data starts `shift` bytes past the head: as far past a 32-byte boundary as
 * the poster's own data, so that the copy into the slot moves 32-byte vectors
 * between equally aligned addresses. Data 16 bytes off a boundary, as malloc
 * returns it, went at 32 bytes past the head and took 2.4x as long at 64 KiB, np
 * 2 (17 us against 7 from an aligned buffer), and the drop-in's 64 KiB allreduce
 * 1.0-1.3x Open MPI's. */
#include "transport/board.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/result.h"

struct board_head {
  _Atomic uint64_t round; /* the round whose record the slot holds; written last */
  uint64_t hash;
  uint64_t bytes;
  uint64_t shift; /* the data starts this many bytes past the head: < BOARD_ALIGN */
};

_Static_assert(sizeof(struct board_head) == 32, "a slot's data area starts 32 bytes in, on a 32-byte boundary");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "a round number is a plain 8-byte word in the shared memory");

#define BOARD_LINE 64
#define BOARD_ALIGN 32 /* the copies' vectors (AVX2) */

static size_t slot_bytes(void) {
  size_t b = sizeof(struct board_head) + BOARD_ALIGN - 1 + TP_BOARD_MAX_BYTES;
  return (b + BOARD_LINE - 1) / BOARD_LINE * BOARD_LINE;
}

static struct board_head* slot(const struct board* b, int rank, uint64_t round) {
  return (struct board_head*)(b->mem + ((size_t)rank * 2 + (round & 1)) * slot_bytes());
}

size_t board_bytes(int nranks) {
  return (size_t)nranks * 2 * slot_bytes();
}

gcclResult_t board_init(struct board* b, void* mem, int rank, int nranks) {
  memset(b, 0, sizeof *b);
  if ((uintptr_t)mem % BOARD_LINE)
    return err_set(gcclInternalError, "a board at %p, off a %d-byte line", mem, BOARD_LINE);
  b->posts = calloc((size_t)nranks, sizeof *b->posts);
  if (!b->posts) return err_set(gcclSystemError, "out of memory for the board of %d ranks", nranks);
  b->mem = mem;
  b->rank = rank;
  b->nranks = nranks;
  memset(slot(b, rank, 0), 0, 2 * slot_bytes()); /* this rank's part: faulted in now, still round 0 */
  return gcclSuccess;
}

void board_fini(struct board* b) {
  free(b->posts);
  b->posts = NULL;
}

void board_publish(struct board* b, uint64_t hash, const void* data, size_t bytes) {
  uint64_t round = ++b->round;
  struct board_head* h = slot(b, b->rank, round);
  h->hash = hash;
  h->bytes = bytes;
  h->shift = (uintptr_t)data % BOARD_ALIGN; /* the slot's data area starts on a boundary */
  if (bytes) memcpy((unsigned char*)(h + 1) + h->shift, data, bytes);
  atomic_store_explicit(&h->round, round, memory_order_release);
}

int board_arrived(struct board* b, int r) {
  const struct board_head* h = slot(b, r, b->round);
  if (atomic_load_explicit(&h->round, memory_order_acquire) != b->round) return 0;
  b->posts[r] = (struct tp_post){h->hash, (size_t)h->bytes, (const unsigned char*)(h + 1) + h->shift};
  return 1;
}
