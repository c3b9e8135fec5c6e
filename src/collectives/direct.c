/* direct.c — algorithms for ranks that share one address space (thread ranks).
 *
 * coll_agree has published every rank's buffers, and is itself a barrier, so all
 * inputs are ready on entry. Each rank reduces its own slice straight out of every
 * peer's buffer (one read of each input, no copies in flight) and writes the
 * result where it is needed. The closing barrier keeps every buffer alive until
 * no peer touches it. Each element is reduced by exactly one rank, in rank
 * order, and copied: bit-identical on every rank. */
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "common/copy.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"

#define AT(p, elems, size) ((char*)(p) + (size_t)(elems) * (size))

/* Bytes reduced before they are pushed to the peers: small enough to stay in L2,
 * so the pushes read cache, not memory. */
#define DIRECT_PUSH_BYTES ((size_t)64 << 10)
/* Streaming stores only pay when the outputs do not fit in cache: below this many
 * bytes written in all (half the 32 MiB L3 here) they would evict lines the next
 * call reads; measured 2x slower at 1 MiB in place. */
#define DIRECT_STREAM_MIN_BYTES ((size_t)16 << 20)

/* Copies with streaming stores when the call's outputs, all ranks together, exceed
 * DIRECT_STREAM_MIN_BYTES; the caller fences (copy_stream_fence) before its barrier. */
static void direct_copy(void* dst, const void* src, size_t bytes, size_t total_out_bytes) {
  if (total_out_bytes >= DIRECT_STREAM_MIN_BYTES)
    copy_stream(dst, src, bytes);
  else
    memcpy(dst, src, bytes);
}

/* Reduces elements [off, off+len) of every rank's buffer at byte offset base_off. */
static void reduce_slice(struct coll_ctx* ctx, const struct coll_args* a, void* dst, size_t base_elems, size_t len) {
  size_t size = dtype_size(a->dt);
  const void* srcs[ctx->nranks];
  for (int r = 0; r < ctx->nranks; r++) srcs[r] = AT(ctx->peer_send[r], base_elems, size);
  reduce_n(dst, srcs, ctx->nranks, len, a->dt, a->op);
}

gcclResult_t allreduce_direct(struct coll_ctx* ctx, const struct coll_args* a) {
  /* step 1: reduce my slice of every rank's input into my output, a cache-sized
   * piece at a time, and push each piece from cache into every peer's output.
   * Only this rank ever reads or writes this slice of any buffer, so in place is
   * safe. Pushing from cache saves the second pass over memory that pulling
   * from the owners would need; streaming stores save reading the peers'
   * destination lines first. */
  size_t size = dtype_size(a->dt), off, len;
  coll_chunk(a->count, ctx->nranks, ctx->rank, &off, &len);
  size_t piece = DIRECT_PUSH_BYTES / size;
  for (size_t i = off; i < off + len; i += piece) {
    size_t n = off + len - i < piece ? off + len - i : piece;
    void* mine = AT(a->recvbuff, i, size);
    reduce_slice(ctx, a, mine, i, n);
    for (int r = 0; r < ctx->nranks; r++) {
      if (r == ctx->rank) continue;
      direct_copy(AT(ctx->peer_recv[r], i, size), mine, n * size, a->count * size * (size_t)ctx->nranks);
    }
  }
  /* step 2: wait until every slice has arrived everywhere (streaming stores are
   * weakly ordered: fence them before the barrier publishes them) */
  copy_stream_fence();
  return prim_barrier(ctx->tp);
}

gcclResult_t reducescatter_direct(struct coll_ctx* ctx, const struct coll_args* a) {
  /* Only this rank reads slot `rank` of any input, so in place is safe. */
  if (a->count) reduce_slice(ctx, a, a->recvbuff, (size_t)ctx->rank * a->count, a->count);
  return prim_barrier(ctx->tp);
}

gcclResult_t allgather_direct(struct coll_ctx* ctx, const struct coll_args* a) {
  size_t bytes = a->count * dtype_size(a->dt), p = (size_t)ctx->nranks;
  for (int r = 0; r < ctx->nranks; r++) {
    void* slot = (char*)a->recvbuff + (size_t)r * bytes;
    if (bytes && slot != ctx->peer_send[r]) direct_copy(slot, ctx->peer_send[r], bytes, bytes * p * p);
  }
  copy_stream_fence();
  return prim_barrier(ctx->tp);
}

gcclResult_t broadcast_direct(struct coll_ctx* ctx, const struct coll_args* a) {
  size_t bytes = a->count * dtype_size(a->dt);
  const void* src = ctx->peer_send[a->root];
  if (bytes && a->recvbuff != src) direct_copy(a->recvbuff, src, bytes, bytes * (size_t)ctx->nranks);
  copy_stream_fence();
  return prim_barrier(ctx->tp);
}

gcclResult_t reduce_direct(struct coll_ctx* ctx, const struct coll_args* a) {
  /* Every rank reduces its slice into the root's output; in place on the root is
   * safe because only this rank reads or writes that slice. */
  size_t size = dtype_size(a->dt), off, len;
  coll_chunk(a->count, ctx->nranks, ctx->rank, &off, &len);
  if (len) reduce_slice(ctx, a, AT(ctx->peer_recv[a->root], off, size), off, len);
  return prim_barrier(ctx->tp);
}
