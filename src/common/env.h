/* env.h — typed reads of GCCL_* environment variables. */
#ifndef GCCL_COMMON_ENV_H
#define GCCL_COMMON_ENV_H

#include <stdint.h>

/* The value of `name` as a non-negative integer, or `fallback` when unset. A value
 * that is not a plain non-negative integer is reported (WARN) and ignored. */
int64_t env_int(const char* name, int64_t fallback);
/* The value of `name`, or NULL when unset or empty. */
const char* env_str(const char* name);

#endif
