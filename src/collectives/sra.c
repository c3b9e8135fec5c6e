/* sra.c — compressed scatter-reduce-allgather (SRA) allreduce, and the compressed
 * reduce-scatter and allgather made of its two halves.
 *
 * The data is cut into p chunks (coll_chunk) and rank c owns chunk c. Every frame
 * crosses one link once, and every element goes through at most two quantizations:
 * its contributor's encode and its owner's re-encode of the sum.
 *
 * Phase 1, scatter-reduce (p = 4, seen from rank 1; E = encode with EF_ADD):
 *
 *   post irecv_upto from r0, r2, r3 for their frames of chunk 1
 *   E(c0) -> r0,  E(c3) -> r3,  E(c2) -> r2     staggered: rank r starts at r-1, so
 *                                               the p-1 first frames go to p-1
 *                                               different receivers
 *   S = dec(f0) + (own c1 + residual, exact) + dec(f2) + dec(f3)   rank order 0..p-1
 *
 * Each chunk is encoded once, and sent as soon as it is encoded, so encoding the
 * next chunk overlaps sending the last. The owner reduces in rank order: the sum's
 * bits do not depend on which frame arrived first. Owner c's first frames come
 * from c+1, c+2, ...: ascending, so that most owners can decode-accumulate while
 * later frames are still on the wire (starting at r+1 made them arrive in
 * descending order, every decode waiting for the last frame).
 *
 * Phase 2, allgather of frames: the owner re-encodes S once (EF_RESTAGE: the
 * re-encode's error joins the owner's residual, so error feedback telescopes
 * through the collective), and that one frame goes round a ring unchanged: at
 * step s every rank forwards the frame it received at step s-1 to r+1 and receives
 * the next from r-1. Every rank, the owner included, decodes every chunk's frame
 * into its output, so all ranks hold the same bits; a frame is decoded while it is
 * being forwarded. Why a ring and not the owner sending to every peer at once:
 * over TCP (1 Gbit/s test bed, 4 ranks) the p-1 simultaneous flows into and out of
 * every host finished unevenly and the phase took up to 30% longer than the
 * ring's one flow per link (BENCHMARKS.md); phase 1 keeps its all-at-once exchange,
 * which measured faster than p-1 staggered pairwise steps (for even p one step
 * sends both ways over each pair's connection).
 *
 * Decoding while the transport waits on us: MPI moves a large message only once
 * its receiver has answered the sender's handshake, which it does inside MPI
 * calls, so a rank decoding a frame for 10 ms holds up every frame sent to it
 * meanwhile. Frames that decode by ranges are decoded a slice at a time with
 * the transport's progress between slices (prim_decode): each ring step's
 * transfer then starts when its sender posts it (1 Gbit/s test bed, fp16: a
 * ring step's median 112 instead of 120-125 ms, BENCHMARKS.md). For the same
 * reason the ring's first receive is posted before phase 1's sum (into the slot
 * of this rank's own part, which phase 1 leaves unused), so a neighbour that
 * finishes phase 1 first starts sending while this rank still sums. Phase 1's encodes
 * run without progress on purpose: then every rank answers its peers'
 * handshakes together once its encodes are done, and the p-1 flows into each
 * host start and end together; answered as they came, they started staggered
 * and the last ended up to 100 ms later.
 *
 * In place: rank r reads sendbuff only in phase 1 (encodes, and its own chunk in
 * the sum); phase 2 alone writes recvbuff. Sends and receives use workspace frames.
 *
 * Cost per rank, b = bytes of one compressed chunk (~ bytes(count) / p / ratio):
 * 2 (p-1) messages sent and received, 2 (p-1) b bytes each way, as a ring's; phase
 * 1's p-1 messages are in flight at once (latency alpha), phase 2 takes p-1 steps.
 * Compute per rank: encodes of count elements in all (p-1 peers' chunks, then its
 * own chunk's sum), decodes of (p-1) chunks in phase 1 and all p in phase 2.
 * Workspace: 2p frame slots, plus one or two fp32 chunks.
 *
 * reducescatter_sra is phase 1 over p slots of a->count elements (the sum S is the
 * result, not re-encoded); allgather_frames is phase 2, the ring, with every rank's
 * whole input as its frame. Chunks or slots of 0 elements are not sent: both sides know
 * the lengths. */

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "compress/decode.h"

/* The workspace of one call: per-peer request handles and received sizes, frame
 * slots of `slot` bytes, and fp32 areas. */
