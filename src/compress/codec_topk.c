/* codec_topk.c — top-k sparsification: the k largest |x| (exact, or DGC's sampled threshold) as values + indices.
 *
 * Spec: topk:ratio=r,approx=0|1,values=fp32|fp16|bf16,zstd=0|1,ef=0|1 (ef on by default).
 *
 * Frame (h->bits = h->bucket = h->rng_key = 0, h->values = spec values,
 * h->k = K = number of elements kept):
 *   payload = [K values, values_put(vt) each: 4 bytes fp32, 2 bytes fp16/bf16,
 *              in increasing index order]
 *             [index section: the K indices, Elias-Fano coded (index_code.c),
 *              index_code_bytes(count, K) bytes; or, with FRAME_FLAG_ZSTD, one
 *              zstd frame of those bytes (level 1, content size recorded, strictly
 *              smaller than the plain section)]
 * Decoded: dst[idx_j] += values_get(value_j) at each kept index; nothing elsewhere.
 *
 * Which elements are kept (K of them; exceptions never) is topk_select.c's
 * part: the rule, the sample, the candidate filter and the radix selects.
 * Per kept i: v = values_put(x[i]) (the value the decoder reads); with error
 * feedback x[i] -= v (one fp32 subtraction; 0 for fp32 values). Residual 0 at
 * exceptions; every other x[i] stays as it is (it was not sent).
 *
 * Measured on this machine (one core; 25,557,032 normal floats, ratio 0.01,
 * k = 255,570; medians of 21 runs in a quiet moment, when a 102 MB memcpy
 * took ~14.5 ms and a plain four-stream read ~5.3 ms): exact encode ~8.4 ms
 * (sample 0.1, thresholds 0.1, filter pass 6.5, band select 0.35, writing
 * 1.3), approx ~7.6 ms, ef=1 adds ~2.5 ms (scattered residual stores);
 * decode_accumulate into fp32 ~5.4 ms (scattered adds). Payload: 5.07 bytes
 * per kept element (4 value + 1.07 index), 78.9x smaller than the fp32 tensor
 * (130x with values=fp16). zstd=1 (index section only): on that random index
 * set 1.068 -> 1.066 bytes per index (sent compressed, 0.04% smaller); on a
 * layered tensor (200 layers of random length, scales log-uniform over 100x)
 * 1.068 -> 0.868 at 1% (ratio 78.9x -> 82.2x) and 1.494 -> 1.270 at 0.1%.
 */
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/float_bits.h"
#include "common/result.h"
#include "compress/codec.h"
#include "compress/codec_util.h"
#include "compress/index_code.h"
#include "compress/topk.h"
#include "compress/topk_select.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "common/cpu.h"
#define TOPK_X86 1
#endif
#ifdef GCCL_HAVE_ZSTD
#include <zstd.h>
#include <zstd_errors.h>
#endif

/* The compressor's scratch: the selection's, and zstd's for the index section. */
struct topk_state {
  struct topk_scratch scratch;
  unsigned char* zbuf; /* zstd output */
  size_t zbuf_bytes;
#ifdef GCCL_HAVE_ZSTD
  ZSTD_CCtx* cctx;
#endif
};

/* ---- values, eight at a time ------------------------------------------------------ */

#ifdef TOPK_X86
/* F16C converts with round-to-nearest-even, subnormals included: float_to_half
 * exactly for finite inputs below 65520 (and half_to_float for non-NaN halves;
 * values_get's NaN handling is irrelevant: validate rejects NaN values). */
__attribute__((target("avx2,f16c"))) static size_t put_half_f16c(unsigned char* p, const uint32_t* bits, size_t m,
                                                                 float* decoded) {
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    __m256 f = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i*)(const void*)(bits + j)));
    __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i*)(void*)(p + 2 * j), h);
    _mm256_storeu_ps(decoded + j, _mm256_cvtph_ps(h));
  }
  return j;
}

