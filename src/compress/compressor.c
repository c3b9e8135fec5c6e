/* compressor.c — a compressor's life: made for one tensor shape, it drives its
 * codec (builds the fp32 input with error feedback, appends the exceptions list,
 * seals the frame), stages the new residual and commits or forgets it, and is
 * freed with its GPU twin. */
#include "compress/compressor.h"

#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "common/copy.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/result.h"
#include "compress/codec_util.h"
#include "compress/crc32c.h"
#include "compress/rng.h"

const struct codec_ops* codec_ops_for(enum codec_id c) {
  switch (c) {
    case CODEC_NONE:
      return &codec_none_ops;
    case CODEC_FP16:
    case CODEC_BF16:
      return &codec_half_ops;
    case CODEC_UNIFORM:
      return &codec_uniform_ops;
    case CODEC_QSGD:
      return &codec_qsgd_ops;
    case CODEC_SIGN:
      return &codec_sign_ops;
    case CODEC_TERNGRAD:
      return &codec_terngrad_ops;
    case CODEC_TOPK:
      return &codec_topk_ops;
    case CODEC_RANDK:
      return &codec_randk_ops;
    case CODEC_POWERSGD:
      return &codec_powersgd_ops;
    default:
      return NULL;
  }
}

float* compressor_carried(const struct gcclCompressor* c, size_t* n) {
  *n = 0;
  return c->ops->state_carried && c->state ? c->ops->state_carried(c->state, n) : NULL;
}

size_t compressor_bound(const struct gcclCompressor* c, size_t n) {
  /* A frame whose payload plus exceptions would outgrow the raw tensor is sent
   * raw instead (FRAME_FLAG_RAW), so this bound holds however many non-finite
   * values the input has. Sizes were overflow-checked at create. */
  size_t raw = n * dtype_size(c->dt);
  size_t payload = c->spec.codec == CODEC_NONE ? raw : c->ops->payload_bound(&c->spec, n);
  return FRAME_HEADER_BYTES + (payload > raw ? payload : raw);
}

size_t compressor_bound_nonfinite(const struct gcclCompressor* c, size_t n, size_t nonfinite) {
  /* A frame is the payload plus one exception per non-finite value, unless that
   * outgrows compressor_bound, where the tensor goes raw: smaller still. */
  size_t bound = compressor_bound(c, n);
  if (c->spec.codec == CODEC_NONE) return bound;
  size_t frame = FRAME_HEADER_BYTES + c->ops->payload_bound(&c->spec, n), entry = frame_exception_bytes(c->dt);
  if (nonfinite > (bound - frame) / entry) return bound;
  return frame + nonfinite * entry;
}

/* ---- creation and destruction ------------------------------------------------ */

gcclResult_t compressor_create(struct gcclCompressor** out, const struct codec_spec* spec, size_t count,
                               gcclDataType_t dt) {
  *out = NULL;
  struct gcclCompressor* c = calloc(1, sizeof *c);
  /* gcclCompressorCreate's message: users meet this failure through it. */
  if (c == NULL) return err_set(gcclSystemError, "gcclCompressorCreate: out of memory");
  gcclResult_t res;
  c->spec = *spec;
  c->ops = codec_ops_for(spec->codec);
  c->count = count;
  c->dt = dt;
  GCCL_CHECK_GOTO(spec_format(&c->spec, c->spec_text, sizeof c->spec_text), res, fail);
  /* work holds the fp32 input of the codec (and the staged residual) unless the
   * caller's fp32 buffer can be read directly. */
  if (spec->ef || (spec->codec != CODEC_NONE && dt != gcclFloat32))
    GCCL_CHECK_GOTO(arena_alloc((void**)&c->work, count * sizeof(float)), res, fail);
  if (spec->ef) GCCL_CHECK_GOTO(arena_alloc((void**)&c->residual, count * sizeof(float)), res, fail);
  if (c->ops->state_create) GCCL_CHECK_GOTO(c->ops->state_create(&c->spec, count, &c->state), res, fail);
  c->bound = compressor_bound(c, count);
  GCCL_INFO(LOG_INIT, "compressor %s for %zu %s: frames of at most %zu bytes", c->spec_text, count, dtype_name(dt),
            c->bound);
  *out = c;
  return gcclSuccess;
fail:
  compressor_destroy(c);
  return res;
}

