/* clock.h — monotonic time and deadlines. */
#ifndef GCCL_COMMON_CLOCK_H
#define GCCL_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clock_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The same clock at the kernel's tick (a few ms), for a few ns a read: for rate
 * limits on hot paths, where clock_now_ns's tens of ns show. */
static inline int64_t clock_coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