__attribute__((target("avx2,f16c"))) static size_t get_half_f16c(const unsigned char* p, size_t m, float* out) {
  size_t j = 0;
  for (; j + 8 <= m; j += 8)
    _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(const void*)(p + 2 * j))));
  return j;
}

static int have_f16c(void) {
  return __builtin_cpu_supports("avx2") && cpu_has_f16c();
}
#endif

void topk_values_put(unsigned char* p, enum spec_values vt, const uint32_t* bits, size_t m, float* decoded) {
  size_t j = 0;
  if (vt == SPEC_VALUES_FP32) { /* the bits themselves */
    memcpy(p, bits, 4 * m);
    memcpy(decoded, bits, 4 * m);
    return;
  }
#ifdef TOPK_X86
  if (vt == SPEC_VALUES_FP16 && have_f16c()) j = put_half_f16c(p, bits, m, decoded);
#endif
  for (; j < m; j++) decoded[j] = values_put(p + 2 * j, vt, fb_float(bits[j]));
}

void topk_values_get(const unsigned char* p, enum spec_values vt, size_t m, float* out) {
  size_t j = 0;
  if (vt == SPEC_VALUES_FP32) {
    memcpy(out, p, 4 * m);
    return;
  }
#ifdef TOPK_X86
  if (vt == SPEC_VALUES_FP16 && have_f16c()) j = get_half_f16c(p, m, out);
#endif
  for (; j < m; j++) out[j] = values_get(p + 2 * j, vt);
}

/* ---- encode ----------------------------------------------------------------------- */

struct emitter {
  unsigned char* vals;
  enum spec_values vt;
  size_t vs;
  struct index_writer w;
  float* resid;
};

/* Writes m kept elements (indices increasing, raw bits): values, residual,
 * index section. */
static void emit(struct emitter* e, const uint64_t* idx, const uint32_t* bits, size_t m) {
  float v[256];
  for (size_t j0 = 0; j0 < m; j0 += 256) {
    size_t c = m - j0 < 256 ? m - j0 : 256;
    topk_values_put(e->vals, e->vt, bits + j0, c, v);
    e->vals += e->vs * c;
    if (e->resid)
      for (size_t j = 0; j < c; j++) e->resid[idx[j0 + j]] = fb_float(bits[j0 + j]) - v[j];
  }
  index_writer_put_many(&e->w, idx, m);
}

/* Writes the kept elements: keys > T, then the first need_eq with key == T, in
 * index order; picked without branches (keep-or-not is a coin flip in the band)
 * from the candidates, compacted in place, or from x through a small buffer. */
static void emit_selection(struct topk_scratch* sc, const float* x, size_t n, uint32_t exc_key,
                           const struct topk_selection* sel, struct emitter* e) {
  size_t need_eq = sel->need_eq;
  const uint32_t T = sel->T;
  if (sel->kept == 0) return;
  if (!sel->from_candidates) {
    uint64_t idx[256];
    uint32_t bits[256];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
      uint32_t b = fb_bits(x[i]), key = b & TOPK_KEY_MASK;
      size_t eq = (key == T) & (need_eq > 0); /* T < exc_key */
      need_eq -= eq;
      idx[m] = i;
      bits[m] = b;
      m += ((key > T) & (key < exc_key)) | eq;
      if (m == 256) {
        emit(e, idx, bits, m);
        m = 0;
      }
    }
    emit(e, idx, bits, m);
    return;
  }
  uint64_t* idx = sc->cand_idx;
  uint32_t* bits = sc->cand_bits;
  size_t kept = sel->c;
  if (sel->kept < sel->c) {
    kept = 0;
    for (size_t j = 0; j < sel->c; j++) {
      uint32_t key = bits[j] & TOPK_KEY_MASK;
      size_t eq = (key == T) & (need_eq > 0);
      need_eq -= eq;
      idx[kept] = idx[j];
      bits[kept] = bits[j];
      kept += (key > T) | eq;
    }
  }
  emit(e, idx, bits, kept);
}