struct sra_work {
  tp_req* sreq;              /* [p] sends, -1 when none is pending */
  tp_req* rreq;              /* [p] receives; [me]: allreduce's early ring receive */
  size_t* got;               /* [p] bytes received */
  size_t* sent;              /* [p] bytes of the frame encoded for each peer */
  unsigned char* out;        /* p slots: frames this rank encodes */
  unsigned char* in;         /* p slots: frames received, by sender */
  size_t slot;               /* bytes per frame slot, a multiple of 64 */
  float* sum;                /* the owner's fp32 sum */
  float* stage;              /* fp32 decode area for outputs that are not fp32 */
  struct frame_header* head; /* [p] the received frames' checked headers */
};

/* Lays the workspace out: 2p frame slots of w->slot bytes, and two fp32 areas of
 * sum_n and stage_n elements. */
static void sra_carve(struct prim_carver* c, struct sra_work* w, size_t p, size_t sum_n, size_t stage_n) {
  w->sreq = PRIM_CARVE(c, tp_req, p);
  w->rreq = PRIM_CARVE(c, tp_req, p);
  w->got = PRIM_CARVE(c, size_t, p);
  w->sent = PRIM_CARVE(c, size_t, p);
  w->head = PRIM_CARVE(c, struct frame_header, p);
  w->out = prim_carve(c, p * w->slot);
  w->in = prim_carve(c, p * w->slot);
  w->sum = PRIM_CARVE(c, float, sum_n);
  w->stage = PRIM_CARVE(c, float, stage_n);
}

static gcclResult_t sra_work_get(struct coll_ctx* ctx, size_t frame_bytes, size_t sum_n, size_t stage_n,
                                 struct sra_work* w) {
  size_t p = (size_t)ctx->nranks;
  w->slot = prim_align64(frame_bytes);
  struct prim_carver carver = {0};
  sra_carve(&carver, w, p, sum_n, stage_n);
  GCCL_CHECK(prim_carve_workspace(ctx, &carver));
  sra_carve(&carver, w, p, sum_n, stage_n);
  prim_slots_clear(w->sreq, p);
  prim_slots_clear(w->rreq, p);
  return gcclSuccess;
}

static unsigned char* out_frame(const struct sra_work* w, int r) {
  return w->out + (size_t)r * w->slot;
}
static unsigned char* in_frame(const struct sra_work* w, int r) {
  return w->in + (size_t)r * w->slot;
}

/* Where a chunk or slot lies: allreduce cuts a->count into p chunks, reduce-scatter
 * and allgather have p slots of a->count. */
static void part_of(const struct coll_args* a, int p, int j, size_t* off, size_t* len) {
  if (a->kind != COLL_ALLREDUCE) {
    *off = (size_t)j * a->count;
    *len = a->count;
  } else {
    coll_chunk(a->count, p, j, off, len);
  }
}

/* Frames at least this many times smaller than the fp32 part they carry (sign:
 * 30x) arrive long before the owner is done encoding, so it sums its part only
 * once all are in, a block at a time (sum_by_blocks); larger frames (fp16,
 * uniform 4- and 8-bit) are decoded as they arrive, overlapping the transfer. */
#define BLOCKS_MIN_RATIO 16
#define SUM_BLOCK 4096 /* elements of the sum per block: 16 KiB, in L1 */

static int small_frames(const struct gcclCompressor* c, size_t n) {
  return c->ops->payload_bound != NULL && c->ops->payload_bound(&c->spec, n) <= n * sizeof(float) / BLOCKS_MIN_RATIO;
}

/* Waits for every peer's frame of this rank's part (my_len elements) and checks
 * it; *block = elements per block of the sum when every frame decodes by
 * ranges of whole buckets with a common block (a multiple of every granule),
 * else 0. */
static gcclResult_t frames_in(struct coll_ctx* ctx, struct sra_work* w, size_t my_len, size_t* block) {
  int p = ctx->nranks;
  size_t g = 1;
  int ranges = 1;
  for (int r = 0; r < p; r++) {
    if (r == ctx->rank) continue;
    GCCL_CHECK(prim_wait(ctx->tp, &w->rreq[r]));
    GCCL_CHECK(frame_check(in_frame(w, r), w->got[r], my_len, gcclFloat32, &w->head[r]));
    size_t gr = frame_range_granule(&w->head[r]);
    if (gr == 0 || (gr > g ? gr % g : g % gr) != 0) ranges = 0;
    if (gr > g) g = gr;
  }
  *block = !ranges ? 0 : g >= SUM_BLOCK ? g : SUM_BLOCK / g * g;
  return gcclSuccess;
}

