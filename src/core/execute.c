/* execute.c — one collective call, in the calling thread: agree → run → barrier →
 * commit or abort (execute.h). The layers above (argument checks, groups,
 * streams) only decide when a call gets here; this is the one place a call runs. */
#include "core/execute.h"

#include <stdatomic.h>

#include "collectives/tuner.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "core/comm.h"
#include "core/in_band_limit.h"
#include "device/device.h"

/* The algorithm for a call: the tuner's, with a compressor's codec in mind, or
 * GCCL_ALGO when the collective has it. The same on every rank. */
static enum coll_algo choose_algo(gcclComm_t comm, const struct coll_args* a, size_t bytes) {
  if (!a->comp)
    return tuner_choose(a->kind, bytes, comm->nranks, comm->ctx.local_size, tuner_caps(comm->tp), &comm->ctx.net,
                        comm->forced_algo);
  return tuner_choose_compressed(a->kind, &a->comp->spec, a->count, comm->nranks, comm->ctx.local_size,
                                 comm->forced_algo);
}

/* Whether a call ends in the all-or-nothing barrier. Without it a rank that had
 * all it needed returned success while a peer failed later (a frame found
 * corrupt by its last receiver, a peer that timed out), its error feedback a step
 * ahead of the failed ranks', which keep theirs to retry; and after a lost
 * message, ranks that took the next message of the pair in its place returned
 * wrong sums as success (tests/core/test_faults.cc). A rank that failed aborts
 * the transport, so the others leave the barrier with its error.
 *
 * Not needed: after the direct algorithms, which end in a barrier already; and
 * for a dense allreduce, reduce-scatter or allgather over a transport that
 * delivers every message posted (agree_in_band: MPI, not under GCCL_FAULT).
 * There no residual moves, and a rank holds its result only once every rank's
 * data has reached it, as for the in-band exchange (README, "Small calls over
 * MPI"). Across nodes the barrier's two latencies were up to 5% of a 128-512
 * KiB call at 1 Gbit/s (BENCHMARKS.md, issue 30). Broadcast and reduce keep it: a
 * leaf of the one or a sender of the other is done before the root is. */
static int ends_in_barrier(const struct transport* tp, const struct coll_args* a, enum coll_algo algo) {
  if (algo == ALGO_DIRECT) return 0;
  int every_rank_needs_all = a->kind == COLL_ALLREDUCE || a->kind == COLL_REDUCESCATTER || a->kind == COLL_ALLGATHER;
  return !(tp->agree_in_band && !a->comp && every_rank_needs_all);
}

/* The call after its agreement: the schedule, the closing barrier, the commit. */
static gcclResult_t run_agreed(gcclComm_t comm, const struct coll_args* a, enum coll_algo algo) {
  struct transport* tp = comm->tp;
  gcclResult_t res = coll_run(&comm->ctx, a, algo);
  /* Step last: a call succeeds on no rank unless it succeeded on all. */
  if (res == gcclSuccess && ends_in_barrier(tp, a, algo)) res = tp_barrier(tp);
  if (res == gcclSuccess && a->comp) res = compressor_commit(a->comp); /* the host's or the GPU twin's residual */
  /* Peers are mid-collective: a local failure must not leave them waiting. */
  if (res != gcclSuccess) tp_abort(tp, res);
  return res;
}

gcclResult_t execute_collective(gcclComm_t comm, const struct coll_args* call) {
  size_t bytes = call->count * dtype_size(call->dt);
  if (call->device) { /* staged through pinned host memory: device_execute calls back with host buffers */
    enum coll_algo algo = choose_algo(comm, call, bytes);
    return comm_fail(comm, device_execute(&comm->device_stage, &comm->ctx, call, algo, comm, execute_collective));
  }
  log_set_rank(comm->rank);
  struct transport* tp = comm->tp;
  /* Checked at the call too; again here, since stream and group work runs later. */
  GCCL_CHECK(comm_fail(comm, comm_check_usable(comm, coll_kind_name(call->kind))));
  /* Codec "none" is the dense path itself: bit-identical to the dense call. The
   * call is copied only then: a copy of the fields just written stalls on store
   * forwarding, a few percent of a small call over MPI. */
  struct coll_args dense;
  const struct coll_args* a = call;
  if (call->comp && call->comp->spec.codec == CODEC_NONE) {
    dense = *call;
    dense.comp = NULL;
    a = &dense;
  }
  enum coll_algo tuned = choose_algo(comm, a, bytes);
  int watched = road_watch_sees(&comm->watch, bytes, tuned);
  enum coll_algo algo = watched ? road_watch_road(&comm->watch, bytes, tuned) : tuned;
  int64_t start = watched ? clock_now_ns() : 0;
  GCCL_INFO(LOG_COLL, "%s seq %llu count %zu %s %s root %d algo %s%s%s", coll_kind_name(a->kind),
            (unsigned long long)comm->seq, a->count, dtype_name(a->dt), op_name(a->op), a->root, algo_name(algo),
            a->comp ? " codec " : "", a->comp ? a->comp->spec_text : "");
  if (a->comp) a->comp->rank = (uint64_t)comm->rank; /* stochastic rounding: independent draws per rank */
  gcclResult_t res = device_place_residual(a);
  if (res != gcclSuccess) tp_abort(tp, res); /* peers are on their way into the agreement */
  if (res == gcclSuccess && algo == ALGO_IN_BAND) {
    /* Agreement, data and verdict in one exchange, on a transport that delivers
     * what it was given: all or nothing without a barrier (in_band.c). A
     * mismatch leaves the communicator usable, as coll_agree's does. */
    res = coll_agree_allreduce(&comm->ctx, a, comm->seq++);
    if (res != gcclSuccess && res != gcclInvalidUsage) tp_abort(tp, res);
  } else if (res == gcclSuccess) {
    res = coll_agree(&comm->ctx, call, algo, comm->seq++);
    if (res == gcclSuccess) res = run_agreed(comm, a, algo);
  }
  if (res == gcclSuccess && watched) {
    /* No less than its floor, as the limit's timing: a look's few calls can ride a burst allowance. */
    double took = (double)(clock_now_ns() - start) * 1e-9, least = in_band_limit_floor(comm, algo, bytes);
    res = road_watch_after(&comm->watch, tp, bytes, tuned, took > least ? took : least);
  }
  if (res != gcclSuccess) {
    if (a->comp) compressor_abort(a->comp); /* the residual stays as it was */
    tp_cancel_all(tp);
    gcclResult_t why = tp_broken(tp);
    if (why != gcclSuccess) atomic_store(&comm->async_error, why);
  }
  return comm_fail(comm, res);
}
