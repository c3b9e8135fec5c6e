/* sparse.c — top-k allreduces: sparse allgather, and sparse split-reduce (SparCML).
 *
 * Both start the same way: every rank encodes its whole input once (EF_ADD, so
 * its residual is staged for every element) into one top-k frame. The selection
 * is each rank's own top k of its whole tensor.
 *
 * sparse-ag: every rank sends its frame to every peer and sums all p frames, its
 * own included, in rank order into a zeroed fp32 sum (sparse_frames_sum). Each
 * rank receives (p-1) frames of ~k entries: cheap for few ranks.
 *
 *   r0: F0 -> r1, r2     out = 0 + F0 + F1 + F2   (on every rank, in this order)
 *   r1: F1 -> r0, r2
 *   r2: F2 -> r0, r1
 *
 * sparse-sr: the index space is cut into p ranges (coll_chunk); rank q owns
 * range q. Each rank reads its own frame's entries (kept values and exceptions,
 * i.e. inf/NaN, merged in index order; O(k)) and sends owner q those in range q
 * as one range message; the owner sums the messages in rank order, its own
 * included, into A. Then every owner sends A to every peer as a range message,
 * and every rank writes all ranges into its output:
 *
 *   phase 1 (to owners):    r -> q : sel_r[range q]       A_q = sum_r sel_r[range q]
 *   phase 2 (allgather):    q -> r : A_q                   out[range q] = A_q
 *
 * (A frame sent raw, the whole tensor verbatim when it has very many non-finite
 * values, is decoded into a dense D instead and each range written from it.)
 * Per rank: k entries out and ~k in during phase 1 (sparse-ag: (p-1) k in);
 * phase 2 moves the sum, up to p k entries, or ~k with global below.
 *
 * A range message holds the range's nonzeros sparse (values, then their offsets
 * Elias-Fano coded as top-k's indices are: ~1.1 bytes each at 1%) while that is
 * smaller than the dense range, else the dense fp32 range: SparCML's switch,
 * made per message, because sums fill in as they meet. Layout in sparse.h.
 * Receivers check every field (gcclCorruptData otherwise) before applying it.
 *
 * Each element's result is computed once, by its owner (or, in sparse-ag, by
 * every rank from the same frames in the same order), so every rank holds the
 * same bits; both give the same bits as each other, since they add the same
 * values in the same order (an entry a frame does not hold is not added).
 *
 * Global re-sparsification (topk:global=1, Ok-Topk / gTop-k): the sum of p
 * selections holds up to p k entries. With global, each range keeps only the
 * k' = ceil(k len / count) entries of largest magnitude of its sum (non-finite
 * ones always), so the result has about k nonzeros, and the dropped mass goes
 * back into error feedback — into the range owner's staged residual, which
 * keeps the telescoping sum exact: sum_t out_t + sum_r e_r = sum_t sum_r g_t,r.
 * In sparse-ag every rank makes the same selection of the whole sum, and each
 * keeps the dropped mass of its own range.
 *
 * In place: sendbuff is read only by the encode, before anything is written. */
#include "collectives/sparse.h"

#include <stdlib.h>
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/prims.h"
#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec_util.h"
#include "compress/compressor.h"
#include "compress/decode.h"
#include "compress/frame.h"
#include "compress/frames_sum.h"
#include "compress/index_code.h"
#include "compress/topk.h"

#define KEY_MASK 0x7FFFFFFFu
#define KEY_INF 0x7F800000u

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Points *base at a workspace of `bytes`, growing it if needed while keeping its
 * first `keep` bytes (growth loses the contents, so they are copied aside). */
static gcclResult_t workspace_keep(struct coll_ctx* ctx, size_t keep, size_t bytes, unsigned char** base) {
  if (bytes <= ctx->work_bytes) {
    *base = ctx->work;
    return gcclSuccess;
  }
  void* copy = NULL;
  if (keep) {
    copy = malloc(keep);
    if (copy == NULL) return err_set(gcclSystemError, "sparse: out of memory for %zu bytes", keep);
    memcpy(copy, ctx->work, keep);
  }
  void* w = NULL;
  gcclResult_t res = coll_workspace(ctx, bytes, &w);
  if (res == gcclSuccess && keep) memcpy(w, copy, keep);
  free(copy);
  *base = w;
  return res;
}

