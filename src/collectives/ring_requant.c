/* ring_requant.c — compressed allreduce as a ring that re-quantizes at every hop.
 *
 * Reduce-scatter (the schedule of ring.c: step s, rank r sends chunk r-s-1 to
 * r+1 and receives chunk r-s-2 from r-1), with frames instead of raw chunks:
 *
 *   step 0:     send E(own chunk r-1)                         EF_ADD, stage 0
 *   step s:     S = dec(frame of chunk r-s-2) + own chunk exactly
 *               (compressor_accumulate_exact stages residual 0 there), then
 *               frame = E(S) for step s+1                     EF_RESTAGE, stage s+1
 *   last step:  S is chunk r complete; its frame is final     EF_RESTAGE, stage p-1
 *
 * Each hop's re-encode error joins that rank's residual for the chunk, so error
 * feedback telescopes: sum of outputs + residuals = sum of inputs. Then a ring
 * allgather forwards every final frame unchanged, and every rank (the owner too)
 * decodes each final frame into its output: identical bits everywhere.
 *
 * The price: an element is quantized p times, and the errors add up along the
 * ring. For quantizers that is why sra is their schedule; this one is a
 * comparison for them. For fp16 and bf16, whose every rounding is below 2^-8
 * relative, it is what NCCL does with half-precision tensors, and on a network
 * it is faster than sra for large tensors: its one flow per link keeps a TCP link
 * as busy as a dense ring (sra's phase 1 sends p-1 flows out of every host at
 * once, which share the link less well), and it sends the same bytes. The tuner
 * picks it there (tuner.c).
 *
 * Segments, cut-through. Every chunk goes as K frames of consecutive elements
 * (segment_count), and a rank handles the segments as they arrive: it decodes,
 * sums and re-encodes segment j of step s and sends it on while segment j+1 is
 * still on the wire, and forwards an allgather frame before it decodes it. So
 * every link stays busy across the steps, and the codec work of the hops hides
 * behind the transfers instead of adding p-1 gaps between them. The frames to
 * and from a neighbour are one ordered stream: receives from prev are posted a
 * window of 2K ahead in the order prev sends, into two banks of K slots (the
 * reduce-scatter) or the final-frame slots (the allgather); a re-encode into a
 * send slot first waits for the send that slot held two steps before.
 *
 * In place: the reduce-scatter reads sendbuff chunk by chunk; a segment of chunk
 * r is written to recvbuff only once its input has been summed, and every other
 * chunk only in the allgather. Empty chunks and segments (count < p K) are
 * neither encoded nor sent: both sides know the lengths. */

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "compress/decode.h"

/* 1 MiB of fp32 per segment: on the 1 Gbit/s test bed (fp16, 4 ranks), 16 MiB
 * tensors ran 8% faster in 4 segments a chunk than in 1 (BENCHMARKS.md). */
size_t ring_requant_segment_elems = (size_t)1 << 18;

/* At most this many segments per chunk: a few keep every link busy (a segment's
 * codec work is short against its transfer), and each is a message, with a
 * handshake on MPI; 8 and 16 measured no faster at 100 MiB. */
#define MAX_SEGMENTS 4

static int segment_count(size_t longest_chunk) {
  size_t k = (longest_chunk + ring_requant_segment_elems - 1) / ring_requant_segment_elems;
  return k < 1 ? 1 : k > MAX_SEGMENTS ? MAX_SEGMENTS : (int)k;
}

/* The call's plan and workspace. Receives from prev are numbered in the order prev
 * sends them: item i < (p-1) K is segment i % K of reduce-scatter step i / K, the
 * next (p-1) K are the allgather's in the same way. */
struct rr {
  struct transport* tp;
  const struct coll_args* a;
  int p, r, next, prev, K, items, window;
  size_t slot, size;
  unsigned char* final; /* [p K] final frames, chunk c's segment j at c K + j */
  unsigned char* send;  /* [2 K] re-encoded frames, bank (step % 2) */
  unsigned char* recv;  /* [2 K] received reduce-scatter frames, bank (step % 2) */
  size_t* final_bytes;  /* [p K] */
  size_t* recv_bytes;   /* [2 K] */
  tp_req* final_sreq;   /* [p K] sends from final slots */
  tp_req* send_sreq;    /* [2 K] sends from send slots */
  tp_req* rreq;         /* [items] */
  float* sum;           /* one segment's fp32 partial sum */
  float* stage;         /* one segment's fp32 decode area (outputs that are not fp32) */
};

