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
 * A message is the data alone; its tag (the transport's tagged messages) is the
 * block: 22 bits of the hash of the calls of the ranks whose messages reached the
 * sender, and whether two of them differ. Merging two blocks keeps the mismatch,
 * and two hashes that differ make one, so every rank ends with the same verdict;
 * agree.c then gathers the descriptors to say what differs. A message of another
 * size than expected is a mismatch too, so calls that differ in size are always
 * told apart; two calls of one size that differ otherwise (in op, root,
 * algorithm) collide once in 4 million. (With a 16-byte block in the message,
 * 256 bytes of data went past Open MPI's 256-byte fast path on shared memory:
 * 2.1x MPI_Allreduce's time.)
 *
 * Every message is received with room for the largest data, so calls of
 * different sizes, or a small allreduce on one rank and another call on the
 * next, meet as a mismatch on every rank and never as a truncated message. Data
 * is reduced only while no mismatch has been seen, the lower rank's operand
 * first, so that both partners of a step compute the same bits. Up to 2 KiB
 * every step moves all the data (recursive doubling), above it halves (halving,
 * then doubling; see halving()).
 *
 * Non-powers of two: with q the largest power of two below p and r = p - q, the
 * even ranks below 2r first hand their message to the next rank and at the end
 * receive its result (run()), as in Open MPI's recursive doubling.
 *
 * With the agreement alone, a split allreduce's first round goes out beside the
 * exchange (in_band.h's struct in_band_early): each plain message after the
 * tagged one to the same peer, whose tagged receive would otherwise take it. */
#include "collectives/in_band.h"

#include <string.h>

#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/result.h"

struct ib_block {
  uint32_t hash;     /* 22 bits of the hash of the calls of the ranks it stands for, when they agree */
  uint32_t mismatch; /* two of those ranks' calls differ */
};

_Static_assert(TP_TAG_BITS >= 23, "a tag holds the block: 22 bits of hash and the mismatch bit");

static uint32_t tag_of(struct ib_block b) {
  return b.hash << 1 | (b.mismatch ? 1u : 0u);
}

static struct ib_block block_of(uint32_t tag) {
  struct ib_block b = {tag >> 1, tag & 1u};
  return b;
}

_Static_assert(IN_BAND_SCRATCH_BYTES <= COLL_SCRATCH_BYTES, "the exchange's buffers come from the scratch");

/* Open MPI over shared memory sends a message of up to this many bytes in one
 * copy, larger ones after a handshake (its 4 KiB eager limit, less its own
 * header): at np 2 a 4 KiB message took 2.6 us, its 4 KiB allreduce 1.2 us. */
#define IB_EAGER_BYTES ((size_t)4000)
/* Above this many bytes, with 4 ranks or more, halving beats doubling (below). */
#define IB_DOUBLING_MAX_BYTES ((size_t)2048)

struct ib_exchange {
  struct coll_ctx* ctx;
  const struct coll_args* sum;       /* NULL: the agreement alone */
  const struct in_band_early* early; /* NULL, or posts after each tagged send (sum NULL) */
  size_t count, size;                /* sum's elements and their size; 0 without */
  struct ib_block block;             /* this rank's view so far */
  unsigned char* out;                /* [IN_BAND_MAX_BYTES]: the partial sum of all the data */
  unsigned char* in;                 /* [IN_BAND_MAX_BYTES]: a peer's message */
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

enum ib_use { IB_REDUCE, IB_COPY };

/* Merges a peer's message (`got` bytes in x->in, block `theirs`) into this
 * rank's: its block, and, while every call agreed, its data into slice s,
 * reduced or copied. */
static gcclResult_t absorb(struct ib_exchange* x, int peer, struct ib_slice s, struct ib_block theirs, size_t got,
                           enum ib_use use) {
  /* Calls of different sizes whose hashes collide still differ in their messages. */
  if (got != s.n * x->size) theirs.mismatch = 1;
  int clean = agreed_so_far(x) && !theirs.mismatch && theirs.hash == x->block.hash;
  merge(&x->block, &theirs);
  if (!clean || s.n == 0) return gcclSuccess;
  void* mine = x->out + s.first * x->size;
  if (use == IB_COPY)
    memcpy(mine, x->in, got);
  else if (x->ctx->rank < peer) /* the lower rank's operand first: sums commute bit for bit, NaN payloads not */
    reduce_2(mine, mine, x->in, s.n, x->sum->dt, x->sum->op);
  else
    reduce_2(mine, x->in, mine, s.n, x->sum->dt, x->sum->op);
  return gcclSuccess;
}

/* One step with peer: sends slice `give` of this rank's data (with the block as
 * its tag), receives the peer's block and its slice `take`, and uses it. Either
 * may be NULL for one direction. */
static gcclResult_t step(struct ib_exchange* x, int peer, const struct ib_slice* give, const struct ib_slice* take,
                         enum ib_use use) {
  struct tp_tagged_step s = {.to = -1, .from = -1};
  if (give) {
    s.to = peer;
    s.sbuf = x->out + give->first * x->size;
    s.sbytes = give->n * x->size;
    s.stag = tag_of(x->block);
  }
  if (take) {
    s.from = peer;
    s.rbuf = x->in;
    s.cap = IN_BAND_MAX_BYTES;
  }
  if (x->early) {
    s.after_send = x->early->send;
    s.after_send_arg = x->early->arg;
  }
  GCCL_CHECK(prim_step_tagged(x->ctx->tp, &s));
  return take ? absorb(x, peer, *take, block_of(s.rtag), s.got, use) : gcclSuccess;
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
 * quarters...: twice the latencies for (q-1)/q * 2 / log q of the volume. Across
 * the nodes of a network, the crossover comes from the link measured at creation,
 * and keeps every message within the eager limit of Open MPI's TCP, with 2 ranks
 * too (tuner_net_from_link). Otherwise (shared memory): with 2 ranks halving only
 * adds latencies, unless its halves fit a copy the whole would not
 * (IB_EAGER_BYTES); from 4 ranks on it pays above IB_DOUBLING_MAX_BYTES. */
static int halving(const struct coll_ctx* ctx, size_t bytes, int q) {
  if (q < 2) return 0;
  if (ctx->net.halving_min_bytes) return bytes > ctx->net.halving_min_bytes;
  if (bytes > IB_EAGER_BYTES && bytes / 2 <= IB_EAGER_BYTES) return 1;
  return q >= 4 && bytes > IB_DOUBLING_MAX_BYTES;
}

/* The fold's layout, Open MPI's (run()): of the p - q extra ranks, each even
 * rank below 2 (p - q) folds into the next; the others are the exchange's q
 * ranks, the core. A rank's index in the core, -1 for a rank that folds: */
static int core_index(int p, int rank) {
  int extra = p - coll_pow2_floor(p);
  if (rank >= 2 * extra) return rank - extra;
  return rank % 2 ? rank / 2 : -1;
}

/* ... and the rank at core index v. */
static int core_rank(int p, int v) {
  int extra = p - coll_pow2_floor(p);
  return v < extra ? 2 * v + 1 : v + extra;
}

/* The core's q ranks (q a power of two), by index v = 0..q-1. Recursive doubling:
 * every step reduces all the data, with partners v^1, v^2, ..., v^(q/2). Halving-
 * doubling meets them in the same order, so that a rank that halves and a peer
 * whose call differs and doubles never wait on each other in a cycle: each step
 * keeps the half of the range a rank holds that bit d of v picks and reduces the
 * partner's copy of it (after them rank v holds one block, summed over all), then
 * steps d = q/2 .. 1 copy the finished blocks back, each the other half of the
 * range split at that bit. The blocks travel with every message, so the verdict is
 * whole after the first half, and a mismatch skips the second. */
static gcclResult_t run_core(struct ib_exchange* x, int q) {
  int p = x->ctx->nranks, v = core_index(p, x->ctx->rank);
  struct ib_slice all = {0, x->count};
  if (!halving(x->ctx, x->count * x->size, q)) {
    for (int d = 1; d < q; d *= 2) GCCL_CHECK(step(x, core_rank(p, v ^ d), &all, &all, IB_REDUCE));
    return gcclSuccess;
  }
  int lo = 0, hi = q;
  for (int d = 1; d < q; d *= 2) {
    int mid = lo + (hi - lo) / 2, upper = (v & d) != 0;
    struct ib_slice keep = upper ? blocks(x, q, mid, hi) : blocks(x, q, lo, mid);
    struct ib_slice give = upper ? blocks(x, q, lo, mid) : blocks(x, q, mid, hi);
    GCCL_CHECK(step(x, core_rank(p, v ^ d), &give, &keep, IB_REDUCE));
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
    GCCL_CHECK(step(x, core_rank(p, v ^ d), &mine, &theirs, IB_COPY));
    if (upper)
      lo = peer_lo;
    else
      hi = peer_lo + width;
  }
  return gcclSuccess;
}

/* The partner's final block and, if every call agreed, its data in place of this rank's. */
static gcclResult_t take_result(struct ib_exchange* x, int peer) {
  size_t bytes = x->count * x->size;
  struct tp_tagged_step s = {.to = -1, .from = peer, .rbuf = x->in, .cap = IN_BAND_MAX_BYTES};
  GCCL_CHECK(prim_step_tagged(x->ctx->tp, &s));
  x->block = block_of(s.rtag);
  if (!agreed_so_far(x)) return gcclSuccess;
  if (s.got != bytes)
    return err_set(gcclInternalError, "in-band allreduce: a result of %zu bytes, %zu expected", s.got, bytes);
  memcpy(x->out, x->in, bytes);
  return gcclSuccess;
}

/* Each even rank r below 2 (p - q) (q the largest power of two up to p) hands
 * its data to rank r + 1 first and takes the result from it last; the other
 * ranks run the exchange among q. This is Open MPI's recursive doubling's
 * layout, so that where a program mixes gccl's calls with MPI's own (the
 * interposer routes by size), the same ranks carry the fold in both, and rank 0,
 * where a launcher tends to sit, only waits. On the 1 Gbit/s test bed at 5
 * ranks (5 processes on 2 cores), 4 B to 4 KiB, alternated with the layout it
 * replaced (rank q + i into rank 2q - p + i), 18 runs of each: 1.01-1.10x Open
 * MPI's allreduce, median 1.04, against 0.86-1.27x, median 1.06. At 3 ranks
 * (20 runs) 1.01-1.07x against 0.86-1.07x; at 6, alike (docs/notes/
 * 2026-12-07-c-the-fold-as-open-mpi-lays-it.md). Rank 0 as the host took
 * 0.70-1.64x at 3 ranks (BENCHMARKS.md). */
static gcclResult_t run(struct ib_exchange* x) {
  int p = x->ctx->nranks, r = x->ctx->rank, q = coll_pow2_floor(p);
  struct ib_slice all = {0, x->count};
  if (core_index(p, r) < 0) {
    GCCL_CHECK(step(x, r + 1, &all, NULL, IB_REDUCE));
    return take_result(x, r + 1);
  }
  int extra = r < 2 * (p - q) ? r - 1 : -1; /* the rank folding into this one, if any */
  if (extra >= 0) GCCL_CHECK(step(x, extra, NULL, &all, IB_REDUCE));
  GCCL_CHECK(run_core(x, q));
  if (extra >= 0) GCCL_CHECK(step(x, extra, &all, NULL, IB_REDUCE));
  return gcclSuccess;
}

double in_band_busiest_bytes(const struct coll_ctx* ctx, size_t bytes) {
  int p = ctx->nranks, q = coll_pow2_floor(p), steps = 0;
  for (int d = 1; d < q; d *= 2) steps++;
  double core = halving(ctx, bytes, q) ? 2.0 * (q - 1) / q * (double)bytes : (double)steps * (double)bytes;
  return core + (p > q ? (double)bytes : 0.0); /* the fold's result, sent back */
}

/* Whether ranks r and c exchange tagged messages in an agreement alone (run()). */
static int partners(int p, int r, int c) {
  int vr = core_index(p, r), vc = core_index(p, c);
  if (vr < 0 || vc < 0) return vr < 0 ? c == r + 1 : r == c + 1;
  unsigned d = (unsigned)(vr ^ vc);
  return d && !(d & (d - 1));
}

gcclResult_t in_band_exchange(struct coll_ctx* ctx, uint64_t hash, const struct coll_args* sum,
                              const struct in_band_early* early, int* agreed) {
  struct ib_exchange x = {.ctx = ctx, .sum = sum, .early = early, .block = {(uint32_t)(hash >> 42), 0}};
  if (early && sum) return err_set(gcclInternalError, "in-band exchange: early messages beside data");
  if (sum) {
    x.count = sum->count;
    x.size = dtype_size(sum->dt);
  }
  size_t bytes = x.count * x.size;
  if (bytes > IN_BAND_MAX_BYTES || ctx->scratch_bytes < IN_BAND_SCRATCH_BYTES)
    return err_set(gcclInternalError, "in-band allreduce of %zu bytes with %zu of scratch", bytes, ctx->scratch_bytes);
  x.out = ctx->scratch;
  x.in = x.out + prim_align64(IN_BAND_MAX_BYTES);
  if (bytes) memcpy(x.out, sum->sendbuff, bytes);
  for (int c = 0; early && c < ctx->nranks; c++)
    if (c != ctx->rank && !partners(ctx->nranks, ctx->rank, c)) GCCL_CHECK(early->send(early->arg, c));
  GCCL_CHECK(run(&x));
  *agreed = agreed_so_far(&x);
  if (*agreed && bytes) {
    memcpy(sum->recvbuff, x.out, bytes);
    if (sum->op == gcclAvg) reduce_divide(sum->recvbuff, sum->count, sum->dt, ctx->nranks);
  }
  return gcclSuccess;
}