void compressor_release(struct gcclCompressor* c) {
  if (c->device) c->twin_ops->destroy(c->device);
  c->device = NULL;
  if (c->state) c->ops->state_destroy(c->state);
  arena_free(c->work, c->count * sizeof(float));
  arena_free(c->residual, c->count * sizeof(float));
  arena_free(c->tmp, c->count * sizeof(float));
  free(c->exc.idx);
}

void compressor_destroy(struct gcclCompressor* c) {
  if (c == NULL) return;
  compressor_release(c);
  free(c);
}

/* ---- the residual, in the tensor's dtype ------------------------------------- */

void compressor_get_residual(const struct gcclCompressor* c, void* out) {
  if (!c->spec.ef) { /* no error feedback: the residual is zero */
    if (c->count) memset(out, 0, c->count * dtype_size(c->dt));
    return;
  }
  for (size_t i = 0; i < c->count; i++) {
    float r = c->residual[i];
    switch (c->dt) {
      case gcclFloat32:
        ((float*)out)[i] = r;
        break;
      case gcclFloat64:
        ((double*)out)[i] = r;
        break;
      case gcclFloat16:
        ((uint16_t*)out)[i] = float_to_half(r);
        break;
      default:
        ((uint16_t*)out)[i] = float_to_bf16(r);
        break;
    }
  }
}

size_t compressor_set_residual(struct gcclCompressor* c, const void* in) {
  /* Converted into work first, so a rejected input changes nothing. */
  for (size_t i = 0; i < c->count; i++) {
    float r;
    switch (c->dt) {
      case gcclFloat32:
        r = ((const float*)in)[i];
        break;
      case gcclFloat64:
        r = (float)((const double*)in)[i];
        break;
      case gcclFloat16:
        r = half_to_float(((const uint16_t*)in)[i]);
        break;
      default:
        r = bf16_to_float(((const uint16_t*)in)[i]);
        break;
    }
    if (!f32_finite(r)) return i;
    c->work[i] = r;
  }
  if (c->count) memcpy(c->residual, c->work, c->count * sizeof(float));
  return c->count;
}

/* ---- encoding ---------------------------------------------------------------- */

/* x[i] = float(src[i]) (+ residual[i]): the codec's input. */
static void build_input(float* x, const void* src, const float* residual, size_t n, gcclDataType_t dt) {
  if (dt == gcclFloat32 && residual) { /* one pass: this runs on every element a collective sends */
    add_stream_f32(x, src, residual, n);
    copy_stream_fence(); /* before another thread may read the staged residual */
    return;
  }
  f32_load(x, src, dt, n);
  if (residual)
    for (size_t i = 0; i < n; i++) x[i] += residual[i];
}

/* The frame's tail: the exceptions list (index, raw value of the input at that
 * index, in the frame's dtype), then CRC and header. src is the tensor part the
 * frame encodes, of src_dt; the frame's dtype is h->dtype. */
static gcclResult_t seal_frame(struct gcclCompressor* c, void* frame, size_t cap, struct frame_header* h,
                               const struct encode_ctx* ctx, const void* src, gcclDataType_t src_dt,
                               size_t* frame_bytes) {
  unsigned char* payload = (unsigned char*)frame + FRAME_HEADER_BYTES;
  size_t entry = frame_exception_bytes(h->dtype), es = dtype_size(src_dt), pb = h->payload_bytes;
  unsigned char* e = payload + pb;
  const unsigned char* s = src;
  for (size_t j = 0; j < c->exc.n; j++, e += entry) {
    size_t i = c->exc.idx[j];
    put_u64le(e, i);
    if (h->dtype == src_dt) {
      memcpy(e + 8, s + i * es, es);
    } else {
      float v;
      f32_load(&v, s + i * es, src_dt, 1);
      put_f32(e + 8, v);
    }
  }
  uint32_t crc = ctx->payload_crc_valid ? ctx->payload_crc : crc32c(0, payload, pb);
  crc = crc32c(crc, payload + pb, c->exc.n * entry);
  GCCL_CHECK(frame_header_write_crc(frame, cap, h, crc));
  return frame_total_bytes(h, frame_bytes);
}

