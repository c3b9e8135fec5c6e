/* argcheck.c — every public entry point checks its arguments here, before anything
 * runs (argcheck.h). One file, so that what gccl refuses, and with which words, is
 * read in one place; the entry points keep only the order of their checks. */
#include "core/argcheck.h"

#include <stdint.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "compress/powersgd.h"
#include "core/comm.h"
#include "device/device.h"
#ifdef GCCL_HAVE_MPI
#include "transport/mpi.h"
#endif

/* Thread ranks: each is a thread of this process, and the local transport keeps a
 * channel per ordered pair of ranks, so a hostile nranks must not reach it. */
#define LOCAL_MAX_RANKS 4096

/* ---- handles and pointers ---------------------------------------------------------- */

gcclResult_t argcheck_not_null(const void* p, const char* fn, const char* what) {
  if (!p) return err_set(gcclInvalidArgument, "%s: %s is NULL", fn, what);
  return gcclSuccess;
}

gcclResult_t argcheck_comm(gcclComm_t comm, const char* fn) {
  if (!comm) return err_set(gcclInvalidArgument, "%s: comm is NULL", fn);
  if (!handle_live(HANDLE_COMM, comm))
    return err_set(gcclInvalidArgument, "%s: comm %p is not a live communicator (destroyed, aborted, or never created)",
                   fn, (void*)comm);
  return gcclSuccess;
}

gcclResult_t argcheck_stream(gcclStream_t s, const char* fn) {
  if (!stream_valid(s)) return err_set(gcclInvalidArgument, "%s: not a live gcclStream_t", fn);
  return gcclSuccess;
}

/* NULL, destroyed and made-up compressors are refused before anything reads
 * through them. */
gcclResult_t argcheck_compressor(gcclCompressor_t c, const char* fn) {
  if (c == NULL) return err_set(gcclInvalidArgument, "%s: compressor is NULL", fn);
  if (!handle_live(HANDLE_COMPRESSOR, c))
    return err_set(gcclInvalidArgument, "%s: compressor %p is not a live compressor (destroyed, or never created)", fn,
                   (void*)c);
  return gcclSuccess;
}

/* ---- communicator creation ----------------------------------------------------------- */

gcclResult_t argcheck_thread_nranks(int nranks, const char* fn) {
  if (nranks < 1) return err_set(gcclInvalidArgument, "%s: nranks %d is less than 1", fn, nranks);
  if (nranks > LOCAL_MAX_RANKS)
    return err_set(gcclInvalidArgument, "%s: nranks %d is more than the %d thread ranks a process supports", fn, nranks,
                   LOCAL_MAX_RANKS);
  return gcclSuccess;
}

gcclResult_t argcheck_init_rank(int nranks, const gcclUniqueId* id, int rank) {
  GCCL_CHECK(argcheck_thread_nranks(nranks, "gcclCommInitRank"));
  if (rank < 0 || rank >= nranks)
    return err_set(gcclInvalidArgument, "gcclCommInitRank: rank %d is not in [0, %d)", rank, nranks);
  if (!comm_unique_id_valid(id))
    return err_set(gcclInvalidArgument, "gcclCommInitRank: the id was not made by gcclGetUniqueId");
  return gcclSuccess;
}

#ifdef GCCL_HAVE_MPI
gcclResult_t argcheck_mpi_comm(MPI_Comm mpi_comm) {
  if (mpi_comm == MPI_COMM_NULL) return err_set(gcclInvalidArgument, "gcclCommInitMpi: mpiComm is MPI_COMM_NULL");
  int inter = 0;
  int rc = MPI_Comm_test_inter(mpi_comm, &inter);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "gcclCommInitMpi: MPI_Comm_test_inter");
  if (inter)
    return err_set(gcclInvalidArgument,
                   "gcclCommInitMpi: mpiComm is an intercommunicator; gccl needs an intracommunicator");
  return gcclSuccess;
}
#endif

/* ---- collectives --------------------------------------------------------------------- */

static int has_op(enum coll_kind k) {
  return k == COLL_ALLREDUCE || k == COLL_REDUCESCATTER || k == COLL_REDUCE;
}
static int has_root(enum coll_kind k) {
  return k == COLL_BROADCAST || k == COLL_REDUCE;
}

/* Any overlap other than the in-place layout of the collective would make the
 * result depend on the algorithm's order of reads and writes. */