/* Where segment j of chunk c lies. */
static void segment_of(const struct rr* w, int c, int j, size_t* off, size_t* len) {
  size_t coff, clen, soff;
  coll_chunk(w->a->count, w->p, c, &coff, &clen);
  coll_chunk(clen, w->K, j, &soff, len);
  *off = coff + soff;
}

/* Posts receive item i (see struct rr) unless it is past the end or empty. */
static gcclResult_t post_item(struct rr* w, int i) {
  if (i >= w->items) return gcclSuccess;
  int rs = i < w->items / 2, s = (rs ? i : i - w->items / 2) / w->K, j = i % w->K;
  int c = prim_mod(w->r - s - (rs ? 2 : 1), w->p);
  size_t off, len;
  segment_of(w, c, j, &off, &len);
  if (!len) return gcclSuccess;
  int bank = (s % 2) * w->K + j, fin = c * w->K + j;
  unsigned char* into = rs ? w->recv + (size_t)bank * w->slot : w->final + (size_t)fin * w->slot;
  size_t* got = rs ? &w->recv_bytes[bank] : &w->final_bytes[fin];
  return prim_post_recv_upto(w->tp, w->prev, into, w->slot, got, &w->rreq[i]);
}

/* The workspace, slots and requests of struct rr, `seg` elements per segment. */
static void rr_carve(struct prim_carver* c, struct rr* w, size_t seg) {
  size_t K = (size_t)w->K, pk = (size_t)w->p * K;
  w->final = prim_carve(c, pk * w->slot);
  w->send = prim_carve(c, 2 * K * w->slot);
  w->recv = prim_carve(c, 2 * K * w->slot);
  w->final_bytes = PRIM_CARVE(c, size_t, pk);
  w->recv_bytes = PRIM_CARVE(c, size_t, 2 * K);
  w->final_sreq = PRIM_CARVE(c, tp_req, pk);
  w->send_sreq = PRIM_CARVE(c, tp_req, 2 * K);
  w->rreq = PRIM_CARVE(c, tp_req, w->items);
  w->sum = PRIM_CARVE(c, float, seg);
  w->stage = PRIM_CARVE(c, float, seg);
}

static gcclResult_t rr_layout(struct coll_ctx* ctx, const struct coll_args* a, struct rr* w) {
  size_t unused, longest, seg;
  int p = ctx->nranks;
  coll_chunk(a->count, p, 0, &unused, &longest); /* chunk 0 is a longest */
  struct prim_ring ring = prim_ring_of(ctx->rank, p);
  w->tp = ctx->tp;
  w->a = a;
  w->p = p;
  w->r = ctx->rank;
  w->next = ring.next;
  w->prev = ring.prev;
  w->K = segment_count(longest);
  w->items = 2 * (p - 1) * w->K;
  w->window = 2 * w->K;
  w->size = dtype_size(a->dt);
  coll_chunk(longest, w->K, 0, &unused, &seg);
  w->slot = prim_align64(compressor_bound_f32(a->comp, seg));
  struct prim_carver carver = {0};
  rr_carve(&carver, w, seg);
  GCCL_CHECK(prim_carve_workspace(ctx, &carver));
  rr_carve(&carver, w, seg);
  prim_slots_clear(w->final_sreq, (size_t)p * (size_t)w->K);
  prim_slots_clear(w->send_sreq, 2 * (size_t)w->K);
  prim_slots_clear(w->rreq, (size_t)w->items);
  return gcclSuccess;
}

/* Waits for every send still pending (their frames must outlive them). */
static gcclResult_t wait_sends(struct rr* w) {
  gcclResult_t res = prim_wait_all(w->tp, w->final_sreq, (size_t)w->p * (size_t)w->K);
  gcclResult_t sends = prim_wait_all(w->tp, w->send_sreq, 2 * (size_t)w->K);
  return res != gcclSuccess ? res : sends;
}

/* Reduce-scatter. Afterwards chunk r's final frames are encoded (and on their
 * way to next) and decoded into recvbuff. */
