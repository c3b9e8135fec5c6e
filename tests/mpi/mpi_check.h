/* mpi_check.h — a small harness for gccl's multi-process tests under mpirun.
 *
 * Each test program calls mc_init, runs its cases on every rank, and returns
 * mc_finish's verdict. A failed check prints the rank, the place and a message,
 * and the program goes on, so one run reports every failure; the exit status is
 * non-zero when any rank failed. */
#ifndef GCCL_TESTS_MPI_CHECK_H
#define GCCL_TESTS_MPI_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "gccl_mpi.h"

extern int mc_rank;   /* this process's rank in MPI_COMM_WORLD */
extern int mc_nranks; /* MPI_COMM_WORLD's size */

/* MPI_Init_thread at the level an argument "--thread=single|funneled|serialized|
 * multiple" names (multiple when absent); returns the level MPI provides. */
int mc_init(int* argc, char*** argv);
/* Whether the program was given the argument `flag`. */
int mc_flag(const char* flag);
/* Records a failure of this rank at file:line. */
void mc_fail(const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* Finalizes MPI and returns the exit status: 0 when no rank failed. Rank 0
 * prints the verdict with `name`. */
int mc_finish(const char* name);

/* 1 when `ok` holds on every rank (collective over MPI_COMM_WORLD). */
int mc_all(int ok);
/* Sets, or unsets when value is NULL, an environment variable; gccl reads the
 * GCCL_* ones when a communicator is created. */
void mc_setenv(const char* name, const char* value);
/* gcclCommInitMpi on `mpi_comm`, recording a failure; NULL if it failed. */
gcclComm_t mc_comm(MPI_Comm mpi_comm);
/* The same with the variables of `env` ({name, value} pairs up to {NULL, NULL};
 * a NULL value unsets) set for the creation only. */
gcclComm_t mc_comm_with(MPI_Comm mpi_comm, const char* const env[][2]);
/* Fails unless buf's bytes are the same on every rank of world (collective). */
void mc_same_everywhere(const void* buf, size_t bytes, const char* file, int line, const char* what);
/* Seconds on a monotonic clock. */
double mc_now(void);

#define MC_CHECK(cond, ...)                                \
  do {                                                     \
    if (!(cond)) mc_fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/* A gccl call on comm (or NULL) that must succeed. */
#define MC_OK(call, comm)                                                                                            \
  do {                                                                                                               \
    gcclResult_t mc_res_ = (call);                                                                                   \
    if (mc_res_ != gcclSuccess)                                                                                      \
      mc_fail(__FILE__, __LINE__, "%s returned %s: %s", #call, gcclGetErrorString(mc_res_), gcclGetLastError(comm)); \
  } while (0)

/* A gccl call that must fail with `expected`. */
#define MC_FAILS(call, expected, comm)                                                                    \
  do {                                                                                                    \
    gcclResult_t mc_res_ = (call);                                                                        \
    if (mc_res_ != (expected))                                                                            \
      mc_fail(__FILE__, __LINE__, "%s returned %s, expected %s (%s)", #call, gcclGetErrorString(mc_res_), \
              gcclGetErrorString(expected), mc_res_ ? gcclGetLastError(comm) : "");                       \
  } while (0)

#define MC_SAME_EVERYWHERE(buf, bytes, what) mc_same_everywhere(buf, bytes, __FILE__, __LINE__, what)

#endif
