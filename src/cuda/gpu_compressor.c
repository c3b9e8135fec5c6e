/* gpu_compressor.c — the host side of the GPU codecs: scratch, the kernels' order,
 * exceptions, the raw fallback, header and CRC (see gpu_compressor.h). It mirrors
 * compressor_encode_part and frame_decode_accumulate step for step. */
#include "cuda/gpu_compressor.h"

#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/bucket.h"
#include "compress/compressor.h"
#include "compress/frame.h"
#include "compress/rng.h"
#include "cuda/gpu_kernels.h"

struct gpu_compressor {
  gcclCompressor_t host; /* spec, dtype, count, bound, call number, rank */
  float* residual;       /* device, count floats, with error feedback */
  float* work;           /* device: the residual being staged */
  unsigned char* body;   /* device: payload then exceptions list (bound - 64 bytes) */
  size_t body_cap;
  unsigned char* bucket_bad; /* device: one byte per bucket (bucket codecs) */
  uint64_t* exc;             /* device: exception indices (count) */
  void* select_scratch;
  size_t select_bytes;
  unsigned long long* counters;   /* device: [0] buckets with exceptions, [1] exceptions */
  unsigned long long* h_counters; /* pinned copy */
  double* saved;                  /* device: dst values at exception indices while decoding */
  size_t saved_cap;
  size_t payload_bytes; /* of the last encode_payload */
};

static gcclResult_t cuda_fail(cudaError_t e, const char* what) {
  return err_set(gcclSystemError, "CUDA: %s failed: %s", what, cudaGetErrorString(e));
}
#define CUDA_CHECK(call, what)                         \
  do {                                                 \
    cudaError_t e_ = (call);                           \
    if (e_ != cudaSuccess) return cuda_fail(e_, what); \
  } while (0)

int gpu_available(const char** why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    return 0;
  }
  return 1;
}

static int gpu_codec_supported(enum codec_id c) {
  return c == CODEC_NONE || c == CODEC_FP16 || c == CODEC_BF16 || c == CODEC_UNIFORM || c == CODEC_SIGN;
}

void gpu_compressor_destroy(struct gpu_compressor* g) {
  if (g == NULL) return;
  cudaFree(g->residual);
  cudaFree(g->work);
  cudaFree(g->body);
  cudaFree(g->bucket_bad);
  cudaFree(g->exc);
  cudaFree(g->select_scratch);
  cudaFree(g->counters);
  cudaFree(g->saved);
  cudaFreeHost(g->h_counters);
  if (g->host) gcclCompressorDestroy(g->host);
  free(g);
}

gcclResult_t gpu_compressor_create(struct gpu_compressor** out, const char* spec, size_t count, gcclDataType_t dt) {
  if (out == NULL) return err_set(gcclInvalidArgument, "gpu_compressor_create: NULL result pointer");
  *out = NULL;
  if (spec == NULL) return err_set(gcclInvalidArgument, "gpu_compressor_create: spec is NULL");
  const char* why = NULL;
  if (!gpu_available(&why)) return err_set(gcclInvalidUsage, "no usable CUDA device: %s", why);
  struct gpu_compressor* g = calloc(1, sizeof *g);
  if (g == NULL) return err_set(gcclSystemError, "gpu_compressor_create: out of memory");
  /* The host compressor keeps spec, bound, call number and rank; it is made with
   * error feedback off so that it allocates no host residual (the residual lives
   * on the device), and ef is set back on its spec afterwards. */
  struct codec_spec parsed;
  char text[SPEC_FORMAT_MAX];
  gcclResult_t res = spec_parse(spec, &parsed);
  if (res != gcclSuccess) goto fail;
  int ef = parsed.ef;
  parsed.ef = 0;
  res = spec_format(&parsed, text, sizeof text);
  if (res == gcclSuccess) res = gcclCompressorCreate(&g->host, text, count, dt);
  if (res != gcclSuccess) goto fail;
  g->host->spec.ef = ef;
  const struct codec_spec* s = &g->host->spec;
  if (!gpu_codec_supported(s->codec)) {
    res = err_set(gcclInvalidUsage, "codec %s has no GPU kernels yet (GPU codecs: none, fp16, bf16, uniform, sign)",
                  spec_codec_name(s->codec));
    goto fail;
  }
  size_t n = count ? count : 1;
  g->body_cap = g->host->bound - FRAME_HEADER_BYTES + 16;
  size_t buckets = s->bucket ? (n + s->bucket - 1) / s->bucket : 1;
  cudaError_t e = cudaMalloc((void**)&g->body, g->body_cap);
  if (e == cudaSuccess && s->ef) e = cudaMalloc((void**)&g->residual, n * sizeof(float));
  if (e == cudaSuccess && s->ef) e = cudaMalloc((void**)&g->work, n * sizeof(float));
  if (e == cudaSuccess && s->ef) e = cudaMemset(g->residual, 0, n * sizeof(float));
  if (e == cudaSuccess) e = cudaMalloc((void**)&g->bucket_bad, buckets);
  if (e == cudaSuccess) e = cudaMalloc((void**)&g->exc, n * sizeof(uint64_t));
  if (e == cudaSuccess) e = cudaMalloc((void**)&g->counters, 2 * sizeof(unsigned long long));
  if (e == cudaSuccess) e = cudaMallocHost((void**)&g->h_counters, 2 * sizeof(unsigned long long));
  g->select_bytes = gk_exceptions_scratch(n);
  if (e == cudaSuccess) e = cudaMalloc(&g->select_scratch, g->select_bytes ? g->select_bytes : 1);
  if (e != cudaSuccess) {
    res = cuda_fail(e, "allocating the GPU compressor's scratch");
    goto fail;
  }
  *out = g;
  return gcclSuccess;
fail:
  gpu_compressor_destroy(g);
  return res;
}