static gcclResult_t check_overlap(const struct coll_args* a, size_t send_bytes, size_t recv_bytes, size_t in_place_off,
                                  const char* fn) {
  uintptr_t s = (uintptr_t)a->sendbuff, r = (uintptr_t)a->recvbuff;
  if (!send_bytes || !recv_bytes || !s || !r) return gcclSuccess;
  int overlap = s < r + recv_bytes && r < s + send_bytes;
  int in_place = (a->kind == COLL_ALLGATHER)       ? s == r + in_place_off
                 : (a->kind == COLL_REDUCESCATTER) ? r == s + in_place_off
                                                   : s == r;
  if (overlap && !in_place)
    return err_set(gcclInvalidArgument, "%s: sendbuff and recvbuff overlap without being in place (in place means %s)",
                   fn,
                   a->kind == COLL_ALLGATHER       ? "sendbuff == recvbuff + rank*sendcount*size"
                   : a->kind == COLL_REDUCESCATTER ? "recvbuff == sendbuff + rank*recvcount*size"
                                                   : "sendbuff == recvbuff");
  return gcclSuccess;
}

gcclResult_t argcheck_collective(gcclComm_t comm, const struct coll_args* a, const char* fn) {
  GCCL_CHECK(argcheck_comm(comm, fn));
  if ((int)a->dt < 0 || a->dt >= gcclNumTypes)
    return err_set(gcclInvalidArgument, "%s: datatype %d is not a gcclDataType_t", fn, (int)a->dt);
  if (has_op(a->kind) && ((int)a->op < 0 || a->op >= gcclNumOps))
    return err_set(gcclInvalidArgument, "%s: op %d is not a gcclRedOp_t", fn, (int)a->op);
  if (has_root(a->kind) && (a->root < 0 || a->root >= comm->nranks))
    return err_set(gcclInvalidArgument, "%s: root %d is not in [0, %d)", fn, a->root, comm->nranks);

  /* Multiplied with overflow checks: two divisions were half of this function's time. */
  size_t size = dtype_size(a->dt), bytes = 0, spanned = 0;
  if (__builtin_mul_overflow(a->count, size, &bytes) || __builtin_mul_overflow(bytes, (size_t)comm->nranks, &spanned))
    return err_set(gcclInvalidArgument, "%s: count %zu of %s overflows the addressable size", fn, a->count,
                   dtype_name(a->dt));
  struct coll_extent e = coll_extent_of(a, size, comm->rank, comm->nranks);
  if (bytes && e.reads_send && !a->sendbuff) return err_set(gcclInvalidArgument, "%s: sendbuff is NULL", fn);
  if (bytes && e.writes_recv && !a->recvbuff) return err_set(gcclInvalidArgument, "%s: recvbuff is NULL", fn);
  if (e.reads_send && e.writes_recv)
    GCCL_CHECK(check_overlap(a, e.send_bytes, e.recv_bytes, (size_t)comm->rank * bytes, fn));
  /* The kernels read and write whole elements (vector loads assume it). Sizes are
   * powers of two: a mask, where `%` divided, a quarter of this function's time. */
  uintptr_t misaligned = size - 1;
  if (bytes && e.reads_send && ((uintptr_t)a->sendbuff & misaligned))
    return err_set(gcclInvalidArgument, "%s: sendbuff %p is not aligned to its %s elements (%zu bytes)", fn,
                   a->sendbuff, dtype_name(a->dt), size);
  if (bytes && e.writes_recv && ((uintptr_t)a->recvbuff & misaligned))
    return err_set(gcclInvalidArgument, "%s: recvbuff %p is not aligned to its %s elements (%zu bytes)", fn,
                   a->recvbuff, dtype_name(a->dt), size);
  return comm_check_usable(comm, fn); /* refused at once, queued on a stream or not */
}

gcclResult_t argcheck_call_stream(gcclStream_t stream, const char* fn) {
  if (stream && !stream_valid(stream)) return err_set(gcclInvalidArgument, "%s: stream is not a live gcclStream_t", fn);
  return gcclSuccess;
}

gcclResult_t argcheck_compressed(gcclComm_t comm, const struct coll_args* a, gcclCompressor_t c, gcclStream_t stream,
                                 const char* fn) {
  GCCL_CHECK(argcheck_collective(comm, a, fn));
  GCCL_CHECK(argcheck_compressor(c, fn));
  /* argcheck_collective bounded count * nranks * element size: no overflow. */
  size_t tensor = a->kind == COLL_REDUCESCATTER ? a->count * (size_t)comm->nranks : a->count;
  if (c->dt != a->dt)
    return err_set(gcclInvalidArgument, "%s: the compressor was made for %s, the call passes %s", fn, dtype_name(c->dt),
                   dtype_name(a->dt));
  if (c->count != tensor)
    return err_set(gcclInvalidArgument, "%s: the compressor was made for %zu elements, the call's tensor has %zu", fn,
                   c->count, tensor);
  if (a->kind != COLL_ALLGATHER && a->op != gcclSum && a->op != gcclAvg)
    return err_set(gcclInvalidArgument, "%s: compressed collectives reduce with sum or avg, not %s", fn,
                   op_name(a->op));
  if (c->spec.codec == CODEC_POWERSGD && a->kind != COLL_ALLREDUCE)
    return err_set(gcclInvalidUsage, "%s: powersgd compresses allreduces only (its factors are summed)", fn);
  return argcheck_call_stream(stream, fn);
}

