/* result.c — result names and the per-thread error text. */
#include "common/result.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

static const char* const result_names[] = {
#define GCCL_RESULT_NAME(code, text) text,
    GCCL_RESULT_TABLE(GCCL_RESULT_NAME)
#undef GCCL_RESULT_NAME
};

const char* gcclGetErrorString(gcclResult_t result) {
  if ((int)result < 0 || result >= gcclNumResults) return "unknown result code";
  return result_names[result];
}

/* One buffer per thread: errors raised on a stream's worker thread are copied to
 * the communicator by the caller, so the text survives the thread. */
static _Thread_local char last_error[512];

gcclResult_t err_set(gcclResult_t result, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  GCCL_WARN("%s: %s", gcclGetErrorString(result), last_error);
  return result;
}

const char* err_last(void) {
  return last_error;
}

gcclResult_t err_prefix(gcclResult_t result, const char* fn) {
  if (result == gcclSuccess) return result;
  size_t n = strlen(fn);
  if (n + 3 > sizeof last_error) return result;
  memmove(last_error + n + 2, last_error, sizeof last_error - n - 2); /* the text's tail may be cut */
  last_error[sizeof last_error - 1] = '\0';
  memcpy(last_error, fn, n);
  memcpy(last_error + n, ": ", 2);
  return result;
}

void err_clear(void) {
  last_error[0] = '\0';
}
