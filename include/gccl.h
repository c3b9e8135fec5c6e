/* gccl.h — the public API of gccl, gradient-compressed collective communication.
 *
 * Read top to bottom as a manual: results and types, communicators, dense
 * collectives, streams and groups, then compression.
 *
 * Conventions, as in NCCL:
 *  - Every function returns a gcclResult_t; gcclSuccess (0) means it worked.
 *    On any other result, gcclGetLastError(comm) (or gcclGetLastError(NULL) for
 *    calls without a valid communicator) says in words what was wrong.
 *  - A collective must be called by every rank of the communicator, in the same
 *    order, with the same count, datatype, op and root. If ranks disagree, every
 *    rank returns gcclInvalidUsage and the message names the mismatch; nothing is
 *    written to any receive buffer and the communicator stays usable.
 *  - A peer that never arrives makes the call return gcclTimeout after
 *    GCCL_TIMEOUT_MS milliseconds (default 300000); the communicator is then in an
 *    error state (see gcclCommGetAsyncError) and must be destroyed.
 *  - Results are bit-identical on every rank, whatever the algorithm.
 *  - Thread safety: different communicators may be used from different threads
 *    at once; one communicator is used by one thread (or one stream) at a time.
 */
#ifndef GCCL_H
#define GCCL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; only what this header declares is exported. */
#if defined(GCCL_BUILDING) && defined(__GNUC__)
#define GCCL_API __attribute__((visibility("default")))
#else
#define GCCL_API
#endif

#define GCCL_MAJOR 0
#define GCCL_MINOR 1
#define GCCL_PATCH 0
/* GCCL_VERSION_CODE = major*10000 + minor*100 + patch, as NCCL's NCCL_VERSION_CODE. */
#define GCCL_VERSION_CODE (GCCL_MAJOR * 10000 + GCCL_MINOR * 100 + GCCL_PATCH)

/* ===================================================================== */
/* Results and types                                                     */
/* ===================================================================== */

/* Same order and values as NCCL's ncclResult_t (plus gcclTimeout, gcclCorruptData). */
typedef enum {
  gcclSuccess = 0,
  gcclSystemError = 1,     /* an OS call failed (out of memory, thread creation) */
  gcclInternalError = 2,   /* a bug in gccl: please report it */
  gcclInvalidArgument = 3, /* a bad argument: NULL pointer, bad enum value, ... */
  gcclInvalidUsage = 4,    /* a bad call sequence, or ranks that disagree */
  gcclRemoteError = 5,     /* another rank failed or aborted */
  gcclInProgress = 6,      /* not finished yet (non-blocking use) */
  gcclTimeout = 7,         /* a peer did not arrive within GCCL_TIMEOUT_MS */
  gcclCorruptData = 8,     /* a received frame failed validation */
  gcclNumResults = 9
} gcclResult_t;

typedef enum {
  gcclInt8 = 0,
  gcclUint8 = 1,
  gcclInt32 = 2,
  gcclUint32 = 3,
  gcclInt64 = 4,
  gcclUint64 = 5,
  gcclFloat16 = 6, /* IEEE binary16; reductions accumulate in fp32 */
  gcclFloat32 = 7,
  gcclFloat64 = 8,
  gcclBfloat16 = 9, /* bfloat16; reductions accumulate in fp32 */
  gcclNumTypes = 10
} gcclDataType_t;

/* gcclAvg sums, then divides once by the number of ranks (integer division for
 * integer types). Integer sums and products wrap around modulo 2^bits. */
typedef enum { gcclSum = 0, gcclProd = 1, gcclMax = 2, gcclMin = 3, gcclAvg = 4, gcclNumOps = 5 } gcclRedOp_t;

/* Handles. gccl keeps the set of its live communicators, streams and compressors:
 * a handle that was destroyed, aborted, never created, or is of another kind is
 * gcclInvalidArgument wherever it is passed, without gccl reading through it.
 * (A destroyed object's memory is reused only after 64 more destructions; a handle
 * used later than that may name a new object at the same address.) */