/* Streams and groups run the call on one of gccl's worker threads, concurrently
 * with the application's own MPI calls: MPI allows that at MPI_THREAD_MULTIPLE only. */
gcclResult_t argcheck_worker_thread(gcclComm_t comm, enum coll_kind kind, gcclStream_t stream) {
  if ((stream || group_open()) && comm->tp->caller_thread_only)
    return err_set(gcclInvalidUsage,
                   "%s on a %s: streams and groups run collectives on gccl's worker threads, which "
                   "this communicator's MPI does not allow (initialised below MPI_THREAD_MULTIPLE); "
                   "pass a NULL stream outside groups, or call MPI_Init_thread with "
                   "MPI_THREAD_MULTIPLE",
                   coll_kind_name(kind), stream ? "stream" : "group");
  return gcclSuccess;
}

/* A communicator or stream destroyed since its call was recorded fails the group
 * before anything is launched. */
gcclResult_t argcheck_group_call(gcclComm_t comm, gcclStream_t stream, size_t i) {
  if (!handle_live(HANDLE_COMM, comm))
    return err_set(gcclInvalidArgument, "gcclGroupEnd: the communicator of the group's call %zu was destroyed", i);
  if (stream && !stream_valid(stream))
    return err_set(gcclInvalidArgument, "gcclGroupEnd: the stream of the group's call %zu was destroyed", i);
  return gcclSuccess;
}

/* ---- compressors and codecs ------------------------------------------------------------- */

static int ranges_overlap(const void* a, size_t abytes, const void* b, size_t bbytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return abytes && bbytes && x < y + bbytes && y < x + abytes;
}

gcclResult_t argcheck_compressor_spec(const char* spec, size_t count, gcclDataType_t dt, struct codec_spec* parsed) {
  if ((unsigned)dt >= gcclNumTypes)
    return err_set(gcclInvalidArgument, "gcclCompressorCreate: invalid datatype %d", dt);
  if (count > COMPRESSOR_MAX_COUNT)
    return err_set(gcclInvalidArgument, "gcclCompressorCreate: count %zu too large (at most %zu)", count,
                   (size_t)COMPRESSOR_MAX_COUNT);
  GCCL_CHECK(err_prefix(spec_parse(spec, parsed), "gcclCompressorCreate"));
  if (parsed->codec != CODEC_NONE && !dtype_is_float(dt))
    return err_set(gcclInvalidArgument,
                   "gcclCompressorCreate: codec %s compresses floating-point tensors only, not %s (use \"none\")",
                   spec_codec_name(parsed->codec), dtype_name(dt));
#ifndef GCCL_HAVE_ZSTD
  if (parsed->zstd)
    return err_set(gcclInvalidArgument,
                   "gcclCompressorCreate: spec \"%s\" asks for zstd, but gccl was built without it", spec);
#endif
  return gcclSuccess;
}

gcclResult_t argcheck_residual(gcclCompressor_t c, const void* buf, int setting) {
  const char* fn = setting ? "gcclCompressorSetResidual" : "gcclCompressorGetResidual";
  const char* name = setting ? "in" : "out";
  GCCL_CHECK(argcheck_compressor(c, fn));
  if (buf == NULL && c->count > 0) return err_set(gcclInvalidArgument, "%s: %s is NULL", fn, name);
  size_t es = dtype_size(c->dt);
  if ((uintptr_t)buf % es != 0) return err_set(gcclInvalidArgument, "%s: %s is not aligned to %zu bytes", fn, name, es);
  if (setting && !c->spec.ef)
    return err_set(gcclInvalidUsage, "%s: compressor %s keeps no residual (ef=0)", fn, c->spec_text);
  return gcclSuccess;
}