static gcclResult_t reduce_scatter(struct rr* w) {
  const struct coll_args* a = w->a;
  struct gcclCompressor* c = a->comp;
  struct transport* tp = w->tp;
  const unsigned char* in = a->sendbuff;
  int p = w->p, r = w->r, K = w->K;
  size_t off, len;
  for (int i = 0; i < w->window; i++) GCCL_CHECK(post_item(w, i));
  /* step 0's frames: this rank's own chunk r-1, encoded once */
  for (int j = 0; j < K && p > 1; j++) {
    segment_of(w, prim_mod(r - 1, p), j, &off, &len);
    if (!len) continue;
    struct prim_encode e = {c, in + off * w->size, a->dt, a->comp_first + off, len, EF_ADD, 0};
    size_t bytes;
    GCCL_CHECK(prim_encode_send(tp, w->next, &e, w->send + (size_t)j * w->slot, w->slot, &bytes, &w->send_sreq[j]));
  }
  /* alone (p = 1) the one step sums just this rank's input */
  for (int s = 0; s < (p > 1 ? p - 1 : 1); s++)
    for (int j = 0; j < K; j++) {
      int i = s * K + j, chunk = prim_mod(r - s - 2, p), last = s >= p - 2;
      segment_of(w, chunk, j, &off, &len);
      if (len && p > 1) {
        int bank = (s % 2) * K + j;
        GCCL_CHECK(prim_wait(tp, &w->rreq[i]));
        GCCL_CHECK(
            frame_decode_f32_to(w->recv + (size_t)bank * w->slot, w->recv_bytes[bank], w->sum, gcclFloat32, len, NULL));
      }
      GCCL_CHECK(post_item(w, i + w->window)); /* into the slot just read */
      if (!len) continue;
      GCCL_CHECK(compressor_accumulate_exact(c, in + off * w->size, a->dt, a->comp_first + off, len, w->sum, p == 1));
      prim_progress(tp);
      size_t bytes;
      if (!last) { /* on to next for step s+1, from the bank step s-1 sent from */
        int bank = ((s + 1) % 2) * K + j;
        struct prim_encode e = {c, w->sum, gcclFloat32, a->comp_first + off, len, EF_RESTAGE, (uint32_t)s + 1};
        GCCL_CHECK(prim_wait(tp, &w->send_sreq[bank]));
        GCCL_CHECK(
            prim_encode_send(tp, w->next, &e, w->send + (size_t)bank * w->slot, w->slot, &bytes, &w->send_sreq[bank]));
      } else { /* chunk r's segment is complete: its final frame */
        int fin = r * K + j;
        unsigned char* f = w->final + (size_t)fin * w->slot;
        struct prim_encode e = {c, w->sum, gcclFloat32, a->comp_first + off, len, EF_RESTAGE, (uint32_t)p - 1};
        if (p > 1)
          GCCL_CHECK(prim_encode_send(tp, w->next, &e, f, w->slot, &w->final_bytes[fin], &w->final_sreq[fin]));
        else
          GCCL_CHECK(prim_encode(&e, f, w->slot, &w->final_bytes[fin]));
        /* this segment's input is summed: its place in recvbuff may be written */
        GCCL_CHECK(frame_decode_f32_to(f, w->final_bytes[fin], (unsigned char*)a->recvbuff + off * w->size, a->dt, len,
                                       w->stage));
      }
      prim_progress(tp);
    }
  return gcclSuccess;
}

/* Allgather: step s receives chunk r-s-1's final frames from prev, forwards each
 * to next as it arrives (but at the last step, when it has gone round), then
 * decodes it. */
static gcclResult_t allgather(struct rr* w) {
  const struct coll_args* a = w->a;
  struct transport* tp = w->tp;
  int p = w->p, K = w->K;
  size_t off, len;
  for (int s = 0; s < p - 1; s++)
    for (int j = 0; j < K; j++) {
      int i = (p - 1 + s) * K + j, chunk = prim_mod(w->r - s - 1, p), fin = chunk * K + j;
      segment_of(w, chunk, j, &off, &len);
      unsigned char* f = w->final + (size_t)fin * w->slot;
      if (len) {
        GCCL_CHECK(prim_wait(tp, &w->rreq[i]));
        if (s < p - 2) GCCL_CHECK(prim_forward(tp, w->next, f, w->final_bytes[fin], &w->final_sreq[fin]));
      }
      GCCL_CHECK(post_item(w, i + w->window));
      if (len)
        GCCL_CHECK(frame_decode_f32_to(f, w->final_bytes[fin], (unsigned char*)a->recvbuff + off * w->size, a->dt, len,
                                       w->stage));
      prim_progress(tp);
    }
  return gcclSuccess;
}

gcclResult_t allreduce_ring_requant(struct coll_ctx* ctx, const struct coll_args* a) {
  struct rr w;
  GCCL_CHECK(rr_layout(ctx, a, &w));
  GCCL_CHECK(reduce_scatter(&w));
  GCCL_CHECK(allgather(&w));
  return wait_sends(&w);
}
