/* env.c — typed reads of GCCL_* environment variables. */
#include "common/env.h"

#include <errno.h>
#include <stdlib.h>

#include "common/log.h"

const char* env_str(const char* name) {
  const char* v = getenv(name);
  return (v && *v) ? v : NULL;
}

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = env_str(name);
  if (!v) return fallback;
  char* end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || x < 0) {
    GCCL_WARN("ignoring %s=%s: not a non-negative integer", name, v);
    return fallback;
  }
  GCCL_INFO(LOG_ENV, "%s set to %lld", name, x);
  return x;
}