/* sparse_frames_sum's workspace after the caller's own frame: sizes (everyone's,
 * then mine), requests, frame addresses, checked headers, the peers' frames
 * (frames_bytes), and the fp32 sum for other dtypes (sum_n). */
struct ag_work {
  uint64_t* sizes;
  tp_req *sreq, *rreq;
  const unsigned char** frame;
  struct frame_header* head;
  unsigned char* frames;
  float* sum;
};

static void ag_carve(struct prim_carver* c, struct ag_work* w, size_t own_end, size_t p, size_t frames_bytes,
                     size_t sum_n) {
  prim_carve(c, own_end);
  w->sizes = PRIM_CARVE(c, uint64_t, p + 1);
  w->sreq = PRIM_CARVE(c, tp_req, p);
  w->rreq = PRIM_CARVE(c, tp_req, p);
  w->frame = PRIM_CARVE(c, const unsigned char*, p);
  w->head = PRIM_CARVE(c, struct frame_header, p);
  w->frames = prim_carve(c, frames_bytes);
  w->sum = PRIM_CARVE(c, float, sum_n);
}

/* Carves w with its areas in a workspace that keeps its first `keep` bytes. */
static gcclResult_t ag_work_get(struct coll_ctx* ctx, size_t keep, size_t own_end, size_t frames_bytes, size_t sum_n,
                                struct ag_work* w) {
  struct prim_carver c = {0};
  size_t p = (size_t)ctx->nranks;
  ag_carve(&c, w, own_end, p, frames_bytes, sum_n);
  GCCL_CHECK(workspace_keep(ctx, keep, c.used, &c.base));
  c.used = 0;
  ag_carve(&c, w, own_end, p, frames_bytes, sum_n);
  return gcclSuccess;
}

gcclResult_t sparse_frames_sum(struct coll_ctx* ctx, const struct coll_args* a, size_t own_at, size_t own_bytes,
                               float** sum) {
  struct transport* tp = ctx->tp;
  int p = ctx->nranks, me = ctx->rank;
  size_t n = a->count, up = (size_t)p, own_end = own_at + own_bytes;
  struct ag_work w;
  GCCL_CHECK(ag_work_get(ctx, own_end, own_end, 0, 0, &w));
  w.sizes[up] = own_bytes;
  GCCL_CHECK(prim_allgather_small(tp, &w.sizes[up], sizeof(uint64_t), w.sizes));

  /* Every rank encodes into compressor_bound_f32 bytes, so a larger announced
   * size is corrupt: refused before it can size the workspace. */
  size_t frames_bytes = 0, bound = compressor_bound_f32(a->comp, n);
  for (int r = 0; r < p; r++) {
    if (r == me) continue;
    if (w.sizes[r] > bound)
      return err_set(gcclCorruptData, "sparse: rank %d announces a frame of %llu bytes, above the codec's bound of %zu",
                     r, (unsigned long long)w.sizes[r], bound);
    frames_bytes += prim_align64((size_t)w.sizes[r]);
  }
  GCCL_CHECK(ag_work_get(ctx, (size_t)(w.frames - (unsigned char*)ctx->work), own_end, frames_bytes,
                         a->dt == gcclFloat32 ? 0 : n, &w));
  prim_slots_clear(w.sreq, up);
  prim_slots_clear(w.rreq, up);

  /* receive every peer's frame at its place, then send mine (staggered, so the
   * first sends of all ranks go to different receivers) */
  unsigned char* own = (unsigned char*)ctx->work + own_at;
  size_t at = 0;
  for (int r = 0; r < p; r++) {
    if (r == me) {
      w.frame[r] = own; /* sizes[me] is own_bytes */
      continue;
    }
    w.frame[r] = w.frames + at;
    GCCL_CHECK(prim_post_recv(tp, r, w.frames + at, (size_t)w.sizes[r], &w.rreq[r]));
    at += prim_align64((size_t)w.sizes[r]);
  }
  for (int k = 1; k < p; k++) {
    int q = (me + k) % p;
    GCCL_CHECK(prim_post_send(tp, q, own, own_bytes, &w.sreq[q]));
  }

  /* rank order, whatever order the frames arrive in */
  float* acc = a->dt == gcclFloat32 ? a->recvbuff : w.sum;
  if (a->device_recv) { /* each frame added on the device as it arrives */
    GCCL_CHECK(coll_output_clear(a, acc, n));
    for (int r = 0; r < p; r++) {
      if (r != me) GCCL_CHECK(prim_wait(tp, &w.rreq[r]));
      GCCL_CHECK(coll_output_add(a, w.frame[r], (size_t)w.sizes[r], acc, n));
    }
  } else {                        /* each frame checked as it arrives, then all summed a block at a time */
    for (int r = 0; r < p; r++) { /* mine first: it needs no wait */
      int q = (me + r) % p;
      GCCL_CHECK(prim_wait(tp, &w.rreq[q]));
      GCCL_CHECK(frame_check(w.frame[q], (size_t)w.sizes[q], n, gcclFloat32, &w.head[q]));
    }
    GCCL_CHECK(frames_sum_f32(w.frame, w.head, p, acc, n));
  }
  GCCL_CHECK(prim_wait_all(tp, w.sreq, up));
  *sum = acc;
  return gcclSuccess;
}