/* Replaces the plain index section by its zstd frame when that is smaller. */
static gcclResult_t maybe_zstd(struct topk_state* st, unsigned char* sec, size_t* sec_bytes, struct frame_header* h) {
#ifdef GCCL_HAVE_ZSTD
  if (*sec_bytes < 2) return gcclSuccess;
  size_t room = *sec_bytes - 1 < st->zbuf_bytes ? *sec_bytes - 1 : st->zbuf_bytes;
  size_t z = ZSTD_compressCCtx(st->cctx, st->zbuf, room, sec, *sec_bytes, 1);
  if (ZSTD_isError(z)) {
    if (ZSTD_getErrorCode(z) == ZSTD_error_dstSize_tooSmall) return gcclSuccess; /* not smaller: send plain */
    return err_set(gcclInternalError, "topk: zstd compression failed: %s", ZSTD_getErrorName(z));
  }
  memcpy(sec, st->zbuf, z);
  *sec_bytes = z;
  h->flags |= FRAME_FLAG_ZSTD;
  return gcclSuccess;
#else
  (void)st, (void)sec, (void)sec_bytes, (void)h;
  return err_set(gcclInvalidArgument, "topk: zstd=1 but gccl was built without zstd");
#endif
}

static gcclResult_t topk_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                                size_t* payload_bytes, struct frame_header* h) {
  const struct codec_spec* s = ctx->spec;
  struct topk_state* st = ctx->state;
#ifndef GCCL_HAVE_ZSTD
  if (s->zstd) return err_set(gcclInvalidArgument, "topk: zstd=1 but gccl was built without zstd");
#endif
  if (st == NULL || n > st->scratch.n)
    return err_set(gcclInternalError, "topk: encode of %zu elements with scratch for %zu", n, st ? st->scratch.n : 0);
  size_t k = sparse_k(s->ratio, n);
  uint32_t exc_key = topk_exc_key(s->values);
  size_t exc0 = ctx->exc->n;

  struct topk_selection sel;
  GCCL_CHECK(topk_select(&st->scratch, s, x, n, k, exc_key, ctx->exc, &sel));

  struct emitter e = {payload, s->values, values_size(s->values), {0}, resid};
  unsigned char* sec = payload + sel.kept * e.vs;
  size_t sec_bytes = index_code_bytes(n, sel.kept);
  index_writer_init(&e.w, sec, n, sel.kept);
  emit_selection(&st->scratch, x, n, exc_key, &sel, &e);
  index_writer_finish(&e.w);
  if (e.w.i != sel.kept)
    return err_set(gcclInternalError, "topk: emitted %llu of %zu elements", (unsigned long long)e.w.i, sel.kept);
  if (resid)
    for (size_t j = exc0; j < ctx->exc->n; j++) resid[ctx->exc->idx[j]] = 0.0f;

  h->bits = 0;
  h->bucket = 0;
  h->rng_key = 0;
  h->values = (uint8_t)s->values;
  h->k = sel.kept;
  h->flags &= (uint8_t)~FRAME_FLAG_ZSTD;
  if (s->zstd) GCCL_CHECK(maybe_zstd(st, sec, &sec_bytes, h));
  *payload_bytes = sel.kept * e.vs + sec_bytes;
  return gcclSuccess;
}

/* ---- decode ----------------------------------------------------------------------- */

struct topk_view {
  const unsigned char* vals;
  size_t vs;
  const unsigned char* sec;
  size_t sec_bytes;
  size_t plain_bytes; /* of the index section before zstd */
};

static gcclResult_t topk_view(const struct frame_header* h, const unsigned char* payload, struct topk_view* v) {
  v->vs = values_size((enum spec_values)h->values);
  if (h->k > h->payload_bytes / v->vs)
    return err_set(gcclCorruptData, "topk: %llu values do not fit %llu payload bytes", (unsigned long long)h->k,
                   (unsigned long long)h->payload_bytes);
  size_t vals_bytes = (size_t)h->k * v->vs;
  v->vals = payload;
  v->sec = payload + vals_bytes;
  v->sec_bytes = (size_t)h->payload_bytes - vals_bytes;
  v->plain_bytes = index_code_bytes(h->count, h->k);
  if (v->plain_bytes == SIZE_MAX)
    return err_set(gcclCorruptData, "topk: no index section for k=%llu of %llu", (unsigned long long)h->k,
                   (unsigned long long)h->count);
  return gcclSuccess;
}