/* Phase 1's sum once every peer's frame is in (frames_in), `block` elements at a
 * time: each block of the sum gets its terms in rank order (the rank's own part
 * exactly, every frame's range decoded), so it stays in L1 across the p terms
 * instead of going to memory and back once per term. Same additions in the same
 * order per element as term by term, so the same bits. */
static gcclResult_t sum_by_blocks(struct coll_ctx* ctx, const struct coll_args* a, struct sra_work* w, size_t my_off,
                                  size_t my_len, size_t block) {
  struct gcclCompressor* c = a->comp;
  int p = ctx->nranks, me = ctx->rank;
  size_t size = dtype_size(a->dt);
  const unsigned char* in = a->sendbuff;
  struct transport* tp = ctx->tp;
  size_t since_progress = 0;
  for (size_t b0 = 0; b0 < my_len; b0 += block) {
    size_t m = my_len - b0 < block ? my_len - b0 : block;
    for (int r = 0; r < p; r++) {
      if (r == me)
        GCCL_CHECK(compressor_accumulate_exact(c, in + (my_off + b0) * size, a->dt, a->comp_first + my_off + b0, m,
                                               w->sum + b0, r == 0));
      else
        GCCL_CHECK(frame_decode_range(&w->head[r], in_frame(w, r), b0, m, w->sum + b0, r == 0));
    }
    if ((since_progress += m * (size_t)p) >= PRIM_PROGRESS_SLICE) {
      prim_progress(tp);
      since_progress = 0;
    }
  }
  return gcclSuccess;
}

/* Phase 1: afterwards w->sum holds the fp32 sum over ranks of this rank's part
 * (the peers' decoded frames and its own input exactly, in rank order), and every
 * part of this rank's input has been encoded once (residual staged). Sends may
 * still be pending. */
static gcclResult_t scatter_reduce(struct coll_ctx* ctx, const struct coll_args* a, struct sra_work* w) {
  struct transport* tp = ctx->tp;
  struct gcclCompressor* c = a->comp;
  int p = ctx->nranks, me = ctx->rank;
  size_t size = dtype_size(a->dt), off, len, my_off, my_len;
  const unsigned char* in = a->sendbuff;
  part_of(a, p, me, &my_off, &my_len);

  /* every peer's frame of my part, posted before anything is sent */
  for (int r = 0; r < p; r++)
    if (r != me && my_len) GCCL_CHECK(prim_post_recv_upto(tp, r, in_frame(w, r), w->slot, &w->got[r], &w->rreq[r]));
  for (int k = 1; k < p; k++) {
    int j = (me - k + p) % p;
    part_of(a, p, j, &off, &len);
    if (!len) continue;
    struct prim_encode e = {c, in + off * size, a->dt, a->comp_first + off, len, EF_ADD, 0};
    GCCL_CHECK(prim_encode_send(tp, j, &e, out_frame(w, j), w->slot, &w->sent[j], &w->sreq[j]));
  }
  /* allreduce: the ring's first frame (chunk prev's, from prev) may come while
   * this rank sums; after prev's phase-1 frame on that lane, so matched after it.
   * It lands in slot me, which phase 1 leaves unused. */
  int prev = prim_ring_of(me, p).prev;
  part_of(a, p, prev, &off, &len);
  if (a->kind == COLL_ALLREDUCE && p > 1 && len)
    GCCL_CHECK(prim_post_recv_upto(tp, prev, in_frame(w, me), w->slot, &w->got[me], &w->rreq[me]));
  size_t block = 0;
  if (my_len && small_frames(c, my_len)) GCCL_CHECK(frames_in(ctx, w, my_len, &block));
  if (block) return sum_by_blocks(ctx, a, w, my_off, my_len, block);
  /* term by term: the first in rank order writes the sum (as if added to +0.0f),
   * the others add to it: no clearing pass, one read of the sum fewer (a wait
   * returns at once for a frame frames_in has waited for) */
  for (int r = 0; r < p; r++) {
    if (r == me) {
      GCCL_CHECK(
          compressor_accumulate_exact(c, in + my_off * size, a->dt, a->comp_first + my_off, my_len, w->sum, r == 0));
    } else if (my_len) {
      GCCL_CHECK(prim_recv_decode(tp, &w->rreq[r], in_frame(w, r), &w->got[r], my_len, w->sum, r != 0));
    }
  }
  return gcclSuccess;
}

gcclResult_t reducescatter_sra(struct coll_ctx* ctx, const struct coll_args* a) {
  struct sra_work w;
  GCCL_CHECK(sra_work_get(ctx, compressor_bound_f32(a->comp, a->count), a->count, 0, &w));
  GCCL_CHECK(scatter_reduce(ctx, a, &w));
  /* in place, recvbuff is this rank's slot of sendbuff: phase 1 has read it */
  f32_store(a->recvbuff, a->dt, w.sum, a->count);
  return prim_wait_all(ctx->tp, w.sreq, (size_t)ctx->nranks);
}