/* ---- global re-sparsification ---------------------------------------------------- */

/* The entries a range keeps of its sum under global: k' = ceil(k len / count). */
static size_t global_keep(const struct gcclCompressor* c, size_t count, size_t len) {
  __extension__ typedef unsigned __int128 u128;
  size_t k = sparse_k(c->spec.ratio, count);
  return (size_t)(((u128)k * len + count - 1) / count);
}

/* Eligible for dropping: finite and not zero (key = |x|'s bits orders magnitudes). */
static inline int droppable(uint32_t key) {
  return key != 0 && key < KEY_INF;
}

/* Keeps the `keep` finite entries of x[0, len) of largest magnitude (ties: lowest
 * index first, as top-k selects) and every non-finite one; the others become 0
 * and, when resid is given, are added to resid[i]. The keep-th largest key T is
 * found by a radix select over three digits (11, 10, 10 bits), O(len) each. */
static void keep_largest(float* x, size_t len, size_t keep, float* resid) {
  static const int shift[3] = {20, 10, 0};
  static const uint32_t digit[3] = {0x7FF, 0x3FF, 0x3FF};
  size_t hist[2048];
  uint32_t prefix = 0, mask = 0;
  size_t need = keep;
  for (int d = 0; d < 3; d++) {
    memset(hist, 0, (digit[d] + 1) * sizeof *hist);
    for (size_t i = 0; i < len; i++) {
      uint32_t key = f32_bits(x[i]) & KEY_MASK;
      if (droppable(key) && (key & mask) == prefix) hist[key >> shift[d] & digit[d]]++;
    }
    if (d == 0) {
      size_t eligible = 0;
      for (uint32_t b = 0; b <= digit[0]; b++) eligible += hist[b];
      if (eligible <= keep) return; /* nothing to drop */
    }
    uint32_t b = digit[d];
    for (; b > 0 && hist[b] < need; b--) need -= hist[b]; /* the bins hold >= need */
    prefix |= b << shift[d];
    mask |= digit[d] << shift[d];
  }
  /* T = prefix; keep key > T and the first `need` with key == T */
  for (size_t i = 0; i < len; i++) {
    uint32_t key = f32_bits(x[i]) & KEY_MASK;
    if (!droppable(key) || key > prefix) continue;
    if (key == prefix && need > 0) {
      need--;
      continue;
    }
    if (resid) resid[i] += x[i];
    x[i] = 0.0f;
  }
}

/* ---- sparse allgather ---------------------------------------------------------------- */

