/* mpi_check.c — the harness of the multi-process tests (mpi_check.h). */
#define _POSIX_C_SOURCE 200809L
#include "mpi_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int mc_rank = 0;
int mc_nranks = 1;
static int failures;
static int saved_argc;
static char** saved_argv;

int mc_init(int* argc, char*** argv) {
  saved_argc = *argc;
  saved_argv = *argv;
  int want = MPI_THREAD_MULTIPLE;
  if (mc_flag("--thread=single")) want = MPI_THREAD_SINGLE;
  if (mc_flag("--thread=funneled")) want = MPI_THREAD_FUNNELED;
  if (mc_flag("--thread=serialized")) want = MPI_THREAD_SERIALIZED;
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(argc, argv, want, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &mc_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mc_nranks);
  return provided;
}

int mc_flag(const char* flag) {
  for (int i = 1; i < saved_argc; i++)
    if (!strcmp(saved_argv[i], flag)) return 1;
  return 0;
}

void mc_fail(const char* file, int line, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[rank %d] FAILED %s:%d: %s\n", mc_rank, file, line, msg);
  fflush(stderr);
  failures++;
}

int mc_all(int ok) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all;
}

int mc_finish(const char* name) {
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (mc_rank == 0)
    printf("%s on %d ranks: %s (%d failed checks)\n", name, mc_nranks, total ? "FAILED" : "passed", total);
  fflush(stdout);
  MPI_Finalize();
  return total ? 1 : 0;
}

void mc_setenv(const char* name, const char* value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}

gcclComm_t mc_comm(MPI_Comm mpi_comm) {
  gcclComm_t comm = NULL;
  gcclResult_t res = gcclCommInitMpi(&comm, mpi_comm);
  if (res != gcclSuccess) {
    mc_fail(__FILE__, __LINE__, "gcclCommInitMpi returned %s: %s", gcclGetErrorString(res), gcclGetLastError(NULL));
    return NULL;
  }
  return comm;
}

gcclComm_t mc_comm_with(MPI_Comm mpi_comm, const char* const env[][2]) {
  for (int i = 0; env[i][0]; i++) mc_setenv(env[i][0], env[i][1]);
  gcclComm_t comm = mc_comm(mpi_comm);
  for (int i = 0; env[i][0]; i++) mc_setenv(env[i][0], NULL);
  return comm;
}

/* FNV-1a: any change of a byte changes the hash, which is all a comparison needs. */
static uint64_t hash_bytes(const void* buf, size_t bytes) {
  const unsigned char* p = buf;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h ^ bytes;
}

void mc_same_everywhere(const void* buf, size_t bytes, const char* file, int line, const char* what) {
  uint64_t mine = hash_bytes(buf, bytes);
  uint64_t* all = malloc((size_t)mc_nranks * sizeof *all);
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int r = 0; r < mc_nranks; r++)
    if (all[r] != all[0]) {
      mc_fail(file, line, "%s: rank %d's %zu bytes differ from rank 0's", what, r, bytes);
      break;
    }
  free(all);
}

double mc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
