/* group.c — gcclGroupStart/End: record a thread's collectives, then launch them together.
 *
 * One thread driving several ranks cannot run their blocking collectives one after
 * another (the first would wait for ranks the thread has not reached). Inside a
 * group each call is recorded; gcclGroupEnd queues calls that have a stream and
 * runs NULL-stream calls concurrently on each communicator's internal stream. */
#include <stdlib.h>

#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"

struct group_op {
  gcclComm_t comm;
  struct coll_args args;
  gcclStream_t stream;
};

/* Per thread: groups belong to the thread that opened them, as in NCCL. The op
 * array grows to the largest group seen and is kept. */
static _Thread_local int depth;
static _Thread_local struct group_op* ops;
static _Thread_local size_t nops, capacity;
static _Thread_local gcclResult_t record_error;

gcclResult_t gcclGroupStart(void) {
  depth++;
  return gcclSuccess;
}

int group_open(void) {
  return depth > 0;
}

int group_record(gcclComm_t comm, const struct coll_args* args, gcclStream_t stream) {
  if (depth == 0) return 0;
  if (nops == capacity) {
    size_t cap = capacity ? 2 * capacity : 16;
    struct group_op* grown = realloc(ops, cap * sizeof *ops);
    if (!grown) {
      record_error = err_set(gcclSystemError, "gcclGroupEnd: out of memory recording a group");
      return 1;
    }
    ops = grown;
    capacity = cap;
  }
  ops[nops++] = (struct group_op){comm, *args, stream};
  return 1;
}

gcclResult_t gcclGroupEnd(void) {
  if (depth == 0) return err_set(gcclInvalidUsage, "gcclGroupEnd without a matching gcclGroupStart");
  if (--depth > 0) return gcclSuccess;
  gcclResult_t res = record_error;
  record_error = gcclSuccess;
  size_t n = nops;
  nops = 0;
  /* A handle destroyed since its call was recorded fails the group before
   * anything is launched. */
  for (size_t i = 0; i < n && res == gcclSuccess; i++) res = argcheck_group_call(ops[i].comm, ops[i].stream, i);
  /* Launch everything first, then wait: the calls need each other to finish. */
  size_t launched = 0;
  for (; launched < n && res == gcclSuccess; launched++) {
    gcclStream_t s = ops[launched].stream;
    if (!s) res = comm_group_stream(ops[launched].comm, &s);
    if (res == gcclSuccess) res = stream_push(s, ops[launched].comm, &ops[launched].args);
  }
  for (size_t i = 0; i < launched; i++) {
    if (ops[i].stream) continue;
    gcclStream_t s = ops[i].comm->group_stream;
    if (!s) continue;
    gcclResult_t r = gcclStreamSynchronize(s);
    if (r != gcclSuccess && res == gcclSuccess) {
      res = r;
      err_set(r, "gcclGroupEnd: %s", gcclGetLastError(ops[i].comm));
    }
  }
  return res;
}