gcclResult_t allreduce_sparse_ag(struct coll_ctx* ctx, const struct coll_args* a) {
  struct gcclCompressor* c = a->comp;
  size_t n = a->count, bound = compressor_bound_f32(c, n), bytes;
  unsigned char* frame;
  GCCL_CHECK(coll_workspace(ctx, bound, (void**)&frame));
  GCCL_CHECK(coll_encode_input(a, frame, bound, &bytes));
  float* sum;
  GCCL_CHECK(sparse_frames_sum(ctx, a, 0, bytes, &sum));
  if (c->spec.global) {
    /* every rank drops the same entries; each keeps the mass of its own range */
    for (int q = 0; q < ctx->nranks; q++) {
      size_t off, len;
      coll_chunk(n, ctx->nranks, q, &off, &len);
      float* resid = q == ctx->rank && c->spec.ef ? c->work + a->comp_first + off : NULL;
      keep_largest(sum + off, len, global_keep(c, n, len), resid);
    }
  }
  if (a->dt != gcclFloat32) f32_store(a->recvbuff, a->dt, sum, n);
  return gcclSuccess;
}

/* ---- sparse split-reduce ------------------------------------------------------------- */

/* A rank's own top-k selection as (index, value) entries in index order: the
 * frame's kept values merged with its exceptions (raw values; top-k never keeps
 * an exception's index). */
struct entries {
  struct topk_reader rd;
  const unsigned char* exc;
  size_t nexc, e;
  size_t have, pos;
  uint64_t idx[256];
  float val[256];
};

static gcclResult_t entries_open(struct entries* s, const unsigned char* frame, const struct frame_header* h) {
  GCCL_CHECK(topk_reader_init(&s->rd, h, frame + FRAME_HEADER_BYTES));
  s->exc = frame + FRAME_HEADER_BYTES + h->payload_bytes;
  s->nexc = (size_t)h->exceptions;
  s->e = s->have = s->pos = 0;
  return gcclSuccess;
}

static int entries_next(struct entries* s, size_t* i, float* v) {
  if (s->pos == s->have) {
    s->have = topk_reader_next(&s->rd, s->idx, s->val, 256);
    s->pos = 0;
  }
  uint64_t ei = s->e < s->nexc ? get_u64le(s->exc + FRAME_EXCEPTION_BYTES_F32 * s->e) : UINT64_MAX;
  if (s->pos < s->have && s->idx[s->pos] < ei) {
    *i = (size_t)s->idx[s->pos];
    *v = s->val[s->pos++];
    return 1;
  }
  if (s->e == s->nexc) return 0;
  *i = (size_t)ei;
  *v = get_f32(s->exc + FRAME_EXCEPTION_BYTES_F32 * s->e++ + 8);
  return 1;
}

/* One call's workspace and state. */
struct sr_work {
  tp_req* s1;      /* [p] phase-1 sends */
  tp_req* s2;      /* [p] phase-2 sends */
  tp_req* rreq;    /* [p] receives */
  size_t* got;     /* [p] bytes received */
  size_t* entries; /* [p] my entries per range */
  unsigned char* frame;
  unsigned char* msgs; /* outgoing phase-1 messages: the frame's space or D's */
  float* D;            /* dense decode of the frame, when entries cannot be read from it */
  unsigned char* slots;
  size_t slot;
  float* A;
};

/* Requests, sizes and counts; the frame; D; one message slot per rank (received
 * from it; mine holds my own range's messages); A. */
static void sr_carve(struct prim_carver* c, struct sr_work* w, size_t p, size_t frame_room, size_t d_room,
                     size_t max_len) {
  w->s1 = PRIM_CARVE(c, tp_req, p);
  w->s2 = PRIM_CARVE(c, tp_req, p);
  w->rreq = PRIM_CARVE(c, tp_req, p);
  w->got = PRIM_CARVE(c, size_t, p);
  w->entries = PRIM_CARVE(c, size_t, p);
  w->frame = prim_carve(c, frame_room);
  w->D = prim_carve(c, d_room);
  w->slots = prim_carve(c, p * w->slot);
  w->A = PRIM_CARVE(c, float, max_len);
}

static unsigned char* slot_of(const struct sr_work* w, int r) {
  return w->slots + (size_t)r * w->slot;
}

