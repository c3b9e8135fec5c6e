/* argcheck.h — the argument checks of every public entry point, in one place.
 *
 * Each check returns gcclSuccess, or an error code with a message that names fn
 * (the public function) and the bad argument, set with err_set: the thread's last
 * error. A check reads through a handle only once it knows the handle live (or
 * its caller does: argcheck_worker_thread), writes no buffer of the caller's and
 * never a communicator's last error: callers that hold a live communicator pass
 * the result through comm_fail. Safe from any thread, as handles.h is. */
#ifndef GCCL_CORE_ARGCHECK_H
#define GCCL_CORE_ARGCHECK_H

#include <stddef.h>

#include "collectives/coll.h"
#include "compress/spec.h"
#include "gccl.h"

#ifdef GCCL_HAVE_MPI
#include <mpi.h>
#endif

/* ---- handles and pointers ---------------------------------------------------------- */

/* "fn: what is NULL" when p is NULL. */
gcclResult_t argcheck_not_null(const void* p, const char* fn, const char* what);
/* comm is a live communicator (not NULL, destroyed, aborted or made up). */
gcclResult_t argcheck_comm(gcclComm_t comm, const char* fn);
/* s is a live stream. */
gcclResult_t argcheck_stream(gcclStream_t s, const char* fn);
/* c is a live compressor. */
gcclResult_t argcheck_compressor(gcclCompressor_t c, const char* fn);

/* ---- communicator creation ----------------------------------------------------------- */

/* nranks thread ranks can be made in this process. */
gcclResult_t argcheck_thread_nranks(int nranks, const char* fn);
/* gcclCommInitRank's nranks, rank and id (made by gcclGetUniqueId). */
gcclResult_t argcheck_init_rank(int nranks, const gcclUniqueId* id, int rank);
#ifdef GCCL_HAVE_MPI
/* gcclCommInitMpi's mpiComm: an intracommunicator. MPI must be initialised. */
gcclResult_t argcheck_mpi_comm(MPI_Comm mpi_comm);
#endif

/* ---- collectives --------------------------------------------------------------------- */

/* A collective call a on comm: comm live and usable, datatype, op and root valid,
 * sizes addressable, buffers present, aligned and overlapping only in place. */
gcclResult_t argcheck_collective(gcclComm_t comm, const struct coll_args* a, const char* fn);
/* The stream a collective is launched on: NULL, or a live stream. */
gcclResult_t argcheck_call_stream(gcclStream_t stream, const char* fn);
/* A compressed collective: argcheck_collective, then a compressor c made for the
 * call's datatype and tensor (a->count elements; nranks * a->count for
 * reduce-scatter, whose compressor serves the whole send buffer), sum or avg,
 * then argcheck_call_stream. */
gcclResult_t argcheck_compressed(gcclComm_t comm, const struct coll_args* a, gcclCompressor_t c, gcclStream_t stream,
                                 const char* fn);
/* A call of `kind` that runs on gccl's worker threads (a stream, or inside a
 * group) on a communicator whose transport allows calls from the caller's thread
 * only (MPI below MPI_THREAD_MULTIPLE) is gcclInvalidUsage. */
gcclResult_t argcheck_worker_thread(gcclComm_t comm, enum coll_kind kind, gcclStream_t stream);
/* The handles of a group's call number i are still live at gcclGroupEnd. */
gcclResult_t argcheck_group_call(gcclComm_t comm, gcclStream_t stream, size_t i);

/* ---- compressors and codecs ------------------------------------------------------------- */

/* gcclCompressorCreate's spec, count and dt (its messages); *parsed is the parsed
 * spec when they pass. */
gcclResult_t argcheck_compressor_spec(const char* spec, size_t count, gcclDataType_t dt, struct codec_spec* parsed);
/* gcclCompressorGetResidual (setting 0: buf is `out`) or gcclCompressorSetResidual
 * (setting 1: buf is `in`, and c must keep a residual). */
gcclResult_t argcheck_residual(gcclCompressor_t c, const void* buf, int setting);
/* gcclCompressorGetState (setting 0: buf the output of cap `bytes`, or NULL to
 * ask the size; state_bytes not NULL) and gcclCompressorSetState (setting 1: buf
 * exactly `bytes`, the compressor's state size). */
gcclResult_t argcheck_state(gcclCompressor_t c, const void* buf, size_t bytes, const size_t* state_bytes, int setting);
/* The gcclPowerSgd* steps (powersgd_api.c): c a powersgd compressor at step
 * `step` (enum powersgd_step; POWERSGD_IDLE: at any). */
gcclResult_t argcheck_powersgd_step(gcclCompressor_t c, int step, const char* fn);
/* a and b (of abytes and bbytes) host buffers that do not overlap, each not
 * NULL when it has bytes. */
gcclResult_t argcheck_host_pair(const void* a, size_t abytes, const void* b, size_t bbytes, const char* fn);
/* gcclEncodeBound and gcclEncodeBoundNonFinite. */
gcclResult_t argcheck_bound(gcclCompressor_t c, const size_t* max_bytes, const char* fn);
/* gcclEncode and its CUDA variant: a live compressor, a frame of cap >= its bound
 * that does not overlap src. */
gcclResult_t argcheck_encode(gcclCompressor_t c, const void* src, const void* frame, size_t cap,
                             const size_t* frame_bytes, const char* fn);
/* gcclDecodeAccumulate and its CUDA variant. */
gcclResult_t argcheck_decode(const void* frame, size_t frame_bytes, const void* dst, size_t count, gcclDataType_t dt,
                             const char* fn);

#endif
