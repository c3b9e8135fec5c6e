/* ring_requant.c — compressed allreduce as a ring that re-quantizes at every hop:
 * the baseline SRA (sra.c) is measured against. Only GCCL_ALGO=ring-requant runs it.
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
 * The price, and why SRA is the default: an element is quantized p times (the
 * errors add up along the ring) and every hop waits for the one before, so the
 * reduce-scatter takes p-1 sequential encode-send-decode steps. Each step waits for
 * both its messages; speed is not this schedule's purpose.
 *
 * In place: sendbuff is read only in the reduce-scatter; the allgather alone
 * writes recvbuff. Empty chunks (count < p) are neither encoded nor sent. */

#include "../common/dtype.h"
#include "../common/result.h"
#include "../compress/compressor.h"
#include "coll.h"

static int ring_mod(int a, int p) {
  return ((a % p) + p) % p;
}

/* Sends `bytes` of sframe to `to` (unless send_len is 0) and receives a frame of at
 * most cap bytes from `from` (unless recv_len is 0), waiting for both. */
static gcclResult_t exchange(struct transport* tp, int to, const void* sframe, size_t bytes, size_t send_len, int from,
                             void* rframe, size_t cap, size_t* got, size_t recv_len) {
  tp_req sreq = -1, rreq = -1;
  if (recv_len) GCCL_CHECK(tp->ops->irecv_upto(tp, from, rframe, cap, got, &rreq));
  if (send_len) GCCL_CHECK(tp->ops->isend(tp, to, sframe, bytes, &sreq));
  if (rreq >= 0) GCCL_CHECK(tp->ops->wait(tp, rreq));
  if (sreq >= 0) GCCL_CHECK(tp->ops->wait(tp, sreq));
  return gcclSuccess;
}

gcclResult_t allreduce_ring_requant(struct coll_ctx* ctx, const struct coll_args* a) {
  struct transport* tp = ctx->tp;
  struct gcclCompressor* c = a->comp;
  int p = ctx->nranks, r = ctx->rank, next = ring_mod(r + 1, p), prev = ring_mod(r - 1, p);
  size_t size = dtype_size(a->dt), longest, off, len, roff, rlen;
  const unsigned char* in = a->sendbuff;
  unsigned char* out = a->recvbuff;
  coll_chunk(a->count, p, 0, &off, &longest);

  /* workspace: p final frames (slot c holds chunk c's), the frame in flight, the
   * frame received, frame sizes, and two fp32 chunks (sum, decode stage) */
  size_t slot = coll_align64(compressor_bound_f32(c, longest)), fl = coll_align64(longest * sizeof(float));
  unsigned char* base;
  GCCL_CHECK(
      coll_workspace(ctx, (size_t)(p + 2) * slot + coll_align64((size_t)p * sizeof(size_t)) + 2 * fl, (void**)&base));
  unsigned char* final = base;
  unsigned char* send = base + (size_t)p * slot;
  unsigned char* recv = send + slot;
  size_t* bytes = (size_t*)(void*)(recv + slot); /* [p] final frame sizes */
  float* sum = (float*)(void*)((unsigned char*)bytes + coll_align64((size_t)p * sizeof(size_t)));
  float* stage = (float*)(void*)((unsigned char*)sum + fl);
  size_t send_bytes = 0, got = 0;

  /* reduce-scatter (alone, p = 1, chunk r-1 is this rank's own: summed below) */
  coll_chunk(a->count, p, ring_mod(r - 1, p), &off, &len);
  if (len && p > 1)
    GCCL_CHECK(
        compressor_encode_f32(c, in + off * size, a->dt, a->comp_first + off, len, EF_ADD, 0, send, slot, &send_bytes));
  for (int s = 0; s < p - 1; s++) {
    coll_chunk(a->count, p, ring_mod(r - s - 1, p), &off, &len);
    coll_chunk(a->count, p, ring_mod(r - s - 2, p), &roff, &rlen);
    GCCL_CHECK(exchange(tp, next, send, send_bytes, len, prev, recv, slot, &got, rlen));
    if (!rlen) continue;
    GCCL_CHECK(frame_decode_f32_to(recv, got, sum, gcclFloat32, rlen, NULL)); /* 0.0f + decoded: no clearing */
    GCCL_CHECK(compressor_accumulate_exact(c, in + roff * size, a->dt, a->comp_first + roff, rlen, sum, 0));
    if (s < p - 2)
      GCCL_CHECK(compressor_encode_f32(c, sum, gcclFloat32, a->comp_first + roff, rlen, EF_RESTAGE, (uint32_t)s + 1,
                                       send, slot, &send_bytes));
  }
  /* chunk r is complete in sum (alone, p = 1: just this rank's input) */
  coll_chunk(a->count, p, r, &off, &len);
  if (p == 1) {
    GCCL_CHECK(compressor_accumulate_exact(c, in, a->dt, a->comp_first, len, sum, 1));
  }
  if (len) {
    GCCL_CHECK(compressor_encode_f32(c, sum, gcclFloat32, a->comp_first + off, len, EF_RESTAGE, (uint32_t)p - 1,
                                     final + (size_t)r * slot, slot, &bytes[r]));
    /* every read of sendbuff is done: recvbuff may be written from here on */
    GCCL_CHECK(frame_decode_f32_to(final + (size_t)r * slot, bytes[r], out + off * size, a->dt, len, stage));
  }

  /* allgather: step s forwards chunk r-s's final frame and receives chunk r-s-1's */
  for (int s = 0; s < p - 1; s++) {
    int sc = ring_mod(r - s, p), rc = ring_mod(r - s - 1, p);
    coll_chunk(a->count, p, sc, &off, &len);
    coll_chunk(a->count, p, rc, &roff, &rlen);
    GCCL_CHECK(exchange(tp, next, final + (size_t)sc * slot, bytes[sc], len, prev, final + (size_t)rc * slot, slot,
                        &bytes[rc], rlen));
    if (rlen)
      GCCL_CHECK(frame_decode_f32_to(final + (size_t)rc * slot, bytes[rc], out + roff * size, a->dt, rlen, stage));
  }
  return gcclSuccess;
}