/* Phase-1 message q goes to rank q (sent at once), or for my own range into my slot. */
static gcclResult_t range_send(struct coll_ctx* ctx, struct sr_work* w, int q, unsigned char* m, size_t bytes,
                               size_t* own_bytes) {
  if (q == ctx->rank) {
    *own_bytes = bytes;
    return gcclSuccess;
  }
  return prim_post_send(ctx->tp, q, m, bytes, &w->s1[q]);
}

static unsigned char* range_dest(const struct coll_ctx* ctx, const struct sr_work* w, int q, unsigned char** next,
                                 size_t len) {
  if (q == ctx->rank) return slot_of(w, q);
  unsigned char* m = *next;
  *next += prim_align64(RANGE_HEADER + len * sizeof(float));
  return m;
}

/* Phase 1, building the messages from the frame's entries: one pass counts
 * each range's entries, a second writes them. O(k), not O(count). */
static gcclResult_t send_entries(struct coll_ctx* ctx, const struct coll_args* a, struct sr_work* w,
                                 const struct frame_header* h, size_t* own_bytes) {
  int p = ctx->nranks;
  size_t n = a->count, off, len, i;
  float v;
  struct entries st, *s = &st;
  memset(w->entries, 0, (size_t)p * sizeof(size_t));
  gcclResult_t res = entries_open(s, w->frame, h);
  if (res == gcclSuccess) {
    int q = 0;
    coll_chunk(n, p, q, &off, &len);
    while (entries_next(s, &i, &v)) {
      while (i >= off + len) coll_chunk(n, p, ++q, &off, &len);
      w->entries[q]++;
    }
    topk_reader_free(&s->rd);
    res = entries_open(s, w->frame, h);
  }
  if (res == gcclSuccess) {
    /* ranges in index order, each begun when the entries reach it */
    unsigned char* next = w->msgs;
    struct sparse_range_out o;
    int q = 0;
    coll_chunk(n, p, q, &off, &len);
    sparse_range_begin(&o, range_dest(ctx, w, q, &next, len), len, w->entries[q]);
    int more = entries_next(s, &i, &v);
    for (;;) {
      while (more && i < off + len) {
        sparse_range_put(&o, i - off, v);
        more = entries_next(s, &i, &v);
      }
      if (len) res = range_send(ctx, w, q, o.m, sparse_range_end(&o), own_bytes);
      if (res != gcclSuccess || ++q == p) break;
      coll_chunk(n, p, q, &off, &len);
      sparse_range_begin(&o, range_dest(ctx, w, q, &next, len), len, w->entries[q]);
    }
    topk_reader_free(&s->rd);
  }
  return res;
}

/* Phase 1 for a frame whose entries cannot be read one by one (raw, or not
 * top-k): decoded into D, each range written from it. O(count). */
static gcclResult_t send_dense(struct coll_ctx* ctx, const struct coll_args* a, struct sr_work* w, size_t frame_bytes,
                               size_t* own_bytes) {
  int p = ctx->nranks;
  size_t n = a->count, off, len;
  memset(w->D, 0, n * sizeof(float));
  GCCL_CHECK(frame_decode_accumulate(w->frame, frame_bytes, w->D, n, gcclFloat32));
  unsigned char* next = w->msgs;
  for (int q = 0; q < p; q++) {
    coll_chunk(n, p, q, &off, &len);
    if (len == 0) continue;
    unsigned char* m = range_dest(ctx, w, q, &next, len);
    GCCL_CHECK(range_send(ctx, w, q, m, sparse_range_write(m, w->D + off, len), own_bytes));
  }
  return gcclSuccess;
}

