/* result.h — result codes, their messages, and the error-carrying macros. */
#ifndef GCCL_COMMON_RESULT_H
#define GCCL_COMMON_RESULT_H

#include "gccl.h"

/* One table generates the result names (gcclGetErrorString) in the order of
 * gcclResult_t, as libuv's UV_ERRNO_MAP does. */
#define GCCL_RESULT_TABLE(X)                                               \
  X(gcclSuccess, "no error")                                               \
  X(gcclSystemError, "unhandled system error")                             \
  X(gcclInternalError, "internal error - please report this")              \
  X(gcclInvalidArgument, "invalid argument")                               \
  X(gcclInvalidUsage, "invalid usage")                                     \
  X(gcclRemoteError, "remote process exited or there was a network error") \
  X(gcclInProgress, "GCCL operation in progress")                          \
  X(gcclTimeout, "timed out waiting for a peer")                           \
  X(gcclCorruptData, "corrupt data received")

/* Records a description of an error for the calling thread (printf format) and
 * returns `result`, so that `return err_set(gcclInvalidArgument, "...")` reads
 * naturally. Also logged at WARN level. Never fails. */
gcclResult_t err_set(gcclResult_t result, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* The calling thread's last error text ("" if none). Valid until the thread's
 * next err_set. */
const char* err_last(void);

/* When result is a failure, puts "fn: " before the calling thread's last error
 * text (a public function naming itself in front of a nested check's message).
 * Returns result. */
gcclResult_t err_prefix(gcclResult_t result, const char* fn);

/* Forgets the calling thread's last error text. */
void err_clear(void);

/* Propagate a failure to the caller; the happy path stays readable. */
#define GCCL_CHECK(call)                              \
  do {                                                \
    gcclResult_t check_res_ = (call);                 \
    if (check_res_ != gcclSuccess) return check_res_; \
  } while (0)

#define GCCL_CHECK_GOTO(call, res, label) \
  do {                                    \
    (res) = (call);                       \
    if ((res) != gcclSuccess) goto label; \
  } while (0)

#endif