size_t gpu_compressor_bound(const struct gpu_compressor* g) {
  return g->host->bound;
}

void gpu_compressor_set_rank(struct gpu_compressor* g, uint64_t rank) {
  g->host->rank = rank;
}

/* The codec's payload size for n elements (what its CPU encoder writes). */
static size_t payload_size(const struct codec_spec* s, size_t n, gcclDataType_t dt) {
  uint64_t bytes = 0;
  switch (s->codec) {
    case CODEC_FP16:
    case CODEC_BF16:
      return 2 * n;
    case CODEC_UNIFORM:
      bucket_payload_size(n, s->bucket, 8, s->bits, &bytes);
      return (size_t)bytes;
    case CODEC_SIGN:
      bucket_payload_size(n, s->bucket, 4, 1, &bytes);
      return (size_t)bytes;
    default:
      return n * dtype_size(dt);
  }
}

/* Launches the codec's encode kernel: payload into g->body, the new residual into
 * g->work (with error feedback), buckets needing exceptions counted in counters[0]. */
static gcclResult_t launch_encode(struct gpu_compressor* g, const void* src, cudaStream_t st) {
  const struct codec_spec* s = &g->host->spec;
  size_t n = g->host->count;
  gcclDataType_t dt = g->host->dt;
  const float* rin = s->ef ? g->residual : NULL;
  float* rout = s->ef ? g->work : NULL;
  uint64_t key = rng_key(s->seed, g->host->calls, g->host->rank); /* compressor.c's encode_keys, first = 0 */
  CUDA_CHECK(cudaMemsetAsync(g->counters, 0, 2 * sizeof(unsigned long long), st), "clearing counters");
  cudaError_t e = cudaSuccess;
  switch (s->codec) {
    case CODEC_NONE:
      if (n) e = cudaMemcpyAsync(g->body, src, n * dtype_size(dt), cudaMemcpyDeviceToDevice, st);
      break;
    case CODEC_FP16:
    case CODEC_BF16:
      e = gk_half_encode(s->codec == CODEC_BF16, src, dt, rin, rout, n, g->body, st);
      break;
    case CODEC_UNIFORM:
      e = gk_uniform_encode(src, dt, rin, rout, n, s->bucket, s->bits, s->round == SPEC_ROUND_STOCHASTIC, key, g->body,
                            g->bucket_bad, g->counters, st);
      break;
    case CODEC_SIGN:
      e = gk_sign_encode(src, dt, rin, rout, n, s->bucket, g->body, g->bucket_bad, g->counters, st);
      break;
    default:
      return err_set(gcclInternalError, "GPU encode of codec %d", (int)s->codec);
  }
  CUDA_CHECK(e, "launching the encode kernel");
  g->payload_bytes = payload_size(s, n, dt);
  return gcclSuccess;
}