typedef struct gcclComm* gcclComm_t;
typedef struct gcclStream* gcclStream_t; /* NULL = run in the calling thread */
typedef struct gcclCompressor* gcclCompressor_t;

#define GCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[GCCL_UNIQUE_ID_BYTES];
} gcclUniqueId;

/* The name of a result code, e.g. "invalid argument". Never NULL. */
GCCL_API const char* gcclGetErrorString(gcclResult_t result);

/* A human-readable description of the last error on comm, or, with comm == NULL,
 * of the last error raised in the calling thread (use this after a call failed
 * for want of a valid communicator). Never NULL; "" when there was none. The text
 * stays valid until the next failing call on the same comm / thread. */
GCCL_API const char* gcclGetLastError(gcclComm_t comm);

/* Writes GCCL_VERSION_CODE to *version. gcclInvalidArgument if version is NULL. */
GCCL_API gcclResult_t gcclGetVersion(int* version);

/* ===================================================================== */
/* Communicators                                                         */
/* ===================================================================== */

/* Fills *id with a fresh identifier for a new communicator. Call it once (on one
 * rank) and hand the same id to every rank's gcclCommInitRank.
 * gcclInvalidArgument if id is NULL. */
GCCL_API gcclResult_t gcclGetUniqueId(gcclUniqueId* id);

/* Creates the communicator of rank `rank` (0 <= rank < nranks) among `nranks`
 * ranks that called with the same id; the ranks are threads of this process
 * (local transport). Blocks until all nranks ranks have joined, or returns
 * gcclTimeout after GCCL_TIMEOUT_MS. Reads the GCCL_* environment once, here.
 * Errors: gcclInvalidArgument (NULL comm, nranks < 1 or > 4096, rank out of range,
 * an id not made by gcclGetUniqueId), gcclInvalidUsage (a rank joined twice, or ranks gave
 * different nranks). On error *comm is set to NULL. */
GCCL_API gcclResult_t gcclCommInitRank(gcclComm_t* comm, int nranks, gcclUniqueId id, int rank);

/* Creates nranks communicators, one per rank, all in this process, in one call:
 * comms[i] is rank i. Drive them from one thread with streams and groups, or from
 * one thread per rank. Errors: gcclInvalidArgument (NULL comms, nranks < 1 or > 4096);
 * on error no communicator is created. */
GCCL_API gcclResult_t gcclCommInitAll(gcclComm_t* comms, int nranks);

/* Frees comm after its pending stream work has finished. Not collective: each
 * rank destroys its own. comm must not be used afterwards. gcclInvalidArgument if
 * comm is NULL or not live (destroyed or aborted already). */
GCCL_API gcclResult_t gcclCommDestroy(gcclComm_t comm);

/* Like gcclCommDestroy, but first stops all ranks of the communicator: any rank
 * blocked in a collective on it (in another thread, too) returns gcclRemoteError.
 * Safe to call while another thread is inside a collective on comm. */
GCCL_API gcclResult_t gcclCommAbort(gcclComm_t comm);

/* *count = number of ranks. gcclInvalidArgument for NULL arguments. */
GCCL_API gcclResult_t gcclCommCount(gcclComm_t comm, int* count);

/* *rank = this communicator's rank. gcclInvalidArgument for NULL arguments. */
GCCL_API gcclResult_t gcclCommUserRank(gcclComm_t comm, int* rank);

/* *asyncError = the error that put comm in an error state (a timeout, a peer's
 * abort, a failure inside stream work), or gcclSuccess. */
GCCL_API gcclResult_t gcclCommGetAsyncError(gcclComm_t comm, gcclResult_t* asyncError);

