/* comm.h — the communicator and the internal entry points that core files share. */
#ifndef GCCL_CORE_COMM_H
#define GCCL_CORE_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "collectives/coll.h"
#include "core/handles.h"
#include "core/link_probe.h"
#include "core/road_watch.h"
#include "gccl.h"

struct fault_config;

struct gcclComm {
  int rank;
  int nranks;
  struct transport* tp;
  struct coll_ctx ctx;        /* scratch and peer buffer table, reused by every call */
  enum coll_algo forced_algo; /* GCCL_ALGO */
  int64_t timeout_ms;         /* GCCL_TIMEOUT_MS */
  struct dropin* dropin;      /* GCCL_COMPRESS (dropin.h); NULL when off */
  uint64_t seq;               /* collectives run so far */
  atomic_int async_error;     /* gcclResult_t that broke the communicator */

  /* Collectives queued or running, not yet finished. Atomic, so that a call
   * counts itself without a lock: two lock pairs were ~10% of an 8-byte
   * allreduce over MPI's shared memory (comm_pending_add). */
  atomic_int pending;
  atomic_int idle_waiters; /* threads in wait_idle: pending's drop to 0 signals idle */

  pthread_mutex_t mu;  /* guards what follows */
  pthread_cond_t idle; /* signalled when pending drops to 0 and idle_waiters > 0 */
  char last_error[512];
  struct gcclStream* group_stream;   /* runs this comm's NULL-stream work of a group */
  struct device_stage* device_stage; /* pinned host buffers for device-buffer calls (device/device.h) */
  struct fault_config* faults;       /* GCCL_FAULT, parsed; NULL when unset */
  struct link_figures link;          /* the network between nodes (link_probe.h); zeros on one node */
  struct road_watch watch;           /* the in-band limit, watched on the program's calls (road_watch.h) */
};

/* Allocates a communicator for `rank` of `nranks` with its scratch, reading the
 * GCCL_* environment. node_size is the ranks per node the caller detected
 * (nranks for thread ranks: one node); GCCL_RANKS_PER_NODE overrides it.
 * `network`: nodes exchange messages over a network (MPI), so when ranks span
 * nodes the scratch is COLL_SCRATCH_BYTES_NETWORK. The transport is attached by
 * the caller. */
gcclResult_t comm_alloc(gcclComm_t* out, int rank, int nranks, int node_size, int network);
/* Frees what comm_alloc made and the transport, if any. */
void comm_free(gcclComm_t comm);

/* Whether id was made by gcclGetUniqueId. */
int comm_unique_id_valid(const gcclUniqueId* id);

/* gcclInvalidUsage, naming fn, when comm is in an error state (a timeout, an
 * abort, a corrupt frame broke it): it refuses all work. */
gcclResult_t comm_check_usable(gcclComm_t comm, const char* fn);

/* Copies the calling thread's last error text to comm (when comm is valid) and
 * returns `result`. Inline for success, which every call passes several times. */
gcclResult_t comm_record_error(gcclComm_t comm, gcclResult_t result);
static inline gcclResult_t comm_fail(gcclComm_t comm, gcclResult_t result) {
  return result == gcclSuccess ? result : comm_record_error(comm, result);
}

/* Book-keeping of collectives queued or running (destroy and abort wait for them). */
void comm_pending_add(gcclComm_t comm, int delta);

/* Launches a checked collective: recorded in an open group, queued on a stream, or
 * executed now (enqueue.c). Fills in args' device fields (device_buffers). */
gcclResult_t enqueue_collective(gcclComm_t comm, struct coll_args* args, gcclStream_t stream);

/* Compressors that are live gcclCompressor_t handles (compress_api.c): the
 * public ones, and the GCCL_COMPRESS table's, which users can reach through
 * dropin_compressor_for (tests read their residuals with the public calls).
 * Create checks spec, count and dt as gcclCompressorCreate does (its messages),
 * then makes the compressor (compressor_create) and registers it; *out is
 * unchanged on error. Destroy frees it, its memory through the handle quarantine. */
gcclResult_t compressor_handle_create(gcclCompressor_t* out, const char* spec, size_t count, gcclDataType_t dt);
void compressor_handle_destroy(gcclCompressor_t c);

/* gcclEncode and gcclDecodeAccumulate, their argument checks included, for any
 * buffers (compress_api.c): device ones are ordered on CUDA stream cuda_stream
 * (NULL: the legacy default stream), and both return when the work is done. fn
 * names the public function in messages (cuda_api.c's stream variants too). */
gcclResult_t codec_encode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frameBytes,
                          void* cuda_stream, const char* fn);
gcclResult_t codec_decode_accumulate(const void* frame, size_t frameBytes, void* dst, size_t count, gcclDataType_t dt,
                                     void* cuda_stream, const char* fn);

/* Streams (stream.c). */
gcclResult_t stream_push(gcclStream_t s, gcclComm_t comm, const struct coll_args* args);
int stream_valid(gcclStream_t s);
/* The cudaStream_t a stream was made with (gcclStreamCreateCuda), or NULL. */
void* stream_cuda(gcclStream_t s);
void stream_set_cuda(gcclStream_t s, void* cuda);
/* The internal stream of comm that runs its NULL-stream group work (made on first use). */
gcclResult_t comm_group_stream(gcclComm_t comm, gcclStream_t* out);

/* Groups (group.c): records the call when a group is open and returns 1. */
int group_record(gcclComm_t comm, const struct coll_args* args, gcclStream_t stream);
/* Non-zero while the calling thread has a group open. */
int group_open(void);

/* GCCL_FAULT (faults.c): comm_faults_read parses it into comm->faults when set
 * (gcclInvalidUsage, saying why, when it is malformed); comm_faults_install then
 * wraps comm->tp, the rank's finished transport, with the fault injector. */
gcclResult_t comm_faults_read(gcclComm_t comm);
gcclResult_t comm_faults_install(gcclComm_t comm);

/* Rendezvous of thread ranks by unique id (rendezvous.c). */
gcclResult_t rendezvous_join(const gcclUniqueId* id, int nranks, int rank, int64_t timeout_ms, struct transport** tp);

#endif