gcclResult_t allreduce_sparse_sr(struct coll_ctx* ctx, const struct coll_args* a) {
  struct transport* tp = ctx->tp;
  struct gcclCompressor* c = a->comp;
  int p = ctx->nranks, me = ctx->rank;
  size_t n = a->count, up = (size_t)p, bound = compressor_bound_f32(c, n);
  size_t my_off, my_len, off, len, max_len;
  coll_chunk(n, p, me, &my_off, &my_len);
  coll_chunk(n, p, 0, &off, &max_len); /* chunk 0 is the longest */

  /* The outgoing phase-1 messages take whichever of the frame's and D's space
   * is free: D's when the frame is read entry by entry, else the frame's. */
  size_t outgoing = 0;
  for (int q = 0; q < p; q++) {
    coll_chunk(n, p, q, &off, &len);
    if (q != me) outgoing += prim_align64(RANGE_HEADER + len * sizeof(float));
  }
  struct sr_work w;
  w.slot = prim_align64(RANGE_HEADER + max_len * sizeof(float));
  size_t frame_room = prim_align64(bound) > outgoing ? bound : outgoing;
  size_t d_room = prim_align64(n * sizeof(float)) > outgoing ? n * sizeof(float) : outgoing;
  struct prim_carver carver = {0};
  sr_carve(&carver, &w, up, frame_room, d_room, max_len);
  GCCL_CHECK(prim_carve_workspace(ctx, &carver));
  sr_carve(&carver, &w, up, frame_room, d_room, max_len);
  prim_slots_clear(w.s1, up);
  prim_slots_clear(w.s2, up);
  prim_slots_clear(w.rreq, up);

  size_t frame_bytes, own_bytes = 0;
  struct frame_header h;
  GCCL_CHECK(coll_encode_input(a, w.frame, bound, &frame_bytes));
  GCCL_CHECK(frame_validate(w.frame, frame_bytes, n, gcclFloat32, &h));

  /* phase 1: my range from every peer; each range of my selection to its owner */
  for (int s = 0; s < p && my_len; s++)
    if (s != me)
      GCCL_CHECK(
          prim_post_recv_upto(tp, s, slot_of(&w, s), RANGE_HEADER + my_len * sizeof(float), &w.got[s], &w.rreq[s]));
  if (h.codec == CODEC_TOPK && !(h.flags & FRAME_FLAG_RAW)) {
    w.msgs = (unsigned char*)w.D;
    GCCL_CHECK(send_entries(ctx, a, &w, &h, &own_bytes));
  } else {
    w.msgs = w.frame; /* free once decoded */
    GCCL_CHECK(send_dense(ctx, a, &w, frame_bytes, &own_bytes));
  }
  float* A = w.A;
  memset(A, 0, my_len * sizeof(float));
  for (int s = 0; s < p && my_len; s++) {
    if (s != me) GCCL_CHECK(prim_wait(tp, &w.rreq[s]));
    GCCL_CHECK(sparse_range_apply(slot_of(&w, s), s == me ? own_bytes : w.got[s], A, my_len, 1, s));
  }
  if (c->spec.global)
    keep_largest(A, my_len, global_keep(c, n, my_len), c->spec.ef ? c->work + a->comp_first + my_off : NULL);

  /* phase 2: every owner's A to every rank */
  for (int s = 0; s < p; s++) {
    coll_chunk(n, p, s, &off, &len);
    if (s != me && len)
      GCCL_CHECK(prim_post_recv_upto(tp, s, slot_of(&w, s), RANGE_HEADER + len * sizeof(float), &w.got[s], &w.rreq[s]));
  }
  if (my_len) {
    size_t bytes = sparse_range_write(slot_of(&w, me), A, my_len);
    for (int k = 1; k < p; k++)
      GCCL_CHECK(prim_post_send(tp, (me + k) % p, slot_of(&w, me), bytes, &w.s2[(me + k) % p]));
  }
  /* non-fp32 outputs are built in D and rounded once: D (or the phase-1
   * messages in its space) is free once those sends are done */
  GCCL_CHECK(prim_wait_all(tp, w.s1, up));
  float* dst = a->dt == gcclFloat32 ? a->recvbuff : w.D;
  if (my_len) memcpy(dst + my_off, A, my_len * sizeof(float));
  for (int s = 0; s < p; s++) {
    coll_chunk(n, p, s, &off, &len);
    if (s == me || len == 0) continue;
    GCCL_CHECK(prim_wait(tp, &w.rreq[s]));
    GCCL_CHECK(sparse_range_apply(slot_of(&w, s), w.got[s], dst + off, len, 0, s));
  }
  if (a->dt != gcclFloat32) f32_store(a->recvbuff, a->dt, w.D, n);
  return prim_wait_all(tp, w.s2, up);
}
