/* fault.h — fault injection: a transport decorator that loses, delays, cuts,
 * repeats or corrupts chosen messages, or makes a chosen rank stop responding.
 * A test tool, compiled into the library and turned on by GCCL_FAULT, read when a
 * communicator is created; unset, no decorator is installed and nothing is slowed.
 *
 * Syntax: one or more faults separated by ';', each a kind and its keys:
 *
 *   GCCL_FAULT = fault [";" fault]...      fault = kind ":" key "=" N ["," key "=" N]...
 *
 *   drop:rank=R,send=S[,peer=P]            the message is lost (its send completes)
 *   delay:rank=R,send=S,ms=M[,peer=P]      rank R sleeps M ms before posting it
 *   truncate:rank=R,send=S,bytes=B[,peer=P]  only its first B bytes are sent
 *   duplicate:rank=R,send=S[,peer=P]       it is delivered twice (the copy follows it)
 *   flip:rank=R,send=S,byte=N,bit=B[,peer=P] bit B (0..7) of its byte N is inverted
 *   stop:rank=R,op=N                       rank R's N-th transport operation blocks
 *                                          until the communicator is aborted or broken
 *                                          (a peer timed out), then fails; so do all later
 *
 * A message is chosen by its sender R and S, its number among R's sends on the
 * communicator, counted from 1 over the communicator's life (collectives'
 * set-up exchanges included, creation not); with peer=P, among R's sends to P.
 * Operations (stop) are every isend, irecv, wait, barrier and small allgather of
 * rank R, counted from 1 likewise. Values are decimal integers; every key a kind
 * lists is required except peer, and each fault fires once. A fault that does not
 * apply to its message (truncate to B >= its size, flip of a byte past its end)
 * is not injected, and says so at WARN.
 *
 * The decorator never claims a shared address space, so every byte of every
 * algorithm travels as a message through it (the "direct" algorithms are off). */
#ifndef GCCL_TRANSPORT_FAULT_H
#define GCCL_TRANSPORT_FAULT_H

#include <stdint.h>

#include "transport/transport.h"

enum fault_kind { FAULT_DROP = 0, FAULT_DELAY, FAULT_TRUNCATE, FAULT_DUPLICATE, FAULT_FLIP, FAULT_STOP, FAULT_KINDS };

#define FAULT_RULES_MAX 8

struct fault_rule {
  enum fault_kind kind;
  int rank;       /* the sender (stop: the rank that stops) */
  int peer;       /* -1: messages to any peer count */
  uint64_t send;  /* message faults: the chosen send, from 1 */
  uint64_t op;    /* stop: the chosen operation, from 1 */
  uint64_t ms;    /* delay */
  uint64_t bytes; /* truncate: bytes kept */
  uint64_t byte;  /* flip: offset in the message */
  int bit;        /* flip: 0..7 */
};

struct fault_config {
  int n;
  struct fault_rule rules[FAULT_RULES_MAX];
};

/* The name of a kind as GCCL_FAULT spells it ("drop", ...). */
const char* fault_kind_name(enum fault_kind kind);

/* Parses `text` (the syntax above) for a communicator of nranks ranks. Returns
 * gcclSuccess, or gcclInvalidUsage with a message that quotes the offending part
 * (unknown kind or key, a key given twice or missing, a value that is not a
 * decimal integer or out of range, a rank or peer not in [0, nranks)); *cfg is
 * then unspecified. */
gcclResult_t fault_config_parse(struct fault_config* cfg, const char* text, int nranks);

/* Wraps `inner`, one rank's endpoint, with the faults of cfg that concern it (cfg
 * is copied). On success the decorator owns inner and destroys it with itself; on
 * failure (out of memory) inner is left to the caller. */
gcclResult_t fault_transport_create(struct transport** tp, struct transport* inner, const struct fault_config* cfg);

/* inner's endpoint when tp is a fault decorator, else tp itself. */
struct transport* fault_transport_inner(struct transport* tp);

/* Copies the faults this rank's decorator has injected so far, by kind, into
 * counts[FAULT_KINDS]; all zero when tp is not a fault decorator. Any thread. */
void fault_transport_injected(struct transport* tp, uint64_t counts[FAULT_KINDS]);

#endif
