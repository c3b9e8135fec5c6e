/* allreduce_threads.c — four thread ranks sum a vector with gcclAllReduce. */
#include <gccl.h>
#include <pthread.h>
#include <stdio.h>

#define NRANKS 4
#define COUNT 1000

static gcclUniqueId id;
static int failures;

static void* rank_main(void* arg) {
  int rank = (int)(long)arg;
  gcclComm_t comm;
  if (gcclCommInitRank(&comm, NRANKS, id, rank) != gcclSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, gcclGetLastError(NULL));
    return NULL;
  }
  static float data[NRANKS][COUNT];
  for (int i = 0; i < COUNT; i++) data[rank][i] = (float)(rank + i);
  /* In place: every rank ends with the sum over ranks. */
  gcclResult_t res = gcclAllReduce(data[rank], data[rank], COUNT, gcclFloat32, gcclSum, comm, NULL);
  if (res != gcclSuccess) fprintf(stderr, "rank %d: %s\n", rank, gcclGetLastError(comm));
  for (int i = 0; i < COUNT; i++)
    if (data[rank][i] != (float)(NRANKS * i + NRANKS * (NRANKS - 1) / 2)) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  gcclCommDestroy(comm);
  return NULL;
}

int main(void) {
  gcclGetUniqueId(&id);
  pthread_t threads[NRANKS];
  for (long r = 0; r < NRANKS; r++) pthread_create(&threads[r], NULL, rank_main, (void*)r);
  for (int r = 0; r < NRANKS; r++) pthread_join(threads[r], NULL);
  printf("allreduce on %d thread ranks: %s\n", NRANKS, failures ? "WRONG" : "ok");
  return failures != 0;
}