/* The random keys of one encode: per call, rank, part and stage. */
static void encode_keys(const struct gcclCompressor* c, size_t first, uint32_t stage, uint64_t* key, uint64_t* shared) {
  *key = rng_key(c->spec.seed, c->calls, c->rank);
  *shared = rng_key(c->spec.seed, c->calls, RNG_SHARED);
  if (first != 0) *key = rng_mix64(*key ^ first), *shared = rng_mix64(*shared ^ first);
  if (stage != 0) *key = rng_mix64(*key ^ ((uint64_t)stage << 48));
}

/* Raw fallback: the tensor verbatim. With error feedback nothing of the residual
 * was sent, so it carries over, except where the input is not finite. */
static void encode_raw(struct gcclCompressor* c, const void* src, size_t first, size_t n, unsigned char* payload,
                       struct frame_header* h) {
  size_t es = dtype_size(c->dt);
  if (n) memcpy(payload, src, n * es); /* src may be NULL when n is 0 */
  h->flags = FRAME_FLAG_RAW;
  h->payload_bytes = n * es;
  h->exceptions = 0;
  if (c->spec.ef) {
    float* staged = c->work + first;
    const float* old = c->residual + first;
    build_input(staged, src, old, n, c->dt); /* x again: the codec overwrote it */
    for (size_t i = 0; i < n; i++) staged[i] = f32_finite(staged[i]) ? old[i] : 0.0f;
  }
}

gcclResult_t compressor_encode_part(struct gcclCompressor* c, const void* src, size_t first, size_t n, void* frame,
                                    size_t cap, size_t* frame_bytes) {
  if (first > c->count || n > c->count - first)
    return err_set(gcclInternalError, "encode of elements [%zu, %zu+%zu) outside a tensor of %zu", first, first, n,
                   c->count);
  size_t bound = compressor_bound(c, n);
  if (cap < bound)
    return err_set(gcclInvalidArgument, "frame buffer of %zu bytes is smaller than the %zu that gcclEncodeBound gives",
                   cap, bound);
  size_t es = dtype_size(c->dt);
  unsigned char* f = frame;
  unsigned char* payload = f + FRAME_HEADER_BYTES;
  struct frame_header h = {.codec = c->spec.codec, .dtype = c->dt, .count = n};

  if (c->spec.codec == CODEC_NONE) {
    if (n) memcpy(payload, src, n * es); /* src may be NULL when n is 0 */
    h.payload_bytes = n * es;
  } else {
    int ef = c->spec.ef;
    float* x = c->work ? c->work + first : (float*)(uintptr_t)src; /* work exists unless dt is fp32 and ef off */
    struct encode_ctx ctx = {.spec = &c->spec, .exc = &c->exc, .state = c->state};
    if (c->work && ef && c->dt == gcclFloat32 && c->ops->fills_input) { /* built bucket by bucket, in cache */
      ctx.fill_dst = x;
      ctx.fill_a = src;
      ctx.fill_b = c->residual + first;
    } else if (c->work) {
      build_input(x, src, ef ? c->residual + first : NULL, n, c->dt);
    }
    encode_keys(c, first, 0, &ctx.key, &ctx.shared_key);
    c->exc.n = 0;
    size_t pb = 0;
    GCCL_CHECK(c->ops->encode(&ctx, x, ef ? x : NULL, n, payload, &pb, &h));
    h.payload_bytes = pb;
    h.exceptions = c->exc.n;
    if (ef) c->staged += n;
    if (c->exc.n <= (bound - FRAME_HEADER_BYTES - pb) / frame_exception_bytes(c->dt))
      return seal_frame(c, frame, cap, &h, &ctx, src, c->dt, frame_bytes);
    encode_raw(c, src, first, n, payload, &h);
  }
  GCCL_CHECK(frame_header_write(frame, cap, &h));
  return frame_total_bytes(&h, frame_bytes);
}

gcclResult_t compressor_encode(struct gcclCompressor* c, const void* src, void* frame, size_t cap,
                               size_t* frame_bytes) {
  size_t fb = 0;
  gcclResult_t res = compressor_encode_part(c, src, 0, c->count, frame, cap, &fb);
  if (res == gcclSuccess) res = compressor_commit(c);
  if (res != gcclSuccess) {
    compressor_abort(c);
    return res;
  }
  *frame_bytes = fb;
  return gcclSuccess;
}

