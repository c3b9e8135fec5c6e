/* mpi_board.c — the MPI transport's board (board.h) when every rank runs on this
 * node: step 0 of a call, and a small allreduce's data, in shared memory.
 *
 * At np 2 Open MPI's allreduce of 4 bytes takes about 0.3 us over its shared
 * memory, and the same exchange on MPI's point-to-point messages about 0.23 us:
 * less than gccl's own work per call leaves (BENCHMARKS.md, issue 30). On the
 * board a round is one cache line written by each rank and read by the others.
 *
 * The memory is a POSIX shared memory object: rank 0 makes it under a name of its
 * own, every rank maps it, and rank 0 removes the name once all have, so nothing
 * outlives the processes whatever becomes of them. Freeing it is local (munmap),
 * unlike MPI's shared windows, whose free waits for every rank: a communicator
 * whose peer failed still frees. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/env.h"
#include "common/log.h"
#include "common/result.h"
#include "transport/mpi_internal.h"

/* Maps the object `name` of `bytes`, made here when `create`. NULL on failure. */
static void* map_board(const char* name, size_t bytes, int create) {
  int fd = shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0) return NULL;
  void* mem = NULL;
  if (!create || ftruncate(fd, (off_t)bytes) == 0) mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return mem == MAP_FAILED ? NULL : mem;
}

gcclResult_t mpi_board_create(struct mpi_tp* t, int wanted) {
  int rank = t->base.rank, nranks = t->base.nranks;
  int ok = wanted && env_int("GCCL_MPI_BOARD", 1) != 0, rc;
  /* Every rank takes part in every step, so that they all end with a board or none. */
  if ((rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, t->comm)) != MPI_SUCCESS)
    return mpi_error(rc, "MPI transport: MPI_Allreduce on the board");
  if (!ok) {
    GCCL_INFO(LOG_INIT, "no board: GCCL_MPI_BOARD=0 or GCCL_FAULT on a rank; calls agree on MPI messages");
    return gcclSuccess;
  }
  size_t bytes = board_bytes(nranks);
  char name[64];
  snprintf(name, sizeof name, "/gccl-board-%016llx-%ld", (unsigned long long)t->comm_id, (long)getpid());
  void* mem = NULL;
  if (rank == 0) mem = map_board(name, bytes, 1);
  int made = rank != 0 || mem != NULL;
  if ((rc = MPI_Bcast(name, (int)sizeof name, MPI_CHAR, 0, t->comm)) != MPI_SUCCESS ||
      (rc = MPI_Bcast(&made, 1, MPI_INT, 0, t->comm)) != MPI_SUCCESS) {
    if (mem) munmap(mem, bytes);
    if (rank == 0) shm_unlink(name);
    return mpi_error(rc, "MPI transport: MPI_Bcast of the board's name");
  }
  if (made && rank != 0) mem = map_board(name, bytes, 0);
  /* Each rank clears its own part here, before any rank can post. */
  int attached = mem && board_init(&t->board, mem, rank, nranks) == gcclSuccess;
  ok = attached;
  rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, t->comm);
  if (rank == 0 && made) shm_unlink(name); /* every rank that could map it has */
  if (rc == MPI_SUCCESS && ok) {
    t->board_bytes = bytes;
    GCCL_INFO(LOG_INIT, "board of %zu bytes in shared memory: calls agree on it", bytes);
    return gcclSuccess;
  }
  if (rc == MPI_SUCCESS)
    GCCL_INFO(LOG_INIT, "no board: a rank could not map shared memory (%s); calls agree on MPI messages", name);
  if (attached) board_fini(&t->board);
  if (mem) munmap(mem, bytes);
  return rc == MPI_SUCCESS ? gcclSuccess : mpi_error(rc, "MPI transport: MPI_Allreduce on the board");
}

void mpi_board_destroy(struct mpi_tp* t) {
  if (!t->board_bytes) return;
  munmap(t->board.mem, t->board_bytes);
  board_fini(&t->board);
  t->board_bytes = 0;
}
