/* in_band.c — step 0 of a call on MPI, on point-to-point messages, with a small
 * dense allreduce's data riding along (in_band.h).
 *
 * Over MPI the agreement as an MPI collective and the closing barrier each cost a
 * round of their own: a dense allreduce of 8 bytes took 13x as long as
 * MPI_Allreduce at np 2, 9x at np 4 (BENCHMARKS.md). Here each rank's call is
 * reduced to a hash of its descriptor (agree.c), and the hashes meet in a
 * recursive-doubling exchange, the pattern of MPI's own small allreduce, whose
 * messages can carry a small allreduce's data: the agreement, the sum and the
 * verdict in one exchange, no round added.
 *
 * A message is a block, then the data. The block stands for the ranks whose
 * messages reached the sender: a hash of their calls and whether two of them
 * differ. Merging two blocks keeps the mismatch, and two hashes that differ make
 * one, so every rank ends with the same verdict; agree.c then gathers the
 * descriptors to say what differs. (A block in a message of its own, where it
 * pushed the data past a power of two, was no faster: Open MPI's 256-byte fast
 * path on shared memory is lost either way.)
 *
 * Every message is received with room for the largest data, so calls of
 * different sizes, or a small allreduce on one rank and another call on the
 * next, meet as a mismatch on every rank and never as a truncated message. Data
 * is reduced only while no mismatch has been seen, the lower rank's operand
 * first, so that both partners of a step compute the same bits. Up to 2 KiB
 * every step moves all the data (recursive doubling), above it halves (halving,
 * then doubling; see halving()).
 *
 * Non-powers of two: with q the largest power of two below p, rank q + i first
 * hands its message to rank i and at the end receives rank i's result. */
#include "collectives/in_band.h"

#include <string.h>

#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"

struct ib_block {
  uint64_t hash;     /* of the calls of the ranks it stands for, when they agree */
  uint64_t mismatch; /* two of those ranks' calls differ */
};

/* A message's data follows its block at this offset, aligned for any datatype. */
#define IB_HEADER ((size_t)16)
#define IB_MESSAGE_MAX (IB_HEADER + IN_BAND_MAX_BYTES)
_Static_assert(sizeof(struct ib_block) <= IB_HEADER, "the block must fit the header");
_Static_assert(IN_BAND_SCRATCH_BYTES <= COLL_SCRATCH_BYTES, "the exchange's buffers come from the scratch");

/* Open MPI over shared memory sends a message of up to this many bytes in one
 * copy, larger ones after a handshake (its 4 KiB eager limit, less its own
 * header): at np 2 a 4 KiB message took 2.6 us, its 4 KiB allreduce 1.2 us. */
#define IB_EAGER_BYTES ((size_t)4000)
/* Above this many bytes, with 4 ranks or more, halving beats doubling (below). */
#define IB_DOUBLING_MAX_BYTES ((size_t)2048)

struct ib_exchange {
  struct coll_ctx* ctx;
  const struct coll_args* sum; /* NULL: the agreement alone */
  size_t count, size;          /* sum's elements and their size; 0 without */
  struct ib_block block;       /* this rank's view so far */
  unsigned char* out;          /* [IB_MESSAGE_MAX]: a header, then the partial sum of all the data */
  unsigned char* in;           /* [IB_MESSAGE_MAX]: a peer's message */
  unsigned char* stage;        /* [IB_MESSAGE_MAX]: a message of a slice further in */
};

/* Elements [first, first + n) of the data: a slice of the vector a step moves. */
struct ib_slice {
  size_t first, n;
};

static void merge(struct ib_block* mine, const struct ib_block* theirs) {
  mine->mismatch |= theirs->mismatch | (theirs->hash != mine->hash);
}

static int agreed_so_far(const struct ib_exchange* x) {
  return !x->block.mismatch;
}

/* Posts this rank's block and slice s of its data to peer, as one message: from
 * x->out where the slice starts the data, else copied to x->stage. */
static gcclResult_t post_message(struct ib_exchange* x, int peer, struct ib_slice s, tp_req* req) {
  size_t bytes = s.n * x->size;
  unsigned char* msg = s.first == 0 ? x->out : x->stage;
  memcpy(msg, &x->block, sizeof x->block);
  if (msg == x->stage) memcpy(msg + IB_HEADER, x->out + IB_HEADER + s.first * x->size, bytes);
  return prim_post_send(x->ctx->tp, peer, msg, IB_HEADER + bytes, req);
}

