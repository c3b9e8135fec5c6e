/* deadline.h — how a wait of a polling transport ends: past its deadline, or
 * because the transport broke. Shared by the MPI and NCCL transports.
 *
 * Such a transport waits in a loop: it polls what it waits for, and between
 * polls calls deadline_pause, which ends the wait with gcclTimeout once the
 * timeout has passed and otherwise gives the core away. The first failure (a
 * timeout, a failed request, an abort, a peer's failure) breaks the transport
 * for good: tp_break records its reason and message once, from any thread, and
 * every later operation fails with tp_broken_error. */
#ifndef GCCL_TRANSPORT_DEADLINE_H
#define GCCL_TRANSPORT_DEADLINE_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>

#include "gccl.h"

/* Whether and why a transport broke; all zero (calloc) is a working transport. */
struct tp_break {
  atomic_int breaking; /* taken by the one thread that records the failure */
  atomic_int reason;   /* gcclSuccess while the transport works; published after msg */
  char msg[256];
};

/* Marks the transport broken with `reason` and the formatted message. Only the
 * first call counts; any thread may call. Returns 1 when this call broke the
 * transport, 0 when another had already (its reason and message stay). */
int tp_break(struct tp_break* b, gcclResult_t reason, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int tp_vbreak(struct tp_break* b, gcclResult_t reason, const char* fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* gcclSuccess while the transport works, else the reason it broke. Any thread. */
static inline gcclResult_t tp_break_reason(struct tp_break* b) {
  return (gcclResult_t)atomic_load(&b->reason);
}

/* The error of an operation that finds the transport broken (call it only once
 * tp_break_reason said so): records "rank R: the communicator is broken: MSG"
 * and returns gcclRemoteError. */
gcclResult_t tp_broken_error(struct tp_break* b, int rank);

/* One pause of a wait that started at start_ns, now being now_ns: gcclTimeout
 * once timeout_ns has passed (nothing recorded: the caller says what it waited
 * for, with deadline_expired); otherwise yields the core (sched_yield) within
 * spin_ns of the start, naps nap_ns after that, and returns gcclSuccess. */
gcclResult_t deadline_pause(int64_t start_ns, int64_t now_ns, int64_t timeout_ns, int64_t spin_ns, long nap_ns);

/* Records "rank R waited T ms for WHAT (GCCL_TIMEOUT_MS)", WHAT formatted from
 * fmt, and returns gcclTimeout. Breaking the transport is the caller's. */
gcclResult_t deadline_expired(int rank, int64_t timeout_ns, const char* fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Now plus ns, at most the timeout (which may be "for ever"), without overflow. */
int64_t deadline_after(int64_t timeout_ns, int64_t ns);

#endif