/* ---- for the compressed collectives ------------------------------------------ */

size_t compressor_bound_f32(const struct gcclCompressor* c, size_t n) {
  size_t raw = n * sizeof(float);
  size_t payload = c->spec.codec == CODEC_NONE ? raw : c->ops->payload_bound(&c->spec, n);
  return FRAME_HEADER_BYTES + (payload > raw ? payload : raw);
}

static gcclResult_t check_range(const struct gcclCompressor* c, size_t first, size_t n) {
  if (first > c->count || n > c->count - first)
    return err_set(gcclInternalError, "elements [%zu, %zu+%zu) outside a tensor of %zu", first, first, n, c->count);
  return gcclSuccess;
}

static gcclResult_t ensure_tmp(struct gcclCompressor* c) {
  if (c->tmp || c->count == 0) return gcclSuccess;
  return arena_alloc((void**)&c->tmp, c->count * sizeof(float));
}

gcclResult_t compressor_encode_f32(struct gcclCompressor* c, const void* src, gcclDataType_t src_dt, size_t first,
                                   size_t n, enum ef_mode mode, uint32_t stage, void* frame, size_t cap,
                                   size_t* frame_bytes) {
  GCCL_CHECK(check_range(c, first, n));
  size_t bound = compressor_bound_f32(c, n);
  if (cap < bound) return err_set(gcclInternalError, "frame buffer of %zu bytes below the bound %zu", cap, bound);
  if (!c->spec.ef) mode = EF_OFF;
  unsigned char* payload = (unsigned char*)frame + FRAME_HEADER_BYTES;
  struct frame_header h = {.codec = c->spec.codec, .dtype = gcclFloat32, .count = n};

  /* x: the codec's input, written over with x - decoded(x) when there is a
   * residual to stage. EF_ADD builds it in the staging area itself. */
  const float* x = src;
  float* resid = NULL;
  struct encode_ctx ctx = {.spec = &c->spec, .exc = &c->exc, .state = c->state};
  if (mode == EF_ADD) {
    float* w = c->work + first;
    const float* old = c->residual + first;
    if (src_dt == gcclFloat32 && c->ops->fills_input) { /* built bucket by bucket, in cache */
      ctx.fill_dst = w;
      ctx.fill_a = src;
      ctx.fill_b = old;
    } else {
      build_input(w, src, old, n, src_dt);
    }
    x = resid = w;
  } else if (mode == EF_RESTAGE || src_dt != gcclFloat32 || c->spec.codec == CODEC_NONE) {
    GCCL_CHECK(ensure_tmp(c));
    float* t = c->tmp + first;
    if (src_dt == gcclFloat32 && c->ops->fills_input) { /* an owner's sum: copied bucket by bucket */
      ctx.fill_dst = t;
      ctx.fill_a = src;
    } else {
      f32_load(t, src, src_dt, n);
    }
    x = t;
    if (mode == EF_RESTAGE) resid = t;
  }
  if (c->spec.codec == CODEC_NONE) {
    if (n) memcpy(payload, x, n * sizeof(float));
    h.payload_bytes = n * sizeof(float);
    GCCL_CHECK(frame_header_write(frame, cap, &h));
    return frame_total_bytes(&h, frame_bytes);
  }
  encode_keys(c, first, stage, &ctx.key, &ctx.shared_key);
  c->exc.n = 0;
  size_t pb = 0;
  GCCL_CHECK(c->ops->encode(&ctx, x, resid, n, payload, &pb, &h));
  h.payload_bytes = pb;
  h.exceptions = c->exc.n;
  if (mode == EF_ADD) c->staged += n;
  if (c->exc.n <= (bound - FRAME_HEADER_BYTES - pb) / frame_exception_bytes(gcclFloat32)) {
    if (mode == EF_RESTAGE)
      for (size_t i = 0; i < n; i++) c->work[first + i] += resid[i];
    return seal_frame(c, frame, cap, &h, &ctx, src, src_dt, frame_bytes);
  }
  /* Raw fallback: float(src) verbatim; nothing is lost, so EF_ADD stages the old
   * residual (0 where the input is not finite) and EF_RESTAGE adds nothing. */
  f32_load((float*)(void*)payload, src, src_dt, n); /* payload is 64 bytes into the frame: aligned as frame is */
  h.flags = FRAME_FLAG_RAW;
  h.payload_bytes = n * sizeof(float);
  h.exceptions = 0;
  if (mode == EF_ADD) {
    float* w = c->work + first;
    const float* old = c->residual + first;
    const float* in = (const float*)(const void*)payload;
    for (size_t i = 0; i < n; i++) w[i] = f32_finite(in[i] + old[i]) ? old[i] : 0.0f;
  }
  GCCL_CHECK(frame_header_write(frame, cap, &h));
  return frame_total_bytes(&h, frame_bytes);
}