/* Phase 2, a ring of frames: the owner's frame travels me -> me+1 -> ... unchanged,
 * so at each step every rank sends one frame to next and receives one from prev.
 * A frame is decoded while the step that forwards it is in flight. The frame of
 * chunk c lands in slot c, except chunk prev's when phase 1 posted its receive
 * early (w->rreq[me]): that one lands in slot me. */
static gcclResult_t frames_ring(struct coll_ctx* ctx, const struct coll_args* a, struct sra_work* w, size_t my_bytes) {
  struct transport* tp = ctx->tp;
  int p = ctx->nranks, me = ctx->rank;
  struct prim_ring ring = prim_ring_of(me, p);
  int next = ring.next, prev = ring.prev;
  int early = w->rreq[me] >= 0;
  unsigned char* frame = out_frame(w, me); /* the frame that goes to next at this step */
  size_t bytes = my_bytes, off, len;
  int have = me; /* its chunk */
  for (int s = 0; s < p; s++) {
    int want = (me - s - 1 + p) % p;              /* arrives from prev at this step */
    int into = early && want == prev ? me : want; /* the slot of in and got it lands in */
    size_t hoff, hlen;
    part_of(a, p, have, &hoff, &hlen);
    tp_req recv = -1;
    if (s < p - 1) {
      part_of(a, p, want, &off, &len);
      if (s == 0 && early) {
        recv = w->rreq[me];
        w->rreq[me] = -1;
      } else if (len) {
        GCCL_CHECK(prim_post_recv_upto(tp, prev, in_frame(w, into), w->slot, &w->got[into], &recv));
      }
      /* the last step only decodes: the frame has gone round */
      if (hlen) GCCL_CHECK(prim_forward(tp, next, frame, bytes, &w->sreq[next]));
    }
    if (hlen && a->dt == gcclFloat32 && !a->device_recv)
      GCCL_CHECK(prim_decode(tp, frame, bytes, hlen, (float*)a->recvbuff + hoff, 0));
    else if (hlen)
      GCCL_CHECK(coll_output_frame(a, frame, bytes, hoff, hlen, w->stage));
    GCCL_CHECK(prim_wait(tp, &recv));
    GCCL_CHECK(prim_wait(tp, &w->sreq[next])); /* its frame is forwarded from this slot later */
    if (s < p - 1) {                           /* what arrived goes on at the next step */
      have = want;
      frame = in_frame(w, into);
      bytes = w->got[into];
    }
  }
  return gcclSuccess;
}

gcclResult_t allreduce_sra(struct coll_ctx* ctx, const struct coll_args* a) {
  struct gcclCompressor* c = a->comp;
  int p = ctx->nranks, me = ctx->rank;
  size_t my_off, my_len, longest, unused;
  coll_chunk(a->count, p, 0, &unused, &longest); /* chunk 0 is a longest */
  coll_chunk(a->count, p, me, &my_off, &my_len);
  struct sra_work w;
  GCCL_CHECK(sra_work_get(ctx, compressor_bound_f32(c, longest), longest, a->dt == gcclFloat32 ? 0 : longest, &w));

  GCCL_CHECK(scatter_reduce(ctx, a, &w));
  /* phase 1's frames to peers must be gone before phase 2's messages follow them */
  GCCL_CHECK(prim_wait_all(ctx->tp, w.sreq, (size_t)p));
  size_t bytes = 0;
  if (my_len)
    GCCL_CHECK(prim_encode(&(struct prim_encode){c, w.sum, gcclFloat32, a->comp_first + my_off, my_len, EF_RESTAGE, 1},
                           out_frame(&w, me), w.slot, &bytes));
  /* every read of sendbuff is done: from here on, recvbuff may be written */
  return frames_ring(ctx, a, &w, bytes);
}

gcclResult_t allgather_frames(struct coll_ctx* ctx, const struct coll_args* a) {
  size_t n = a->count, bytes;
  struct sra_work w;
  GCCL_CHECK(sra_work_get(ctx, compressor_bound_f32(a->comp, n), 0, a->dt == gcclFloat32 ? 0 : n, &w));
  /* in place, sendbuff is this rank's slot of recvbuff: encode before any decode */
  GCCL_CHECK(coll_encode_input(a, out_frame(&w, ctx->rank), w.slot, &bytes));
  return frames_ring(ctx, a, &w, bytes);
}