gcclResult_t gpu_compressor_encode_payload(struct gpu_compressor* g, const void* src, cudaStream_t stream) {
  return launch_encode(g, src, stream);
}

gcclResult_t gpu_compressor_encode(struct gpu_compressor* g, const void* src, void* frame, size_t cap,
                                   size_t* frame_bytes, cudaStream_t st) {
  gcclCompressor_t c = g->host;
  const struct codec_spec* s = &c->spec;
  size_t n = c->count;
  if (cap < c->bound)
    return err_set(gcclInvalidArgument, "frame buffer of %zu bytes is below the bound %zu", cap, c->bound);
  if (src == NULL && n > 0) return err_set(gcclInvalidArgument, "gpu_compressor_encode: src is NULL");
  GCCL_CHECK(launch_encode(g, src, st));
  CUDA_CHECK(cudaMemcpyAsync(g->h_counters, g->counters, sizeof(unsigned long long), cudaMemcpyDeviceToHost, st),
             "reading the exception count");
  CUDA_CHECK(cudaStreamSynchronize(st), "the encode kernel");
  struct frame_header h = {.codec = s->codec, .dtype = c->dt, .count = n, .payload_bytes = g->payload_bytes};
  if (s->codec == CODEC_UNIFORM) h.bits = (uint8_t)s->bits;
  if (s->codec == CODEC_UNIFORM || s->codec == CODEC_SIGN) h.bucket = s->bucket;
  size_t entry = frame_exception_bytes(c->dt), nexc = 0;
  if (g->h_counters[0] > 0) { /* some bucket has exceptions: list them */
    CUDA_CHECK(gk_exceptions_select(src, c->dt, s->ef ? g->residual : NULL, n, s->bucket, g->bucket_bad, g->exc,
                                    g->counters + 1, g->select_scratch, g->select_bytes, st),
               "selecting exceptions");
    CUDA_CHECK(
        cudaMemcpyAsync(g->h_counters + 1, g->counters + 1, sizeof(unsigned long long), cudaMemcpyDeviceToHost, st),
        "reading the exception count");
    CUDA_CHECK(cudaStreamSynchronize(st), "selecting exceptions");
    nexc = (size_t)g->h_counters[1];
  }
  unsigned char* body = (unsigned char*)frame + FRAME_HEADER_BYTES;
  if (nexc <= (c->bound - FRAME_HEADER_BYTES - h.payload_bytes) / entry) {
    h.exceptions = nexc;
    CUDA_CHECK(gk_exceptions_write(src, c->dt, g->exc, nexc, g->body + h.payload_bytes, st), "writing exceptions");
    size_t bytes = h.payload_bytes + nexc * entry;
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(body, g->body, bytes, cudaMemcpyDeviceToHost, st), "copying the frame");
  } else { /* raw fallback, as compressor.c's encode_raw */
    h.flags = FRAME_FLAG_RAW;
    h.payload_bytes = n * dtype_size(c->dt);
    CUDA_CHECK(cudaMemcpyAsync(body, src, h.payload_bytes, cudaMemcpyDeviceToHost, st), "copying the raw frame");
    if (s->ef) CUDA_CHECK(gk_raw_residual(src, c->dt, g->residual, g->work, n, st), "the raw residual");
  }
  CUDA_CHECK(cudaStreamSynchronize(st), "copying the frame");
  GCCL_CHECK(frame_header_write(frame, cap, &h));
  GCCL_CHECK(frame_total_bytes(&h, frame_bytes));
  if (s->ef) { /* commit */
    float* t = g->residual;
    g->residual = g->work;
    g->work = t;
  }
  c->calls++;
  return gcclSuccess;
}

gcclResult_t gpu_compressor_get_residual(const struct gpu_compressor* g, float* out) {
  size_t n = g->host->count;
  if (n == 0) return gcclSuccess;
  if (!g->host->spec.ef) {
    memset(out, 0, n * sizeof(float));
    return gcclSuccess;
  }
  CUDA_CHECK(cudaMemcpy(out, g->residual, n * sizeof(float), cudaMemcpyDeviceToHost), "reading the residual");
  return gcclSuccess;
}

