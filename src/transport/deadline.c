/* deadline.c — timeouts and breaking of the polling transports (deadline.h). */
#include "transport/deadline.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "common/clock.h"
#include "common/result.h"

int tp_vbreak(struct tp_break* b, gcclResult_t reason, const char* fmt, va_list ap) {
  if (atomic_exchange(&b->breaking, 1)) return 0;
  vsnprintf(b->msg, sizeof b->msg, fmt, ap);
  atomic_store(&b->reason, reason);
  return 1;
}

int tp_break(struct tp_break* b, gcclResult_t reason, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int broke = tp_vbreak(b, reason, fmt, ap);
  va_end(ap);
  return broke;
}

gcclResult_t tp_broken_error(struct tp_break* b, int rank) {
  return err_set(gcclRemoteError, "rank %d: the communicator is broken: %s", rank, b->msg);
}

gcclResult_t deadline_pause(int64_t start_ns, int64_t now_ns, int64_t timeout_ns, int64_t spin_ns, long nap_ns) {
  int64_t waited = now_ns - start_ns;
  if (waited >= timeout_ns) return gcclTimeout;
  if (waited < spin_ns) {
    sched_yield();
  } else {
    struct timespec nap = {0, nap_ns};
    nanosleep(&nap, NULL);
  }
  return gcclSuccess;
}

gcclResult_t deadline_expired(int rank, int64_t timeout_ns, const char* fmt, va_list ap) {
  char what[160];
  vsnprintf(what, sizeof what, fmt, ap);
  return err_set(gcclTimeout, "rank %d waited %lld ms for %s (GCCL_TIMEOUT_MS)", rank,
                 (long long)(timeout_ns / 1000000), what);
}

int64_t deadline_after(int64_t timeout_ns, int64_t ns) {
  int64_t now = clock_now_ns();
  if (ns > timeout_ns) ns = timeout_ns;
  return ns > INT64_MAX - now ? INT64_MAX : now + ns;
}
