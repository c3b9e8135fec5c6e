/* nccl_api.h — the NCCL functions gccl calls, reached through dlopen.
 *
 * libgccl has no link-time dependency on libnccl: a process that passes an
 * ncclComm_t to gcclCommInitNccl has NCCL loaded already, and gccl must call
 * that very library (an ncclComm_t means nothing to another copy). So the table
 * is resolved from libnccl.so.2 when the process has it loaded, else from the
 * process's global symbols (NCCL linked statically into the program), else by
 * loading libnccl.so.2. nccl.h is needed at compile time only, for the types. */
#ifndef GCCL_CUDA_NCCL_API_H
#define GCCL_CUDA_NCCL_API_H

#include <nccl.h>

#include "gccl.h"

struct nccl_api {
  int version; /* ncclGetVersion's code, e.g. 22809 for 2.28.9 */
  ncclResult_t (*comm_split)(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
  ncclResult_t (*comm_destroy)(ncclComm_t comm);
  ncclResult_t (*comm_abort)(ncclComm_t comm);
  ncclResult_t (*comm_count)(const ncclComm_t comm, int* count);
  ncclResult_t (*comm_user_rank)(const ncclComm_t comm, int* rank);
  ncclResult_t (*comm_cu_device)(const ncclComm_t comm, int* device);
  ncclResult_t (*comm_get_async_error)(ncclComm_t comm, ncclResult_t* error);
  const char* (*get_error_string)(ncclResult_t result);
  const char* (*get_last_error)(ncclComm_t comm);
  ncclResult_t (*send)(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                       cudaStream_t stream);
  ncclResult_t (*recv)(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*all_gather)(const void* in, void* out, size_t count, ncclDataType_t type, ncclComm_t comm,
                             cudaStream_t stream);
};

/* The table, resolved once per process (thread-safe). Errors, recorded with
 * err_set every time they are returned: gcclSystemError (no libnccl.so.2, or a
 * symbol is missing), gcclInvalidUsage (NCCL older than 2.18: no ncclCommSplit). */
gcclResult_t nccl_api_get(const struct nccl_api** api);

/* Records the failure of NCCL call `what` (result r, not ncclSuccess) with NCCL's
 * texts and returns gcclRemoteError for ncclRemoteError, else gcclSystemError. */
gcclResult_t nccl_fail(const struct nccl_api* api, ncclResult_t r, ncclComm_t comm, const char* what);

#endif