/* The plain index section of a zstd frame, in a new buffer the caller frees. */
static gcclResult_t inflate_section(const struct topk_view* v, unsigned char** out) {
#ifdef GCCL_HAVE_ZSTD
  if (v->sec_bytes >= v->plain_bytes)
    return err_set(gcclCorruptData, "topk: zstd index section of %zu bytes is not smaller than its %zu plain bytes",
                   v->sec_bytes, v->plain_bytes);
  unsigned long long content = ZSTD_getFrameContentSize(v->sec, v->sec_bytes);
  if (content != (unsigned long long)v->plain_bytes)
    return err_set(gcclCorruptData, "topk: zstd index section declares %llu bytes, expected %zu", content,
                   v->plain_bytes);
  size_t frame = ZSTD_findFrameCompressedSize(v->sec, v->sec_bytes);
  if (ZSTD_isError(frame) || frame != v->sec_bytes)
    return err_set(gcclCorruptData, "topk: zstd index section is not exactly one zstd frame");
  unsigned char* buf = malloc(v->plain_bytes);
  if (buf == NULL) return err_set(gcclSystemError, "topk: out of memory for a %zu-byte index section", v->plain_bytes);
  size_t got = ZSTD_decompress(buf, v->plain_bytes, v->sec, v->sec_bytes);
  if (ZSTD_isError(got) || got != v->plain_bytes) {
    free(buf);
    return err_set(gcclCorruptData, "topk: zstd index section does not decompress to %zu bytes", v->plain_bytes);
  }
  *out = buf;
  return gcclSuccess;
#else
  (void)v, (void)out;
  return err_set(gcclInvalidUsage, "topk: frame has zstd-compressed indices but gccl was built without zstd");
#endif
}

static gcclResult_t topk_validate(const struct frame_header* h, const unsigned char* payload) {
  struct topk_view v = {0};
  GCCL_CHECK(topk_view(h, payload, &v));
  for (uint64_t j = 0; j < h->k; j++)
    if (!f32_finite(values_get(v.vals + j * v.vs, (enum spec_values)h->values)))
      return err_set(gcclCorruptData, "topk: value %llu is not finite", (unsigned long long)j);
  if (!(h->flags & FRAME_FLAG_ZSTD)) return index_code_validate(v.sec, v.sec_bytes, h->count, h->k);
  unsigned char* plain = NULL;
  GCCL_CHECK(inflate_section(&v, &plain));
  gcclResult_t res = index_code_validate(plain, v.plain_bytes, h->count, h->k);
  free(plain);
  return res;
}

static gcclResult_t topk_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                           const uint64_t* exc, size_t nexc, void* dst) {
  struct topk_view v = {0};
  GCCL_CHECK(topk_view(h, payload, &v));
  unsigned char* plain = NULL;
  const unsigned char* sec = v.sec;
  if (h->flags & FRAME_FLAG_ZSTD) {
    GCCL_CHECK(inflate_section(&v, &plain));
    sec = plain;
  }
  struct index_reader r;
  index_reader_init(&r, sec, plain ? v.plain_bytes : v.sec_bytes, h->count, h->k);
  enum spec_values vt = (enum spec_values)h->values;
  size_t cursor = 0, done = 0, esize = dtype_size(h->dtype);
  uint64_t idx[256];
  size_t got;
  float val[256];
  while ((got = index_reader_next(&r, idx, 256)) > 0) {
    topk_values_get(v.vals + v.vs * done, vt, got, val);
    done += got;
    for (size_t j = 0; j < got && j < SCATTER_AHEAD; j++) scatter_prefetch(dst, esize, idx[j]);
    for (size_t j = 0; j < got; j++) {
      if (j + SCATTER_AHEAD < got) scatter_prefetch(dst, esize, idx[j + SCATTER_AHEAD]);
      while (cursor < nexc && exc[cursor] < idx[j]) cursor++;
      if (cursor < nexc && exc[cursor] == idx[j]) continue; /* the exception's raw value replaces it */
      if (h->dtype == gcclFloat32)
        ((float*)dst)[idx[j]] += val[j];
      else
        elem_accumulate(dst, h->dtype, (size_t)idx[j], val[j]);
    }
  }
  free(plain);
  return gcclSuccess;
}