enum ib_use { IB_REDUCE, IB_COPY };

/* Merges the message of `got` bytes in x->in into this rank's: its block, and,
 * while every call agreed, its data into slice s, reduced or copied. */
static gcclResult_t absorb(struct ib_exchange* x, int peer, struct ib_slice s, size_t got, enum ib_use use) {
  if (got < IB_HEADER) return err_set(gcclInternalError, "in-band agreement: a message of %zu bytes", got);
  size_t bytes = got - IB_HEADER;
  struct ib_block theirs;
  memcpy(&theirs, x->in, sizeof theirs);
  int clean = agreed_so_far(x) && !theirs.mismatch && theirs.hash == x->block.hash;
  merge(&x->block, &theirs);
  if (!clean || s.n == 0) return gcclSuccess;
  if (bytes != s.n * x->size) /* equal hashes, equal calls: never, short of a hash collision */
    return err_set(gcclInternalError, "in-band allreduce: %zu bytes of data from a peer, %zu expected", bytes,
                   s.n * x->size);
  void* mine = x->out + IB_HEADER + s.first * x->size;
  const void* theirs_data = x->in + IB_HEADER;
  if (use == IB_COPY)
    memcpy(mine, theirs_data, bytes);
  else if (x->ctx->rank < peer) /* the lower rank's operand first: sums commute bit for bit, NaN payloads not */
    reduce_2(mine, mine, theirs_data, s.n, x->sum->dt, x->sum->op);
  else
    reduce_2(mine, theirs_data, mine, s.n, x->sum->dt, x->sum->op);
  return gcclSuccess;
}

/* One step with peer: sends slice `give` (with the block), receives the peer's
 * block and its slice `take`, and uses it. Either may be NULL for one direction. */
static gcclResult_t step(struct ib_exchange* x, int peer, const struct ib_slice* give, const struct ib_slice* take,
                         enum ib_use use) {
  struct transport* tp = x->ctx->tp;
  tp_req reqs[2] = {-1, -1};
  size_t got = 0;
  if (take) GCCL_CHECK(prim_post_recv_upto(tp, peer, x->in, IB_MESSAGE_MAX, &got, &reqs[0]));
  if (give) GCCL_CHECK(post_message(x, peer, *give, &reqs[1]));
  GCCL_CHECK(prim_wait_all(tp, reqs, 2));
  return take ? absorb(x, peer, *take, got, use) : gcclSuccess;
}

/* Elements of blocks [lo, hi) of q (coll_chunk's split of the data). */
static struct ib_slice blocks(const struct ib_exchange* x, int q, int lo, int hi) {
  size_t a, b, len;
  coll_chunk(x->count, q, lo, &a, &len);
  coll_chunk(x->count, q, hi - 1, &b, &len);
  struct ib_slice s = {a, b + len - a};
  return s;
}

/* Doubling sends log q messages of all the data, halving 2 log q of halves,
 * quarters...: twice the latencies for (q-1)/q * 2 / log q of the volume. With 2
 * ranks halving only adds latencies, unless its halves fit a copy the whole would
 * not (IB_EAGER_BYTES); from 4 ranks on it pays above IB_DOUBLING_MAX_BYTES. */
static int halving(size_t bytes, int q) {
  if (q < 2) return 0;
  if (bytes + IB_HEADER > IB_EAGER_BYTES && bytes / 2 + IB_HEADER <= IB_EAGER_BYTES) return 1;
  return q >= 4 && bytes > IB_DOUBLING_MAX_BYTES;
}

/* Ranks 0..q-1, q a power of two. Recursive doubling: every step reduces all the
 * data, with partners v^1, v^2, ..., v^(q/2). Halving-doubling meets them in the
 * same order, so that a rank that halves and a peer whose call differs and
 * doubles never wait on each other in a cycle: each step keeps the half of the
 * range a rank holds that bit d of v picks and reduces the partner's copy of it
 * (after them rank v holds one block, summed over all), then steps d = q/2 .. 1
 * copy the finished blocks back, each the other half of the range split at that
 * bit. The blocks travel with every message, so the verdict is whole after the
 * first half, and a mismatch skips the second. */