/* ===================================================================== */
/* Dense collectives                                                     */
/* ===================================================================== */
/* All take device-independent host pointers. sendbuff == recvbuff runs in place;
 * any other overlap of the two buffers is gcclInvalidArgument. A NULL buffer is
 * allowed only when the count is 0. With a stream, the call checks its arguments,
 * queues the work and returns; errors of the work itself are reported by
 * gcclStreamSynchronize and gcclCommGetAsyncError.
 *
 * Common errors: gcclInvalidArgument (NULL or not live comm or stream, NULL buffer
 * with count > 0, bad datatype, op or root, partial overlap, a buffer not aligned
 * to its elements, a byte size that overflows size_t), gcclInvalidUsage (ranks
 * disagree; comm in an error state, refused at once), gcclTimeout,
 * gcclRemoteError (a peer failed or aborted). On error, sendbuff is unchanged. */

/* recvbuff[i] = op over ranks r of sendbuff_r[i], for i < count, on every rank.
 * The algorithm (ring, rhd, tree, direct) comes from the tuner or GCCL_ALGO. */
GCCL_API gcclResult_t gcclAllReduce(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t datatype,
                                    gcclRedOp_t op, gcclComm_t comm, gcclStream_t stream);

/* recvbuff[r*sendcount + i] = sendbuff_r[i]. recvbuff holds nranks*sendcount
 * elements. In place when sendbuff == recvbuff + rank*sendcount*size. */
GCCL_API gcclResult_t gcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, gcclDataType_t datatype,
                                    gcclComm_t comm, gcclStream_t stream);

/* recvbuff[i] = op over ranks r of sendbuff_r[rank*recvcount + i]. sendbuff
 * holds nranks*recvcount elements. In place when recvbuff == sendbuff +
 * rank*recvcount*size. */
GCCL_API gcclResult_t gcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, gcclDataType_t datatype,
                                        gcclRedOp_t op, gcclComm_t comm, gcclStream_t stream);

/* Copies root's sendbuff to every rank's recvbuff. sendbuff is read on the root
 * only (may be NULL elsewhere). */
GCCL_API gcclResult_t gcclBroadcast(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t datatype,
                                    int root, gcclComm_t comm, gcclStream_t stream);

/* Root's recvbuff[i] = op over ranks of sendbuff_r[i]. recvbuff is written on the
 * root only (may be NULL elsewhere). */
GCCL_API gcclResult_t gcclReduce(const void* sendbuff, void* recvbuff, size_t count, gcclDataType_t datatype,
                                 gcclRedOp_t op, int root, gcclComm_t comm, gcclStream_t stream);

/* ===================================================================== */
/* Streams and groups                                                    */
/* ===================================================================== */

/* A stream is a FIFO of collectives executed in order by its own worker thread.
 * A collective given a stream returns at once. gcclInvalidArgument if s is NULL;
 * gcclSystemError if the thread cannot be started. */
GCCL_API gcclResult_t gcclStreamCreate(gcclStream_t* s);

/* Waits until all work queued on s has finished; returns the first error that
 * work raised since the last synchronize (and clears it). */
GCCL_API gcclResult_t gcclStreamSynchronize(gcclStream_t s);

/* Waits for the queued work, then frees s. */
GCCL_API gcclResult_t gcclStreamDestroy(gcclStream_t s);

/* Between gcclGroupStart and gcclGroupEnd, collectives called by this thread are
 * checked and recorded, not run. gcclGroupEnd launches them all together: those
 * with a stream are queued on it; those with a NULL stream run concurrently and
 * gcclGroupEnd waits for them and returns their first error. This lets one thread
 * drive every rank of gcclCommInitAll. Groups nest; only the outermost End
 * launches. gcclGroupEnd without a Start is gcclInvalidUsage; a recorded call whose
 * communicator or stream was destroyed before the End is gcclInvalidArgument, and
 * then nothing of the group runs. */
GCCL_API gcclResult_t gcclGroupStart(void);
GCCL_API gcclResult_t gcclGroupEnd(void);