gcclResult_t compressor_accumulate_exact(struct gcclCompressor* c, const void* src, gcclDataType_t src_dt, size_t first,
                                         size_t n, float* acc, int store) {
  GCCL_CHECK(check_range(c, first, n));
  /* fp32, the collectives' case: one pass, the same adds as the general case
   * below (from +0.0f when storing) */
  if (src_dt == gcclFloat32 && c->spec.ef) {
    const float* s = src;
    const float* old = c->residual + first;
    float* staged = c->work + first;
    for (size_t i = 0; i < n; i++) {
      acc[i] = ((store ? 0.0f : acc[i]) + s[i]) + old[i];
      staged[i] = 0.0f;
    }
    c->staged += n;
    return gcclSuccess;
  }
  if (src_dt == gcclFloat32) {
    const float* s = src;
    for (size_t i = 0; i < n; i++) acc[i] = (store ? 0.0f : acc[i]) + s[i];
    return gcclSuccess; /* no error feedback: nothing to stage */
  }
  if (store && n) memset(acc, 0, n * sizeof(float));
  GCCL_CHECK(ensure_tmp(c));
  float* t = c->tmp + first;
  f32_load(t, src, src_dt, n);
  for (size_t i = 0; i < n; i++) acc[i] += t[i];
  if (c->spec.ef) {
    const float* old = c->residual + first;
    for (size_t i = 0; i < n; i++) acc[i] += old[i];
    memset(c->work + first, 0, n * sizeof(float));
    c->staged += n;
  }
  return gcclSuccess;
}

gcclResult_t compressor_stage_input(struct gcclCompressor* c, const void* src, gcclDataType_t dt, size_t first,
                                    size_t n, float* m) {
  GCCL_CHECK(check_range(c, first, n));
  if (n == 0) return gcclSuccess; /* src may be NULL for an empty tensor */
  const float* e = c->residual + first;
  m += first;
  if (dt == gcclFloat32 && c->spec.ef) {
    const float* s = (const float*)src + first;
    for (size_t i = 0; i < n; i++) m[i] = s[i] + e[i];
  } else {
    f32_load(m, (const unsigned char*)src + first * dtype_size(dt), dt, n);
    if (c->spec.ef)
      for (size_t i = 0; i < n; i++) m[i] += e[i];
  }
  if (c->spec.ef) c->staged += n;
  return gcclSuccess;
}

gcclResult_t compressor_stage_keep(struct gcclCompressor* c, size_t first, size_t n) {
  GCCL_CHECK(check_range(c, first, n));
  if (c->spec.ef) {
    if (n) memcpy(c->work + first, c->residual + first, n * sizeof(float));
    c->staged += n;
  }
  return gcclSuccess;
}

/* ---- commit or abort --------------------------------------------------------- */

gcclResult_t compressor_commit(struct gcclCompressor* c) {
  if (c->encode_on_twin) { /* the twin staged this call's residual, on the device */
    c->twin_ops->commit(c->device);
    c->encode_on_twin = 0;
  } else if (c->spec.ef) {
    if (c->staged != c->count)
      return err_set(gcclInternalError, "commit after encoding %zu of %zu elements", c->staged, c->count);
    float* t = c->residual;
    c->residual = c->work;
    c->work = t;
  }
  if (c->ops->state_commit && c->state) c->ops->state_commit(c->state);
  c->staged = 0;
  c->calls++;
  return gcclSuccess;
}

void compressor_abort(struct gcclCompressor* c) {
  if (c->encode_on_twin && c->device) c->twin_ops->abort(c->device);
  c->encode_on_twin = 0;
  if (c->ops->state_abort && c->state) c->ops->state_abort(c->state);
  c->staged = 0;
}
