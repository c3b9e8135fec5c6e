/* dropin.h — GCCL_COMPRESS: plain gcclAllReduce calls, compressed without a
 * change to the caller's code.
 *
 * GCCL_COMPRESS=SPEC (read once, at communicator creation) compresses every
 * gcclAllReduce on a float tensor (fp32, fp64, fp16, bf16) of at least
 * GCCL_COMPRESS_MIN_BYTES bytes (default 65536) with op sum or avg: the call runs
 * as gcclAllReduceCompressed with a compressor of that spec would, launched
 * without repeating the checks gcclAllReduce made; other calls stay dense.
 * GCCL_COMPRESS=auto:SPEC compresses only the calls the α-β-γ model
 * (collectives/cost_model.h) predicts faster than the best dense algorithm. An
 * invalid spec is reported (WARN) and leaves every call dense. INFO logging
 * (GCCL_DEBUG=INFO, subsystems COLL and TUNING) says, call by call, what was
 * compressed with which spec and what was not and why.
 *
 * Error-feedback state lives in a table keyed by (send buffer address, count,
 * datatype): each entry owns a compressor made with the spec. The table holds at
 * most GCCL_COMPRESS_TABLE entries (default 64); the least recently used one is
 * evicted (its compressor and residual destroyed) when a new key needs room, but
 * only while the communicator has no collective queued or running: until then the
 * table may grow past the bound, and it shrinks back at the next call that finds
 * the communicator idle. A key is an address, so a buffer freed and reallocated at
 * the same address with the same count and datatype inherits the old residual.
 *
 * A call uses its entry's compressor from the moment it is launched (on a stream:
 * queued) until it completes, so, as with any error-feedback state:
 *  - the same buffer must not be in flight twice at once (two streams, or twice in
 *    one group);
 *  - one group must not hold more distinct drop-in buffers of one communicator
 *    than the table bound (a recorded call is not yet queued, so it does not keep
 *    its entry from eviction);
 *  - one thread at a time launches on a communicator (as everywhere in gccl).
 *
 * Every rank decides alike as long as every rank sees the same environment and the
 * same call: the decision depends on count, datatype, op, buffer alignment and the
 * model's inputs only. A rank whose environment differs (drop-in off here, on
 * there, or another spec) makes its peers' calls fail agreement with
 * gcclInvalidUsage on every rank. */
#ifndef GCCL_CORE_DROPIN_H
#define GCCL_CORE_DROPIN_H

#include <stddef.h>
#include <stdint.h>

#include "gccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DROPIN_MIN_BYTES_DEFAULT ((size_t)64 << 10)
#define DROPIN_TABLE_DEFAULT 64

struct dropin;
struct coll_args;

/* Counters of one communicator's drop-in, for logs and tests. */
struct dropin_stats {
  uint64_t compressed; /* allreduce calls sent through the compressed path */
  uint64_t dense;      /* allreduce calls left dense, for any reason */
  uint64_t evictions;  /* table entries destroyed to keep the bound */
  size_t entries;      /* entries in the table now */
};

/* Reads GCCL_COMPRESS, GCCL_COMPRESS_MIN_BYTES and GCCL_COMPRESS_TABLE for a
 * communicator of nranks ranks, local_size per node. *out is NULL when the
 * drop-in is off (unset, invalid, or codec none). With auto:SPEC and `measure`
 * (thread ranks), the codec's and the reduction's rates are measured here (once
 * per process); without (MPI ranks), dropin_measure brings rank 0's. Errors:
 * gcclSystemError (out of memory). */
gcclResult_t dropin_create(struct dropin** out, int nranks, int local_size, int measure);
void dropin_destroy(struct dropin* d);

/* Whether dropin_measure has work on comm (GCCL_COMPRESS=auto:SPEC): every rank
 * of an MPI communicator must agree before any calls it. */
int dropin_measures(gcclComm_t comm);
/* auto:SPEC on a communicator of processes, once its transport works and
 * link_measure (core/link_probe.h) ran, on every rank: when the ranks span nodes,
 * rank 0 measures the codec's and the reduction's rates in the communicator's
 * scratch, and every rank takes them and comm->link into its model, so that all
 * decide alike. Nothing to do when the drop-in is off or not auto. Errors: the
 * transport's. */
gcclResult_t dropin_measure(gcclComm_t comm);

/* For a plain allreduce `a` on comm, whose arguments passed the collective's
 * checks: sets *comp to the compressor of its table entry when the call is to run
 * compressed, else NULL. Errors: making a compressor failed. */
gcclResult_t dropin_route(gcclComm_t comm, const struct coll_args* a, gcclCompressor_t* comp);

/* For tests: the drop-in's counters; returns 0 (and zeroes *out) when it is off. */
int dropin_get_stats(gcclComm_t comm, struct dropin_stats* out);
/* For tests: the compressor that holds the residual of (buf, count, dt), or NULL. */
gcclCompressor_t dropin_compressor_for(gcclComm_t comm, const void* buf, size_t count, gcclDataType_t dt);
/* For tests: comm alone re-reads the environment, as if it were created now, and
 * its table is dropped (ranks with different environments). comm must be idle. */
gcclResult_t dropin_reload(gcclComm_t comm);

#ifdef __cplusplus
}
#endif

#endif
