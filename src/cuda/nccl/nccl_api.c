/* nccl_api.c — the NCCL function table (nccl_api.h). */
#include "cuda/nccl/nccl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "common/dl_symbols.h"
#include "common/result.h"

/* ncclCommSplit appeared in NCCL 2.18. */
#define NCCL_API_MIN_VERSION 21800

static struct nccl_api api;
static gcclResult_t api_result = gcclSuccess;
static char api_error[256];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

/* NCCL_VERSION_CODE: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after. */
static void version_text(int code, char* out, size_t cap) {
  if (code < 10000)
    snprintf(out, cap, "%d.%d.%d", code / 1000, code / 100 % 10, code % 100);
  else
    snprintf(out, cap, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
}

static void load(void) {
  /* The library the process already uses, if any: its ncclComm_t are the ones
   * the caller passes. */
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (lib == NULL && dlsym(RTLD_DEFAULT, "ncclCommSplit") != NULL) lib = RTLD_DEFAULT;
  if (lib == NULL) lib = dlopen("libnccl.so.2", RTLD_NOW);
  if (lib == NULL) {
    api_result = gcclSystemError;
    snprintf(api_error, sizeof api_error, "gcclCommInitNccl: could not load libnccl.so.2: %s", dlerror());
    return;
  }
  const struct dl_symbol syms[] = {
      {"ncclCommSplit", (void*)&api.comm_split},
      {"ncclCommDestroy", (void*)&api.comm_destroy},
      {"ncclCommAbort", (void*)&api.comm_abort},
      {"ncclCommCount", (void*)&api.comm_count},
      {"ncclCommUserRank", (void*)&api.comm_user_rank},
      {"ncclCommCuDevice", (void*)&api.comm_cu_device},
      {"ncclCommGetAsyncError", (void*)&api.comm_get_async_error},
      {"ncclGetErrorString", (void*)&api.get_error_string},
      {"ncclGetLastError", (void*)&api.get_last_error},
      {"ncclSend", (void*)&api.send},
      {"ncclRecv", (void*)&api.recv},
      {"ncclAllGather", (void*)&api.all_gather},
  };
  /* First the version: an old NCCL lacks ncclCommSplit, and saying which version
   * it is helps more than naming the missing symbol. */
  ncclResult_t (*get_version)(int*) = (ncclResult_t(*)(int*))dlsym(lib, "ncclGetVersion");
  if (get_version == NULL || get_version(&api.version) != ncclSuccess) {
    api_result = gcclSystemError;
    snprintf(api_error, sizeof api_error, "gcclCommInitNccl: libnccl.so.2 has no working ncclGetVersion");
    return;
  }
  if (api.version < NCCL_API_MIN_VERSION) {
    char have[32];
    version_text(api.version, have, sizeof have);
    api_result = gcclInvalidUsage;
    snprintf(api_error, sizeof api_error,
             "gcclCommInitNccl: NCCL %s is loaded; gccl needs NCCL 2.18 or later (ncclCommSplit)", have);
    return;
  }
  const char* missing = dl_symbols_resolve(lib, syms, sizeof syms / sizeof syms[0]);
  if (missing != NULL) {
    api_result = gcclSystemError;
    snprintf(api_error, sizeof api_error, "gcclCommInitNccl: the loaded NCCL has no %s", missing);
  }
}

gcclResult_t nccl_api_get(const struct nccl_api** out) {
  pthread_once(&api_once, load);
  *out = NULL;
  if (api_result != gcclSuccess) return err_set(api_result, "%s", api_error);
  *out = &api;
  return gcclSuccess;
}

gcclResult_t nccl_fail(const struct nccl_api* a, ncclResult_t r, ncclComm_t comm, const char* what) {
  const char* detail = a->get_last_error(comm);
  return err_set(r == ncclRemoteError ? gcclRemoteError : gcclSystemError, "NCCL: %s failed: %s%s%s", what,
                 a->get_error_string(r), detail && *detail ? ": " : "", detail ? detail : "");
}