static gcclResult_t run_core(struct ib_exchange* x, int q) {
  int v = x->ctx->rank;
  struct ib_slice all = {0, x->count};
  if (!halving(x->count * x->size, q)) {
    for (int d = 1; d < q; d *= 2) GCCL_CHECK(step(x, v ^ d, &all, &all, IB_REDUCE));
    return gcclSuccess;
  }
  int lo = 0, hi = q;
  for (int d = 1; d < q; d *= 2) {
    int mid = lo + (hi - lo) / 2, upper = (v & d) != 0;
    struct ib_slice keep = upper ? blocks(x, q, mid, hi) : blocks(x, q, lo, mid);
    struct ib_slice give = upper ? blocks(x, q, lo, mid) : blocks(x, q, mid, hi);
    GCCL_CHECK(step(x, v ^ d, &give, &keep, IB_REDUCE));
    if (upper)
      lo = mid;
    else
      hi = mid;
  }
  if (!agreed_so_far(x)) return gcclSuccess;
  for (int d = q / 2; d >= 1; d /= 2) {
    int width = hi - lo, upper = (v & d) != 0;
    int peer_lo = upper ? lo - width : hi; /* the other half of the range split at bit d */
    struct ib_slice mine = blocks(x, q, lo, hi), theirs = blocks(x, q, peer_lo, peer_lo + width);
    GCCL_CHECK(step(x, v ^ d, &mine, &theirs, IB_COPY));
    if (upper)
      lo = peer_lo;
    else
      hi = peer_lo + width;
  }
  return gcclSuccess;
}

/* The partner's final block and, if every call agreed, its data in place of this rank's. */
static gcclResult_t take_result(struct ib_exchange* x, int peer) {
  size_t got = 0, bytes = x->count * x->size;
  tp_req req;
  GCCL_CHECK(prim_post_recv_upto(x->ctx->tp, peer, x->in, IB_MESSAGE_MAX, &got, &req));
  GCCL_CHECK(prim_wait(x->ctx->tp, &req));
  if (got < IB_HEADER) return err_set(gcclInternalError, "in-band agreement: a message of %zu bytes", got);
  memcpy(&x->block, x->in, sizeof x->block);
  if (!agreed_so_far(x)) return gcclSuccess;
  if (got != IB_HEADER + bytes)
    return err_set(gcclInternalError, "in-band allreduce: a result of %zu bytes, %zu expected", got - IB_HEADER, bytes);
  memcpy(x->out + IB_HEADER, x->in + IB_HEADER, bytes);
  return gcclSuccess;
}

/* Ranks q + i (q the largest power of two up to p) hand their data to rank i
 * first and take the result from it last. */
static gcclResult_t run(struct ib_exchange* x) {
  int p = x->ctx->nranks, r = x->ctx->rank, q = 1;
  while (q * 2 <= p) q *= 2;
  struct ib_slice all = {0, x->count};
  if (r >= q) {
    GCCL_CHECK(step(x, r - q, &all, NULL, IB_REDUCE));
    return take_result(x, r - q);
  }
  if (r + q < p) GCCL_CHECK(step(x, r + q, NULL, &all, IB_REDUCE));
  GCCL_CHECK(run_core(x, q));
  if (r + q < p) GCCL_CHECK(step(x, r + q, &all, NULL, IB_REDUCE));
  return gcclSuccess;
}

gcclResult_t in_band_exchange(struct coll_ctx* ctx, uint64_t hash, const struct coll_args* sum, int* agreed) {
  struct ib_exchange x = {.ctx = ctx, .sum = sum, .block = {hash, 0}};
  if (sum) {
    x.count = sum->count;
    x.size = dtype_size(sum->dt);
  }
  size_t bytes = x.count * x.size;
  if (bytes > IN_BAND_MAX_BYTES || ctx->scratch_bytes < IN_BAND_SCRATCH_BYTES)
    return err_set(gcclInternalError, "in-band allreduce of %zu bytes with %zu of scratch", bytes, ctx->scratch_bytes);
  x.out = ctx->scratch;
  x.in = x.out + prim_align64(IB_MESSAGE_MAX);
  x.stage = x.in + prim_align64(IB_MESSAGE_MAX);
  if (bytes) memcpy(x.out + IB_HEADER, sum->sendbuff, bytes);
  GCCL_CHECK(run(&x));
  *agreed = agreed_so_far(&x);
  if (*agreed && bytes) {
    memcpy(sum->recvbuff, x.out + IB_HEADER, bytes);
    if (sum->op == gcclAvg) reduce_divide(sum->recvbuff, sum->count, sum->dt, ctx->nranks);
  }
  return gcclSuccess;
}