/* ===================================================================== */
/* Compression                                                           */
/* ===================================================================== */
/* spec: "codec[:key=value[,key=value...]]", e.g. "topk:ratio=0.01",
 * "uniform:bits=4,bucket=512", "sign", "fp16", "none" (README, "Codecs", lists
 * every codec and key). A compressor serves one tensor of `count` elements of
 * `datatype` and holds its error-feedback residual (fp32). One thread (or one
 * stream) uses a compressor at a time.
 * Errors: gcclInvalidArgument (NULL pointers, unknown codec/key/value, a lossy
 * codec on an integer datatype, count too large, zstd asked of a build without).
 * Every function below that takes a compressor refuses a NULL or not live one
 * (gcclInvalidArgument). */
GCCL_API gcclResult_t gcclCompressorCreate(gcclCompressor_t* c, const char* spec, size_t count,
                                           gcclDataType_t datatype);
GCCL_API gcclResult_t gcclCompressorDestroy(gcclCompressor_t c);
/* Copies the residual out (in the compressor's datatype; zeros without error
 * feedback), or replaces it (checkpoint restore; gcclInvalidUsage with ef=0). */
GCCL_API gcclResult_t gcclCompressorGetResidual(gcclCompressor_t c, void* out);
GCCL_API gcclResult_t gcclCompressorSetResidual(gcclCompressor_t c, const void* in);
/* The state a compressor carries from call to call besides its residual, for
 * checkpoints: powersgd's Q (cols x rank fp32, which the next call starts its
 * power iteration from); no bytes for the other codecs. GetState writes
 * *stateBytes and, when out is not NULL, the state there (cap bytes of room:
 * gcclInvalidArgument when too few); out NULL asks for the size only. SetState
 * takes exactly stateBytes bytes (fp32 values, all finite) as written by
 * GetState from a compressor of the same spec and count. */
GCCL_API gcclResult_t gcclCompressorGetState(gcclCompressor_t c, void* out, size_t cap, size_t* stateBytes);
GCCL_API gcclResult_t gcclCompressorSetState(gcclCompressor_t c, const void* in, size_t stateBytes);

/* PowerSGD with the sums over ranks left to the caller, for frameworks that own
 * the communication (torch.distributed, say); gcclAllReduceCompressed runs the
 * same steps with gccl's allreduces between them. With c a powersgd compressor
 * of count elements, every one of nranks ranks runs, in this order:
 *
 *   gcclPowerSgdComputeP(c, sendbuff, P)     P: rows x rank fp32, row-major
 *     ... P summed over the ranks in place, the same bits on every rank ...
 *   gcclPowerSgdComputeQ(c, P, Q)            Q: cols x rank fp32
 *     ... Q summed over the ranks in place, the same bits on every rank ...
 *   gcclPowerSgdComputeOutput(c, Q, recvbuff, nranks, op)
 *
 * gcclPowerSgdShape gives rows, cols and rank. sendbuff and recvbuff hold count
 * elements of the compressor's datatype; recvbuff gets the compressed sum
 * (gcclSum) or average (gcclAvg) of the ranks' inputs, bit-identical on every
 * rank when P and Q were summed identically. ComputeOutput commits the residual
 * (error feedback) and Q (the next call's warm start); a call abandoned before it
 * changes neither, and ComputeP starts a new one. A NaN or inf in any rank's
 * input makes the summed P non-finite: Q is then all NaN, and the output NaN on
 * every rank with the state kept. Host buffers only. A step out of order is
 * gcclInvalidUsage. */
GCCL_API gcclResult_t gcclPowerSgdShape(gcclCompressor_t c, size_t* rows, size_t* cols, size_t* rank);
GCCL_API gcclResult_t gcclPowerSgdComputeP(gcclCompressor_t c, const void* sendbuff, float* P);
GCCL_API gcclResult_t gcclPowerSgdComputeQ(gcclCompressor_t c, const float* P, float* Q);
GCCL_API gcclResult_t gcclPowerSgdComputeOutput(gcclCompressor_t c, const float* Q, void* recvbuff, int nranks,
                                                gcclRedOp_t op);