gcclResult_t topk_reader_init(struct topk_reader* rd, const struct frame_header* h, const unsigned char* payload) {
  struct topk_view v = {0};
  memset(rd, 0, sizeof *rd);
  GCCL_CHECK(topk_view(h, payload, &v));
  if (h->flags & FRAME_FLAG_ZSTD) GCCL_CHECK(inflate_section(&v, &rd->plain));
  index_reader_init(&rd->r, rd->plain ? rd->plain : v.sec, rd->plain ? v.plain_bytes : v.sec_bytes, h->count, h->k);
  rd->vals = v.vals;
  rd->vs = v.vs;
  rd->vt = (enum spec_values)h->values;
  return gcclSuccess;
}

size_t topk_reader_next(struct topk_reader* rd, uint64_t* idx, float* val, size_t max) {
  size_t got = index_reader_next(&rd->r, idx, max);
  topk_values_get(rd->vals + rd->vs * rd->done, rd->vt, got, val);
  rd->done += got;
  return got;
}

void topk_reader_free(struct topk_reader* rd) {
  free(rd->plain);
  rd->plain = NULL;
}

/* ---- sizes and scratch ------------------------------------------------------------- */

static size_t topk_payload_bound(const struct codec_spec* s, size_t n) {
  size_t k = sparse_k(s->ratio, n), vals, index = index_code_bound(n, k);
  if (__builtin_mul_overflow(k, values_size(s->values), &vals) || index == SIZE_MAX || vals > SIZE_MAX - index)
    return SIZE_MAX;
  return vals + index;
}

static void topk_state_destroy(void* state) {
  struct topk_state* st = state;
  if (st == NULL) return;
  topk_scratch_free(&st->scratch);
  free(st->zbuf);
#ifdef GCCL_HAVE_ZSTD
  ZSTD_freeCCtx(st->cctx);
#endif
  free(st);
}

static gcclResult_t topk_state_create(const struct codec_spec* s, size_t n, void** state) {
#ifndef GCCL_HAVE_ZSTD
  if (s->zstd) return err_set(gcclInvalidArgument, "topk: zstd=1 but gccl was built without zstd");
#endif
  struct topk_state* st = calloc(1, sizeof *st);
  if (st == NULL) return err_set(gcclSystemError, "topk: out of memory for its state");
  size_t k = sparse_k(s->ratio, n);
  int ok = topk_scratch_init(&st->scratch, n, k);
#ifdef GCCL_HAVE_ZSTD
  if (ok && s->zstd) {
    st->zbuf_bytes = index_code_bound(n, k);
    st->zbuf = malloc(st->zbuf_bytes ? st->zbuf_bytes : 1);
    st->cctx = ZSTD_createCCtx();
    ok = st->zbuf && st->cctx;
  }
#endif
  if (!ok) {
    topk_state_destroy(st);
    return err_set(gcclSystemError, "topk: out of memory for scratch of %zu elements", n);
  }
  *state = st;
  return gcclSuccess;
}

const struct codec_ops codec_topk_ops = {
    .payload_bound = topk_payload_bound,
    .state_create = topk_state_create,
    .state_destroy = topk_state_destroy,
    .encode = topk_encode,
    .validate = topk_validate,
    .decode_accumulate = topk_decode_accumulate,
};
