/* codec_randk.c — random-k sparsification: k values at indices every rank derives from the shared key.
 *
 * Spec: randk:ratio=r,values=fp32|fp16|bf16,ef=0|1,seed=s.
 *
 * Frame (h->bits = h->bucket = 0, h->values = spec values, h->k = k =
 * sparse_k(ratio, n), h->rng_key = ctx->shared_key, no flags):
 *   payload = k values, values_put(vt) each (4 bytes fp32, 2 fp16/bf16), value j
 *             belonging to index idx_j; exactly k * value size bytes.
 * No indices travel: idx_j = randk_index(h->rng_key, n, k, j), the same on every
 * rank because shared_key is, so frames of different ranks line up and can be
 * summed value by value. (Random-k with error feedback: Stich et al.,
 * "Sparsified SGD with memory", NeurIPS 2018.)
 *
 * Indices (stratified sampling, so they come out strictly increasing and cover
 * the tensor evenly): stratum j < k is [lo_j, lo_{j+1}) with
 * lo_j = floor(j * n / k) (exact, 128-bit product), span = lo_{j+1} - lo_j >= 1.
 *   span <= 2^32: idx_j = lo_j + ((uint64)rng_u32(key, j) * span >> 32)
 *   span >  2^32: (n/k above four billion, so k < n / 2^32 and j < 2^32)
 *                 r = (uint64)rng_u32(key, j) << 32 | rng_u32(key, 2^64 - 1 - j),
 *                 idx_j = lo_j + ((uint128)r * span >> 64)
 * (index 2^64 - 1 - j never equals another stratum's j < k.) The multiply-shift
 * maps 32 (or 64) uniform bits onto the stratum (Lemire 2019) with a bias
 * below span / 2^32 (span / 2^64).
 *
 * Values: v_j = values_put(x[idx_j]); where x[idx_j] is an exception (non-finite,
 * or beyond the carried type: key >= topk_exc_key(vt), see topk.h) v_j = 0 is
 * sent and its raw value travels in the exceptions list. Every element of x is
 * scanned so that no exception is missed, chosen or not. Error feedback:
 * x[idx_j] -= v_j (one fp32 subtraction), 0 at every exception, other elements
 * keep x (not sent). Decoded: dst[idx_j] += v_j, skipping exception indices.
 */
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec.h"
#include "compress/codec_util.h"
#include "compress/randk.h"
#include "compress/rng.h"
#include "compress/topk.h"

/* Walks the strata in order without dividing: lo_j = j * q + floor(j * rem / k)
 * with n = q * k + rem, carrying j * rem mod k. */
struct strata {
  uint64_t key;
  size_t k, q, rem;
  size_t j, lo, carry;
};

static void strata_init(struct strata* s, uint64_t key, size_t n, size_t k) {
  memset(s, 0, sizeof *s);
  s->key = key;
  s->k = k;
  if (k) s->q = n / k, s->rem = n % k;
}

static inline size_t strata_next(struct strata* s) {
  size_t hi = s->lo + s->q, carry = s->carry + s->rem;
  if (carry >= s->k) carry -= s->k, hi++;
  size_t idx = randk_draw(s->key, s->j, s->lo, hi - s->lo);
  s->lo = hi;
  s->carry = carry;
  s->j++;
  return idx;
}

static size_t randk_payload_bound(const struct codec_spec* s, size_t n) {
  size_t bytes;
  if (__builtin_mul_overflow(sparse_k(s->ratio, n), values_size(s->values), &bytes)) return SIZE_MAX;
  return bytes;
}

/* decode draws its indices a chunk at a time, then uses them: interleaving the
 * draw's arithmetic with the scattered adds leaves too few cache misses in
 * flight (measured: 255,570 scattered adds take ~4 ms from a list, ~23 ms
 * computing each index in the loop). */
#define RANDK_CHUNK 256
/* encode scans x for exceptions a span at a time and reads the span's chosen
 * values right after, while the span is still in cache (L2-sized: 256 KiB). */
#define RANDK_SPAN 65536