/* Compressed collectives. Each rank passes its own compressor, made with the same
 * spec on every rank (ranks that differ get gcclInvalidUsage, like any other
 * mismatch) for the call's tensor: `count` elements (allreduce), `sendcount`
 * (allgather), nranks * recvcount (reduce-scatter, the send buffer). Only
 * gcclSum and gcclAvg reduce. Results are bit-identical on every rank; the error
 * against the exact result is the codec's (README, "Compressed collectives").
 * With error feedback the residual absorbs what compression lost, so over calls
 * sum(outputs) + sum over ranks(residuals) = sum(inputs). A call that fails
 * leaves the residual as it was. Codec "none" runs the dense algorithms and is
 * bit-identical to the dense call. Algorithms: GCCL_ALGO=sra, ring-requant,
 * sparse-ag, sparse-sr, randk or hier forces one the codec can use.
 * Errors as for the dense calls, plus gcclInvalidArgument for a NULL compressor,
 * one made for another datatype or count, an op other than sum/avg, or buffers
 * not aligned to their elements; gcclCorruptData when a received frame fails
 * validation (the communicator is then broken, as after a timeout). */

/* recvbuff[i] = sum over ranks of (compressed) sendbuff_r[i]. */
GCCL_API gcclResult_t gcclAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                              gcclDataType_t datatype, gcclRedOp_t op, gcclCompressor_t c,
                                              gcclComm_t comm, gcclStream_t stream);
/* recvbuff[r*sendcount + i] = decoded frame of rank r, on every rank (own slot
 * included, so every rank holds the same bits). */
GCCL_API gcclResult_t gcclAllGatherCompressed(const void* sendbuff, void* recvbuff, size_t sendcount,
                                              gcclDataType_t datatype, gcclCompressor_t c, gcclComm_t comm,
                                              gcclStream_t stream);
/* recvbuff[i] = sum over ranks of (compressed) sendbuff_r[rank*recvcount + i]. */
GCCL_API gcclResult_t gcclReduceScatterCompressed(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                  gcclDataType_t datatype, gcclRedOp_t op, gcclCompressor_t c,
                                                  gcclComm_t comm, gcclStream_t stream);

/* Codec only, for frameworks that move bytes themselves. *maxBytes = the largest
 * frame gcclEncode writes for this compressor. */
GCCL_API gcclResult_t gcclEncodeBound(gcclCompressor_t c, size_t* maxBytes);
/* *maxBytes = the largest frame gcclEncode writes for an input with at most
 * maxNonFinite values that are inf or NaN (after error feedback is added):
 * frames carry those in an exceptions list, so this is below gcclEncodeBound
 * (which covers any number, the tensor then sent raw) and, for quantizers,
 * with maxNonFinite = 0, the exact size of every frame of a finite input. For
 * frameworks that move frames in slots of a size fixed in advance. */
GCCL_API gcclResult_t gcclEncodeBoundNonFinite(gcclCompressor_t c, size_t maxNonFinite, size_t* maxBytes);
/* Encodes the compressor's tensor src into frame (cap >= gcclEncodeBound),
 * updating the residual; *frameBytes = the frame's size. */
GCCL_API gcclResult_t gcclEncode(gcclCompressor_t c, const void* src, void* frame, size_t cap, size_t* frameBytes);
/* Validates a frame completely, then dst[i] += decoded[i] (count elements of
 * datatype, which must match the frame's). gcclCorruptData, dst untouched, for
 * any inconsistency. */
GCCL_API gcclResult_t gcclDecodeAccumulate(const void* frame, size_t frameBytes, void* dst, size_t count,
                                           gcclDataType_t datatype);

#ifdef __cplusplus
}
#endif
#endif /* GCCL_H */