gcclResult_t argcheck_state(gcclCompressor_t c, const void* buf, size_t bytes, const size_t* state_bytes, int setting) {
  const char* fn = setting ? "gcclCompressorSetState" : "gcclCompressorGetState";
  GCCL_CHECK(argcheck_compressor(c, fn));
  size_t n;
  compressor_carried(c, &n);
  size_t need = n * sizeof(float);
  if (!setting) {
    GCCL_CHECK(argcheck_not_null(state_bytes, fn, "stateBytes"));
    if (buf != NULL && bytes < need)
      return err_set(gcclInvalidArgument, "%s: cap %zu is below the state's %zu bytes", fn, bytes, need);
    return gcclSuccess;
  }
  if (bytes != need)
    return err_set(gcclInvalidArgument, "%s: %zu bytes, but compressor %s carries %zu", fn, bytes, c->spec_text, need);
  if (need && buf == NULL) return err_set(gcclInvalidArgument, "%s: in is NULL", fn);
  return gcclSuccess;
}

gcclResult_t argcheck_powersgd_step(gcclCompressor_t c, int step, const char* fn) {
  GCCL_CHECK(argcheck_compressor(c, fn));
  if (c->spec.codec != CODEC_POWERSGD)
    return err_set(gcclInvalidArgument, "%s: compressor %s is not powersgd", fn, c->spec_text);
  const struct powersgd_state* st = c->state;
  static const char* const after[] = {"gcclPowerSgdComputeP", "gcclPowerSgdComputeQ"};
  if (step != POWERSGD_IDLE && (int)st->step != step)
    return err_set(gcclInvalidUsage, "%s: comes after %s of the same call", fn, after[step - 1]);
  return gcclSuccess;
}

gcclResult_t argcheck_host_pair(const void* a, size_t abytes, const void* b, size_t bbytes, const char* fn) {
  if ((abytes && a == NULL) || (bbytes && b == NULL)) return err_set(gcclInvalidArgument, "%s: a buffer is NULL", fn);
  if (device_is_pointer(a) || device_is_pointer(b))
    return err_set(gcclInvalidArgument, "%s: takes host buffers (this one is on a CUDA device)", fn);
  if (ranges_overlap(a, abytes, b, bbytes)) return err_set(gcclInvalidArgument, "%s: its buffers overlap", fn);
  return gcclSuccess;
}

gcclResult_t argcheck_bound(gcclCompressor_t c, const size_t* max_bytes, const char* fn) {
  GCCL_CHECK(argcheck_compressor(c, fn));
  return argcheck_not_null(max_bytes, fn, "maxBytes");
}

gcclResult_t argcheck_encode(gcclCompressor_t c, const void* src, const void* frame, size_t cap,
                             const size_t* frame_bytes, const char* fn) {
  GCCL_CHECK(argcheck_compressor(c, fn));
  if (frame == NULL || frame_bytes == NULL) return err_set(gcclInvalidArgument, "%s: frame or frameBytes is NULL", fn);
  size_t es = dtype_size(c->dt), bytes = c->count * es;
  if (src == NULL && c->count > 0) return err_set(gcclInvalidArgument, "%s: src is NULL", fn);
  if ((uintptr_t)src % es != 0)
    return err_set(gcclInvalidArgument, "%s: src is not aligned to its %s elements", fn, dtype_name(c->dt));
  if (cap < c->bound)
    return err_set(gcclInvalidArgument, "%s: cap %zu is below gcclEncodeBound's %zu bytes", fn, cap, c->bound);
  if (ranges_overlap(src, bytes, frame, cap)) return err_set(gcclInvalidArgument, "%s: src and frame overlap", fn);
  return gcclSuccess;
}

gcclResult_t argcheck_decode(const void* frame, size_t frame_bytes, const void* dst, size_t count, gcclDataType_t dt,
                             const char* fn) {
  if (frame == NULL) return err_set(gcclInvalidArgument, "%s: frame is NULL", fn);
  if ((unsigned)dt >= gcclNumTypes) return err_set(gcclInvalidArgument, "%s: invalid datatype %d", fn, dt);
  size_t es = dtype_size(dt);
  if (dst == NULL && count > 0) return err_set(gcclInvalidArgument, "%s: dst is NULL", fn);
  if ((uintptr_t)dst % es != 0)
    return err_set(gcclInvalidArgument, "%s: dst is not aligned to its %s elements", fn, dtype_name(dt));
  if (count > SIZE_MAX / es) return err_set(gcclInvalidArgument, "%s: count %zu too large", fn, count);
  if (ranges_overlap(frame, frame_bytes, dst, count * es))
    return err_set(gcclInvalidArgument, "%s: frame and dst overlap", fn);
  return gcclSuccess;
}
