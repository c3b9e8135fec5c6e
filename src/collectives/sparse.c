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

#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec_util.h"
#include "compress/compressor.h"
#include "compress/decode.h"
#include "compress/frame.h"
#include "compress/frames_sum.h"
#include "compress/index_code.h"
#include "compress/topk.h"

#define RANGE_SPARSE 0x53505347u /* "GSPS" */
#define RANGE_DENSE 0x44505347u  /* "GSPD" */
#define KEY_MASK 0x7FFFFFFFu
#define KEY_INF 0x7F800000u

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static gcclResult_t wait_all(struct transport* tp, tp_req* reqs, int n) {
  gcclResult_t first = gcclSuccess;
  for (int i = 0; i < n; i++) {
    gcclResult_t res = coll_wait(tp, &reqs[i]);
    if (first == gcclSuccess) first = res;
  }
  return first;
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

gcclResult_t sparse_frames_sum(struct coll_ctx* ctx, const struct coll_args* a, size_t own_at, size_t own_bytes,
                               float** sum) {
  struct transport* tp = ctx->tp;
  int p = ctx->nranks, me = ctx->rank;
  size_t n = a->count, up = (size_t)p;
  /* after the own frame: sizes (everyone's, then mine), requests, frame
   * addresses, checked headers, frames, fp32 sum */
  size_t sizes_at = coll_align64(own_at + own_bytes);
  size_t reqs_at = sizes_at + coll_align64((up + 1) * sizeof(uint64_t));
  size_t ptrs_at = reqs_at + coll_align64(2 * up * sizeof(tp_req));
  size_t heads_at = ptrs_at + coll_align64(up * sizeof(unsigned char*));
  size_t frames_at = heads_at + coll_align64(up * sizeof(struct frame_header));
  unsigned char* base;
  GCCL_CHECK(workspace_keep(ctx, own_at + own_bytes, frames_at, &base));
  uint64_t* sizes = (uint64_t*)(void*)(base + sizes_at);
  sizes[up] = own_bytes;
  GCCL_CHECK(tp->ops->allgather_small(tp, &sizes[up], sizeof(uint64_t), sizes));

  /* Every rank encodes into compressor_bound_f32 bytes, so a larger announced
   * size is corrupt: refused before it can size the workspace. */
  size_t total = frames_at, bound = compressor_bound_f32(a->comp, n);
  for (int r = 0; r < p; r++) {
    if (r == me) continue;
    if (sizes[r] > bound)
      return err_set(gcclCorruptData, "sparse: rank %d announces a frame of %llu bytes, above the codec's bound of %zu",
                     r, (unsigned long long)sizes[r], bound);
    total += coll_align64((size_t)sizes[r]);
  }
  size_t sum_at = total;
  if (a->dt != gcclFloat32) total += coll_align64(n * sizeof(float));
  GCCL_CHECK(workspace_keep(ctx, frames_at, total, &base));
  sizes = (uint64_t*)(void*)(base + sizes_at);
  tp_req* sreq = (tp_req*)(void*)(base + reqs_at);
  tp_req* rreq = sreq + p;
  const unsigned char** frame = (const unsigned char**)(void*)(base + ptrs_at);
  struct frame_header* head = (struct frame_header*)(void*)(base + heads_at);
  for (int r = 0; r < p; r++) sreq[r] = rreq[r] = -1;

  /* receive every peer's frame at its place, then send mine (staggered, so the
   * first sends of all ranks go to different receivers) */
  size_t at = frames_at;
  for (int r = 0; r < p; r++) {
    if (r == me) {
      frame[r] = base + own_at; /* sizes[me] is own_bytes */
      continue;
    }
    frame[r] = base + at;
    GCCL_CHECK(tp->ops->irecv(tp, r, base + at, (size_t)sizes[r], &rreq[r]));
    at += coll_align64((size_t)sizes[r]);
  }
  for (int k = 1; k < p; k++) {
    int q = (me + k) % p;
    GCCL_CHECK(tp->ops->isend(tp, q, base + own_at, own_bytes, &sreq[q]));
  }

  /* rank order, whatever order the frames arrive in */
  float* acc = a->dt == gcclFloat32 ? a->recvbuff : (float*)(void*)(base + sum_at);
  if (a->device_recv) { /* each frame added on the device as it arrives */
    GCCL_CHECK(coll_output_clear(a, acc, n));
    for (int r = 0; r < p; r++) {
      if (r != me) GCCL_CHECK(coll_wait(tp, &rreq[r]));
      GCCL_CHECK(coll_output_add(a, frame[r], (size_t)sizes[r], acc, n));
    }
  } else {                        /* each frame checked as it arrives, then all summed a block at a time */
    for (int r = 0; r < p; r++) { /* mine first: it needs no wait */
      int q = (me + r) % p;
      GCCL_CHECK(coll_wait(tp, &rreq[q]));
      GCCL_CHECK(frame_check(frame[q], (size_t)sizes[q], n, gcclFloat32, &head[q]));
    }
    GCCL_CHECK(frames_sum_f32(frame, head, p, acc, n));
  }
  GCCL_CHECK(wait_all(tp, sreq, p));
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

/* Builds one range message: range_begin with the number of entries to come,
 * range_put for each (offsets increasing), range_end. Sparse when smaller than
 * the dense range. */
struct range_out {
  unsigned char* m;
  size_t len, entries, section;
  unsigned char* v; /* sparse: next value */
  struct index_writer w;
  float* dense;
};

static int range_sparse(size_t len, size_t entries) {
  return entries * sizeof(float) + index_code_bytes(len, entries) < len * sizeof(float);
}

static void range_begin(struct range_out* o, unsigned char* m, size_t len, size_t entries) {
  o->m = m;
  o->len = len;
  o->entries = entries;
  o->section = index_code_bytes(len, entries);
  int sparse = range_sparse(len, entries);
  put_u32le(m, sparse ? RANGE_SPARSE : RANGE_DENSE);
  put_u32le(m + 4, 0);
  put_u64le(m + 8, sparse ? entries : len);
  o->dense = NULL;
  if (sparse) {
    o->v = m + RANGE_HEADER;
    index_writer_init(&o->w, o->v + entries * sizeof(float), len, entries);
  } else {
    o->dense = (float*)(void*)(m + RANGE_HEADER);
    memset(o->dense, 0, len * sizeof(float));
  }
}

static inline void range_put(struct range_out* o, size_t off, float x) {
  if (o->dense) {
    o->dense[off] += x; /* 0 + x, as a decode into zeros adds it */
  } else {
    put_f32(o->v, x);
    o->v += 4;
    index_writer_put(&o->w, off);
  }
}

/* The message's size. */
static size_t range_end(struct range_out* o) {
  if (o->dense) return RANGE_HEADER + o->len * sizeof(float);
  index_writer_finish(&o->w);
  return RANGE_HEADER + o->entries * sizeof(float) + o->section;
}

size_t sparse_range_write(unsigned char* m, const float* x, size_t len) {
  size_t entries = 0;
  for (size_t i = 0; i < len; i++) entries += f32_bits(x[i]) != 0;
  if (!range_sparse(len, entries)) {
    put_u32le(m, RANGE_DENSE);
    put_u32le(m + 4, 0);
    put_u64le(m + 8, len);
    memcpy(m + RANGE_HEADER, x, len * sizeof(float));
    return RANGE_HEADER + len * sizeof(float);
  }
  struct range_out o;
  range_begin(&o, m, len, entries);
  for (size_t i = 0; i < len; i++)
    if (f32_bits(x[i]) != 0) range_put(&o, i, x[i]);
  return range_end(&o);
}

static gcclResult_t range_corrupt(int from, const char* what) {
  return err_set(gcclCorruptData, "sparse-sr: range message from rank %d: %s", from, what);
}

gcclResult_t sparse_range_apply(const unsigned char* m, size_t bytes, float* dst, size_t len, int add, int from) {
  if (bytes < RANGE_HEADER) return range_corrupt(from, "shorter than its header");
  uint32_t tag = get_u32le(m);
  uint64_t entries = get_u64le(m + 8);
  const unsigned char* v = m + RANGE_HEADER;
  if (get_u32le(m + 4) != 0) return range_corrupt(from, "reserved bytes are not zero");
  if (tag == RANGE_DENSE) {
    if (entries != len || bytes - RANGE_HEADER != len * sizeof(float))
      return range_corrupt(from, "dense size does not match the range");
    if (!add) {
      memcpy(dst, v, len * sizeof(float));
    } else {
      for (size_t i = 0; i < len; i++) dst[i] += get_f32(v + 4 * i);
    }
    return gcclSuccess;
  }
  if (tag != RANGE_SPARSE) return range_corrupt(from, "unknown tag");
  size_t section = index_code_bytes(len, entries);
  if (entries > len || section == SIZE_MAX || bytes - RANGE_HEADER != entries * sizeof(float) + section ||
      entries * sizeof(float) + section >= len * sizeof(float))
    return range_corrupt(from, "sparse size does not match its entry count and range");
  const unsigned char* sec = v + entries * sizeof(float);
  if (index_code_validate(sec, section, len, entries) != gcclSuccess)
    return range_corrupt(from, "offsets are not an index section of the range");
  if (!add) memset(dst, 0, len * sizeof(float));
  struct index_reader r;
  index_reader_init(&r, sec, section, len, entries);
  uint64_t idx[256];
  for (size_t got; (got = index_reader_next(&r, idx, 256)) > 0; v += 4 * got)
    for (size_t j = 0; j < got; j++) {
      float x = get_f32(v + 4 * j);
      dst[idx[j]] = add ? dst[idx[j]] + x : x;
    }
  return gcclSuccess;
}

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
  return ctx->tp->ops->isend(ctx->tp, q, m, bytes, &w->s1[q]);
}

static unsigned char* range_dest(const struct coll_ctx* ctx, const struct sr_work* w, int q, unsigned char** next,
                                 size_t len) {
  if (q == ctx->rank) return slot_of(w, q);
  unsigned char* m = *next;
  *next += coll_align64(RANGE_HEADER + len * sizeof(float));
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
    struct range_out o;
    int q = 0;
    coll_chunk(n, p, q, &off, &len);
    range_begin(&o, range_dest(ctx, w, q, &next, len), len, w->entries[q]);
    int more = entries_next(s, &i, &v);
    for (;;) {
      while (more && i < off + len) {
        range_put(&o, i - off, v);
        more = entries_next(s, &i, &v);
      }
      if (len) res = range_send(ctx, w, q, o.m, range_end(&o), own_bytes);
      if (res != gcclSuccess || ++q == p) break;
      coll_chunk(n, p, q, &off, &len);
      range_begin(&o, range_dest(ctx, w, q, &next, len), len, w->entries[q]);
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

  /* Workspace: requests, sizes and counts; the frame; D; one message slot per
   * rank (received from it; mine holds my own range's messages); A. The
   * outgoing phase-1 messages take whichever of the frame's and D's space is
   * free: D's when the frame is read entry by entry, else the frame's. */
  size_t outgoing = 0;
  for (int q = 0; q < p; q++) {
    coll_chunk(n, p, q, &off, &len);
    if (q != me) outgoing += coll_align64(RANGE_HEADER + len * sizeof(float));
  }
  struct sr_work w;
  w.slot = coll_align64(RANGE_HEADER + max_len * sizeof(float));
  size_t reqs_bytes = coll_align64(3 * up * sizeof(tp_req)), sizes_bytes = coll_align64(2 * up * sizeof(size_t));
  size_t frame_room = coll_align64(bound) > outgoing ? coll_align64(bound) : outgoing;
  size_t d_room = coll_align64(n * sizeof(float)) > outgoing ? coll_align64(n * sizeof(float)) : outgoing;
  unsigned char* base;
  GCCL_CHECK(coll_workspace(ctx, reqs_bytes + sizes_bytes + frame_room + d_room + up * w.slot + max_len * sizeof(float),
                            (void**)&base));
  w.s1 = (tp_req*)(void*)base;
  w.s2 = w.s1 + p;
  w.rreq = w.s2 + p;
  w.got = (size_t*)(void*)(base + reqs_bytes);
  w.entries = w.got + p;
  w.frame = base + reqs_bytes + sizes_bytes;
  w.D = (float*)(void*)(w.frame + frame_room);
  w.slots = (unsigned char*)w.D + d_room;
  w.A = (float*)(void*)(w.slots + up * w.slot);
  for (int r = 0; r < p; r++) w.s1[r] = w.s2[r] = w.rreq[r] = -1;

  size_t frame_bytes, own_bytes = 0;
  struct frame_header h;
  GCCL_CHECK(coll_encode_input(a, w.frame, bound, &frame_bytes));
  GCCL_CHECK(frame_validate(w.frame, frame_bytes, n, gcclFloat32, &h));

  /* phase 1: my range from every peer; each range of my selection to its owner */
  for (int s = 0; s < p && my_len; s++)
    if (s != me)
      GCCL_CHECK(
          tp->ops->irecv_upto(tp, s, slot_of(&w, s), RANGE_HEADER + my_len * sizeof(float), &w.got[s], &w.rreq[s]));
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
    if (s != me) GCCL_CHECK(coll_wait(tp, &w.rreq[s]));
    GCCL_CHECK(sparse_range_apply(slot_of(&w, s), s == me ? own_bytes : w.got[s], A, my_len, 1, s));
  }
  if (c->spec.global)
    keep_largest(A, my_len, global_keep(c, n, my_len), c->spec.ef ? c->work + a->comp_first + my_off : NULL);

  /* phase 2: every owner's A to every rank */
  for (int s = 0; s < p; s++) {
    coll_chunk(n, p, s, &off, &len);
    if (s != me && len)
      GCCL_CHECK(tp->ops->irecv_upto(tp, s, slot_of(&w, s), RANGE_HEADER + len * sizeof(float), &w.got[s], &w.rreq[s]));
  }
  if (my_len) {
    size_t bytes = sparse_range_write(slot_of(&w, me), A, my_len);
    for (int k = 1; k < p; k++)
      GCCL_CHECK(tp->ops->isend(tp, (me + k) % p, slot_of(&w, me), bytes, &w.s2[(me + k) % p]));
  }
  /* non-fp32 outputs are built in D and rounded once: D (or the phase-1
   * messages in its space) is free once those sends are done */
  GCCL_CHECK(wait_all(tp, w.s1, p));
  float* dst = a->dt == gcclFloat32 ? a->recvbuff : w.D;
  if (my_len) memcpy(dst + my_off, A, my_len * sizeof(float));
  for (int s = 0; s < p; s++) {
    coll_chunk(n, p, s, &off, &len);
    if (s == me || len == 0) continue;
    GCCL_CHECK(coll_wait(tp, &w.rreq[s]));
    GCCL_CHECK(sparse_range_apply(slot_of(&w, s), w.got[s], dst + off, len, 0, s));
  }
  if (a->dt != gcclFloat32) f32_store(a->recvbuff, a->dt, w.D, n);
  return wait_all(tp, w.s2, p);
}