gcclResult_t gpu_compressor_set_residual(struct gpu_compressor* g, const float* in) {
  size_t n = g->host->count;
  if (n == 0 || !g->host->spec.ef) return gcclSuccess;
  CUDA_CHECK(cudaMemcpy(g->residual, in, n * sizeof(float), cudaMemcpyHostToDevice), "writing the residual");
  return gcclSuccess;
}

/* dst += the payload at `payload` (device) of a frame with header h. */
static gcclResult_t launch_decode(const struct frame_header* h, const unsigned char* payload, void* dst,
                                  cudaStream_t st) {
  size_t n = (size_t)h->count;
  cudaError_t e;
  if (h->flags & FRAME_FLAG_RAW || h->codec == CODEC_NONE) {
    e = gk_raw_decode(payload, n, dst, h->dtype, st);
  } else if (h->codec == CODEC_FP16 || h->codec == CODEC_BF16) {
    e = gk_half_decode(h->codec == CODEC_BF16, payload, n, dst, h->dtype, st);
  } else if (h->codec == CODEC_UNIFORM) {
    e = gk_uniform_decode(payload, n, h->bucket, h->bits, dst, h->dtype, st);
  } else if (h->codec == CODEC_SIGN) {
    e = gk_sign_decode(payload, n, h->bucket, dst, h->dtype, st);
  } else {
    return err_set(gcclInvalidUsage, "codec %s has no GPU decoder yet", spec_codec_name(h->codec));
  }
  CUDA_CHECK(e, "launching the decode kernel");
  return gcclSuccess;
}

gcclResult_t gpu_compressor_decode_payload(struct gpu_compressor* g, void* dst, cudaStream_t stream) {
  gcclCompressor_t c = g->host;
  struct frame_header h = {.codec = c->spec.codec,
                           .dtype = c->dt,
                           .count = c->count,
                           .bits = (uint8_t)c->spec.bits,
                           .bucket = c->spec.bucket};
  return launch_decode(&h, g->body, dst, stream);
}

gcclResult_t gpu_compressor_decode(struct gpu_compressor* g, const void* frame, size_t frame_bytes, void* dst,
                                   size_t count, gcclDataType_t dt, cudaStream_t st) {
  if (frame == NULL) return err_set(gcclInvalidArgument, "gpu_compressor_decode: frame is NULL");
  if (dst == NULL && count > 0) return err_set(gcclInvalidArgument, "gpu_compressor_decode: dst is NULL");
  struct frame_header h;
  GCCL_CHECK(frame_check(frame, frame_bytes, count, dt, &h));
  if (h.codec != CODEC_NONE && !gpu_codec_supported(h.codec))
    return err_set(gcclInvalidUsage, "codec %s has no GPU decoder yet", spec_codec_name(h.codec));
  if (h.codec == CODEC_NONE && !dtype_is_float(dt))
    return err_set(gcclInvalidUsage, "the GPU decoder adds float tensors only, not %s", dtype_name(dt));
  size_t body = frame_bytes - FRAME_HEADER_BYTES, nexc = (size_t)h.exceptions;
  if (body > g->body_cap) { /* a frame from a compressor with a larger bound: grow once */
    unsigned char* p = NULL;
    CUDA_CHECK(cudaMalloc((void**)&p, body), "growing the decode scratch");
    cudaFree(g->body);
    g->body = p;
    g->body_cap = body;
  }
  if (nexc > g->saved_cap) {
    double* p = NULL;
    CUDA_CHECK(cudaMalloc((void**)&p, nexc * sizeof(double)), "allocating exception scratch");
    cudaFree(g->saved);
    g->saved = p;
    g->saved_cap = nexc;
  }
  if (body)
    CUDA_CHECK(
        cudaMemcpyAsync(g->body, (const unsigned char*)frame + FRAME_HEADER_BYTES, body, cudaMemcpyHostToDevice, st),
        "copying the frame");
  const unsigned char* entries = g->body + h.payload_bytes;
  CUDA_CHECK(gk_exceptions_save(dst, dt, entries, nexc, g->saved, st), "saving exception slots");
  GCCL_CHECK(launch_decode(&h, g->body, dst, st));
  CUDA_CHECK(gk_exceptions_apply(dst, dt, entries, nexc, g->saved, st), "adding exceptions");
  CUDA_CHECK(cudaStreamSynchronize(st), "the decode kernel");
  return gcclSuccess;
}