static gcclResult_t randk_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                                 size_t* payload_bytes, struct frame_header* h) {
  enum spec_values vt = ctx->spec->values;
  size_t k = sparse_k(ctx->spec->ratio, n), vs = values_size(vt), exc0 = ctx->exc->n, none;
  uint32_t exc_key = topk_exc_key(vt);
  struct exc_list* exc = ctx->exc;
  struct strata s;
  strata_init(&s, ctx->shared_key, n, k);
  size_t j = 0, next = k ? strata_next(&s) : SIZE_MAX;
  unsigned char* p = payload;
  for (size_t lo = 0; lo < n; lo += RANDK_SPAN) {
    size_t len = n - lo < RANDK_SPAN ? n - lo : RANDK_SPAN, e0 = exc->n;
    /* Every exception, chosen or not (no candidates: the threshold is exc_key). */
    GCCL_CHECK(topk_filter(x + lo, len, exc_key, exc_key, 0, NULL, NULL, 0, exc, 1, &none));
    for (size_t e = e0; e < exc->n; e++) exc->idx[e] += lo;
    for (; next < lo + len; p += vs) {
      float f = x[next];
      uint32_t b;
      memcpy(&b, &f, 4);
      if ((b & 0x7FFFFFFFu) >= exc_key) {
        values_put(p, vt, 0.0f); /* its raw value travels as an exception */
      } else {
        float v = values_put(p, vt, f);
        if (resid) resid[next] = f - v;
      }
      next = ++j < k ? strata_next(&s) : SIZE_MAX;
    }
  }
  if (resid)
    for (size_t e = exc0; e < exc->n; e++) resid[exc->idx[e]] = 0.0f;

  h->bits = 0;
  h->bucket = 0;
  h->values = (uint8_t)vt;
  h->k = k;
  h->rng_key = ctx->shared_key;
  *payload_bytes = k * vs;
  return gcclSuccess;
}

static gcclResult_t randk_validate(const struct frame_header* h, const unsigned char* payload) {
  enum spec_values vt = (enum spec_values)h->values;
  size_t vs = values_size(vt);
  if (h->k > h->payload_bytes / vs || h->payload_bytes != h->k * vs)
    return err_set(gcclCorruptData, "randk: payload of %llu bytes for k=%llu values of %zu bytes",
                   (unsigned long long)h->payload_bytes, (unsigned long long)h->k, vs);
  for (uint64_t j = 0; j < h->k; j++)
    if (!f32_finite(values_get(payload + j * vs, vt)))
      return err_set(gcclCorruptData, "randk: value %llu is not finite", (unsigned long long)j);
  return gcclSuccess;
}

static gcclResult_t randk_decode_accumulate(const struct frame_header* h, const unsigned char* payload,
                                            const uint64_t* exc, size_t nexc, void* dst) {
  enum spec_values vt = (enum spec_values)h->values;
  size_t vs = values_size(vt), k = (size_t)h->k, cursor = 0, esize = dtype_size(h->dtype);
  struct strata s;
  strata_init(&s, h->rng_key, (size_t)h->count, k);
  size_t idx[RANDK_CHUNK];
  float val[RANDK_CHUNK];
  for (size_t j0 = 0; j0 < k; j0 += RANDK_CHUNK) {
    size_t m = k - j0 < RANDK_CHUNK ? k - j0 : RANDK_CHUNK;
    for (size_t j = 0; j < m; j++) idx[j] = strata_next(&s);
    topk_values_get(payload + vs * j0, vt, m, val);
    for (size_t j = 0; j < m && j < SCATTER_AHEAD; j++) scatter_prefetch(dst, esize, idx[j]);
    for (size_t j = 0; j < m; j++) {
      if (j + SCATTER_AHEAD < m) scatter_prefetch(dst, esize, idx[j + SCATTER_AHEAD]);
      size_t i = idx[j];
      while (cursor < nexc && exc[cursor] < i) cursor++;
      if (cursor < nexc && exc[cursor] == i) continue; /* the exception's raw value replaces it */
      if (h->dtype == gcclFloat32)
        ((float*)dst)[i] += val[j];
      else
        elem_accumulate(dst, h->dtype, i, val[j]);
    }
  }
  return gcclSuccess;
}

const struct codec_ops codec_randk_ops = {
    .payload_bound = randk_payload_bound,
    .state_create = NULL,
    .state_destroy = NULL,
    .encode = randk_encode,
    .validate = randk_validate,
    .decode_accumulate = randk_decode_accumulate,
};
