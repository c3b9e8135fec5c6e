/* gpu_compressor.c — the host side of the GPU codecs: scratch, the kernels' order,
 * exceptions, the raw fallback, header and CRC (see gpu_compressor.h). It mirrors
 * compressor_encode_part and frame_decode_accumulate step for step. */
#include "cuda/gpu_compressor.h"

#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/bucket.h"
#include "compress/codec_util.h"
#include "compress/compressor.h"
#include "compress/decode.h"
#include "compress/frame.h"
#include "compress/index_code.h"
#include "compress/rng.h"
#include "compress/topk.h"
#include "cuda/gpu_kernels.h"
#include "cuda/sparse_kernels.h"

/* The slots of gpu_compressor.counters. */
enum {
  CNT_EXC_SIGNAL, /* non-zero when there are exceptions to list (buckets that need them, or elements found) */
  CNT_TIES,       /* topk: ties at the threshold */
  CNT_KEPT,       /* topk: K */
  CNT_EXC,        /* the exceptions listed */
  CNT_SLOTS
};

struct gpu_compressor {
  gcclCompressor_t host; /* spec, dtype, count, bound, call number, rank */
  float* residual;       /* device, count floats, with error feedback */
  float* work;           /* device: the residual being staged */
  unsigned char* body;   /* device: payload then exceptions list (bound - 64 bytes) */
  size_t body_cap;
  unsigned char* bucket_bad; /* device: one byte per bucket (bucket codecs) */
  uint64_t* exc;             /* device: exception indices (count) */
  void* scratch;             /* device: CUB's temporary storage, for every step */
  size_t scratch_bytes;
  unsigned long long* counters;   /* device, CNT_SLOTS */
  unsigned long long* h_counters; /* pinned copy */
  unsigned char* h_frame;         /* pinned, the bound: where an encoded body lands, after a header */
  double* saved;                  /* device: dst values at exception indices while decoding */
  size_t saved_cap;
  /* topk: the select's state and histogram, tie and kept indices, the index
   * section (4-byte aligned for its atomic ORs), and decode's word counts */
  gk_topk_state* tk_state;
  unsigned* tk_hist;
  unsigned long long *tk_ties, *tk_kept;
  unsigned* tk_section;
  unsigned* tk_words;
  size_t tk_words_cap;
  /* topk approx=1: the sample's keys on the device, their pinned copy, and the
   * host's selection scratch for the threshold */
  uint32_t* tk_sample;
  uint32_t* h_sample;
  uint32_t* h_sample_tmp;
  size_t* h_sample_hist;
  /* The last encode's header: the codec fields its CPU encoder would set, and
   * payload_bytes (the payload is at body). */
  struct frame_header last;
  int staged; /* an encode's new residual waits in work for gpu_compressor_commit */
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

/* NULL when the GPU encodes spec, else what it lacks. */
static const char* gpu_spec_missing(const struct codec_spec* s) {
  if (s->codec == CODEC_TOPK && s->zstd) return "topk with zstd=1";
  return NULL;
}

int gpu_codec_supported(const struct codec_spec* s, size_t count) {
  return gpu_spec_missing(s) == NULL && !(s->codec == CODEC_TOPK && (uint64_t)count >> 32);
}

/* enum spec_values as the kernels' vt. */
static int values_vt(uint8_t values) {
  return values == SPEC_VALUES_FP16 ? 1 : values == SPEC_VALUES_BF16 ? 2 : 0;
}

void gpu_compressor_destroy(struct gpu_compressor* g) {
  if (g == NULL) return;
  void* dev[] = {g->residual, g->work,    g->body,    g->bucket_bad, g->exc,        g->scratch,  g->counters, g->saved,
                 g->tk_state, g->tk_hist, g->tk_ties, g->tk_kept,    g->tk_section, g->tk_words, g->tk_sample};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
  cudaFreeHost(g->h_counters);
  cudaFreeHost(g->h_frame);
  cudaFreeHost(g->h_sample);
  free(g->h_sample_tmp);
  free(g->h_sample_hist);
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
  const char* missing = gpu_spec_missing(s);
  if (s->codec == CODEC_TOPK && (uint64_t)count >> 32) /* its histograms count in 32 bits */
    missing = "topk of 2^32 or more elements";
  if (missing) {
    res = err_set(gcclInvalidUsage, "%s has no GPU kernel yet", missing);
    goto fail;
  }
  size_t n = count ? count : 1;
  size_t k = s->codec == CODEC_TOPK ? sparse_k(s->ratio, n) : 0;
  g->body_cap = g->host->bound - FRAME_HEADER_BYTES + 16;
  size_t buckets = s->bucket ? (n + s->bucket - 1) / s->bucket : 1;
  g->scratch_bytes = gk_exceptions_scratch(n);
  if (s->codec == CODEC_TOPK) {
    size_t t = gk_topk_scratch(n, index_code_bound(n, k) / 4 + 1);
    if (t > g->scratch_bytes) g->scratch_bytes = t;
  }
  cudaError_t e = cudaMalloc((void**)&g->body, g->body_cap);
  if (e == cudaSuccess && s->ef) e = cudaMalloc((void**)&g->residual, n * sizeof(float));
  if (e == cudaSuccess && s->ef) e = cudaMalloc((void**)&g->work, n * sizeof(float));
  if (e == cudaSuccess && s->ef) e = cudaMemset(g->residual, 0, n * sizeof(float));
  if (e == cudaSuccess) e = cudaMalloc((void**)&g->bucket_bad, buckets);
  if (e == cudaSuccess) e = cudaMalloc((void**)&g->exc, n * sizeof(uint64_t));
  if (e == cudaSuccess) e = cudaMalloc((void**)&g->counters, CNT_SLOTS * sizeof(unsigned long long));
  if (e == cudaSuccess) e = cudaMallocHost((void**)&g->h_counters, CNT_SLOTS * sizeof(unsigned long long));
  /* Bodies cross to the host through pinned memory: at full PCIe speed, and
   * without the driver's own staging of a copy to pageable memory. */
  if (e == cudaSuccess) e = cudaMallocHost((void**)&g->h_frame, g->host->bound);
  if (e == cudaSuccess) e = cudaMalloc(&g->scratch, g->scratch_bytes ? g->scratch_bytes : 1);
  if (s->codec == CODEC_TOPK) {
    if (e == cudaSuccess) e = cudaMalloc((void**)&g->tk_state, sizeof(gk_topk_state));
    if (e == cudaSuccess) e = cudaMalloc((void**)&g->tk_hist, GK_TOPK_BINS * sizeof(unsigned));
    if (e == cudaSuccess) e = cudaMalloc((void**)&g->tk_ties, n * sizeof(unsigned long long));
    if (e == cudaSuccess) e = cudaMalloc((void**)&g->tk_kept, (k ? k : 1) * sizeof(unsigned long long));
    if (e == cudaSuccess) e = cudaMalloc((void**)&g->tk_section, index_code_bound(n, k) + 8);
  }
  if (s->codec == CODEC_TOPK && s->approx && topk_approx_samples(n, k)) {
    const size_t m = TOPK_SAMPLE_CHUNKS * TOPK_SAMPLE_LEN;
    if (e == cudaSuccess) e = cudaMalloc((void**)&g->tk_sample, m * sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaMallocHost((void**)&g->h_sample, m * sizeof(uint32_t));
    g->h_sample_tmp = malloc(m * sizeof(uint32_t));
    g->h_sample_hist = malloc(2048 * sizeof(size_t));
    if (e == cudaSuccess && (g->h_sample_tmp == NULL || g->h_sample_hist == NULL)) e = cudaErrorMemoryAllocation;
  }
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

void* gpu_compressor_frame_buffer(struct gpu_compressor* g) {
  return g->h_frame;
}

void gpu_compressor_set_rank(struct gpu_compressor* g, uint64_t rank) {
  g->host->rank = rank;
}

void gpu_compressor_sync(struct gpu_compressor* g, uint64_t calls, uint64_t rank) {
  g->host->calls = calls;
  g->host->rank = rank;
}

/* A bucket codec's payload size for n elements: meta_bytes and codes of
 * code_bits per bucket. */
static size_t bucket_bytes(const struct codec_spec* s, size_t n, unsigned meta_bytes, unsigned code_bits) {
  uint64_t bytes = 0;
  bucket_payload_size(n, s->bucket, meta_bytes, code_bits, &bytes);
  return (size_t)bytes;
}

/* approx=1's threshold: the sample's keys gathered on the device, the threshold
 * chosen on the host by topk_select.c's own code (so both sides keep the same). */
static gcclResult_t approx_floor(struct gpu_compressor* g, const void* src, const float* rin, size_t k,
                                 uint32_t exc_key, uint32_t* floor, cudaStream_t st) {
  size_t n = g->host->count;
  gk_topk_sample_starts starts;
  for (size_t c = 0; c < TOPK_SAMPLE_CHUNKS; c++) starts.start[c] = topk_sample_start(c, n);
  const size_t all = TOPK_SAMPLE_CHUNKS * TOPK_SAMPLE_LEN;
  CUDA_CHECK(gk_topk_sample(src, g->host->dt, rin, &starts, g->tk_sample, st), "gathering the top-k sample");
  CUDA_CHECK(cudaMemcpyAsync(g->h_sample, g->tk_sample, all * sizeof(uint32_t), cudaMemcpyDeviceToHost, st),
             "reading the top-k sample");
  CUDA_CHECK(cudaStreamSynchronize(st), "reading the top-k sample");
  size_t m = 0;
  for (size_t j = 0; j < all; j++) /* the eligible keys, in sample order */
    if (g->h_sample[j] < exc_key) g->h_sample[m++] = g->h_sample[j];
  *floor = topk_approx_threshold(g->h_sample, m, n, k, g->h_sample_tmp, g->h_sample_hist);
  return gcclSuccess;
}

/* topk: the select, then (K known on the host) values and the index section.
 * Sets h->k and h->payload_bytes. */
static gcclResult_t encode_topk(struct gpu_compressor* g, const void* src, const float* rin, float* rout,
                                struct frame_header* h, cudaStream_t st) {
  const struct codec_spec* s = &g->host->spec;
  size_t n = g->host->count, k = sparse_k(s->ratio, n);
  uint32_t exc_key = topk_exc_key(s->values);
  gcclDataType_t dt = g->host->dt;
  uint32_t floor = 0; /* exact top-k */
  if (s->approx && topk_approx_samples(n, k)) GCCL_CHECK(approx_floor(g, src, rin, k, exc_key, &floor, st));
  CUDA_CHECK(gk_topk_select(src, dt, rin, rout, n, k, exc_key, floor, g->tk_state, g->tk_hist, g->tk_ties, g->tk_kept,
                            g->counters, g->scratch, g->scratch_bytes, st),
             "the top-k select");
  CUDA_CHECK(cudaMemcpyAsync(g->h_counters, g->counters, 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, st),
             "reading K");
  CUDA_CHECK(cudaStreamSynchronize(st), "the top-k select");
  size_t kept = (size_t)g->h_counters[CNT_KEPT], vs = values_size(s->values);
  unsigned L = 0;
  size_t low = 0, section = index_code_bytes(n, kept);
  if (kept) index_code_layout(n, kept, &L, &low);
  CUDA_CHECK(gk_topk_write(src, dt, rin, rout, g->tk_kept, kept, values_vt(s->values), L, low, section, g->body,
                           g->tk_section, st),
             "writing top-k values");
  if (section)
    CUDA_CHECK(cudaMemcpyAsync(g->body + kept * vs, g->tk_section, section, cudaMemcpyDeviceToDevice, st),
               "placing the index section");
  h->k = kept;
  h->payload_bytes = kept * vs + section;
  return gcclSuccess;
}

/* Runs the codec's encode kernels: payload into g->body, the new residual into
 * g->work (with error feedback), counters[CNT_EXC_SIGNAL] non-zero when there
 * are exceptions to list; fills g->last. */
static gcclResult_t launch_encode(struct gpu_compressor* g, const void* src, cudaStream_t st) {
  const struct codec_spec* s = &g->host->spec;
  size_t n = g->host->count;
  gcclDataType_t dt = g->host->dt;
  const float* rin = s->ef ? g->residual : NULL;
  float* rout = s->ef ? g->work : NULL;
  /* compressor.c's encode_keys for a whole tensor (first = 0, stage 0) */
  uint64_t key = rng_key(s->seed, g->host->calls, g->host->rank);
  uint64_t shared = rng_key(s->seed, g->host->calls, RNG_SHARED);
  struct frame_header h = {.codec = s->codec, .dtype = dt, .count = n};
  CUDA_CHECK(cudaMemsetAsync(g->counters, 0, CNT_SLOTS * sizeof(unsigned long long), st), "clearing counters");
  cudaError_t e = cudaSuccess;
  switch (s->codec) {
    case CODEC_NONE:
      h.payload_bytes = n * dtype_size(dt);
      if (n) e = cudaMemcpyAsync(g->body, src, h.payload_bytes, cudaMemcpyDeviceToDevice, st);
      break;
    case CODEC_FP16:
    case CODEC_BF16:
      h.payload_bytes = 2 * n;
      e = gk_half_encode(s->codec == CODEC_BF16, src, dt, rin, rout, n, g->body, st);
      break;
    case CODEC_UNIFORM:
      h.bits = (uint8_t)s->bits;
      h.bucket = s->bucket;
      h.payload_bytes = bucket_bytes(s, n, 8, s->bits);
      e = gk_uniform_encode(src, dt, rin, rout, n, s->bucket, s->bits, s->round == SPEC_ROUND_STOCHASTIC, key, g->body,
                            g->bucket_bad, g->counters, st);
      break;
    case CODEC_QSGD: /* codes of bits + 1 bits: the level and a sign */
      h.bits = (uint8_t)s->bits;
      h.bucket = s->bucket;
      h.payload_bytes = bucket_bytes(s, n, 4, s->bits + 1);
      e = gk_qsgd_encode(src, dt, rin, rout, n, s->bucket, s->bits, key, g->body, g->bucket_bad, g->counters, st);
      break;
    case CODEC_SIGN:
      h.bucket = s->bucket;
      h.payload_bytes = bucket_bytes(s, n, 4, 1);
      e = gk_sign_encode(src, dt, rin, rout, n, s->bucket, g->body, g->bucket_bad, g->counters, st);
      break;
    case CODEC_TERNGRAD: /* bits stay 0 */
      h.bucket = s->bucket;
      h.payload_bytes = bucket_bytes(s, n, 4, 2);
      e = gk_terngrad_encode(src, dt, rin, rout, n, s->bucket, key, g->body, g->bucket_bad, g->counters, st);
      break;
    case CODEC_TOPK:
      h.values = (uint8_t)s->values;
      GCCL_CHECK(encode_topk(g, src, rin, rout, &h, st));
      break;
    case CODEC_RANDK:
      h.values = (uint8_t)s->values;
      h.k = sparse_k(s->ratio, n);
      h.rng_key = shared;
      h.payload_bytes = h.k * values_size(s->values);
      e = gk_randk_encode(src, dt, rin, rout, n, h.k, shared, values_vt(s->values), topk_exc_key(s->values), g->body,
                          g->counters, st);
      break;
    default:
      return err_set(gcclInternalError, "GPU encode of codec %d", (int)s->codec);
  }
  CUDA_CHECK(e, "launching the encode kernel");
  g->last = h;
  return gcclSuccess;
}

gcclResult_t gpu_compressor_encode_payload(struct gpu_compressor* g, const void* src, cudaStream_t stream) {
  return launch_encode(g, src, stream);
}

/* The threshold of "exception" the codec uses: sparse codecs also send values
 * their carried type cannot hold; the others only non-finite ones. */
static uint32_t exception_key(const struct codec_spec* s) {
  return s->codec == CODEC_TOPK || s->codec == CODEC_RANDK ? topk_exc_key(s->values) : 0x7F800000u;
}

gcclResult_t gpu_compressor_encode_staged(struct gpu_compressor* g, const void* src, void* frame, size_t cap,
                                          size_t* frame_bytes, cudaStream_t st) {
  gcclCompressor_t c = g->host;
  const struct codec_spec* s = &c->spec;
  size_t n = c->count;
  if (frame == NULL || frame_bytes == NULL)
    return err_set(gcclInvalidArgument, "gpu_compressor_encode: frame or frame_bytes is NULL");
  if (cap < c->bound)
    return err_set(gcclInvalidArgument, "frame buffer of %zu bytes is below the bound %zu", cap, c->bound);
  if (src == NULL && n > 0) return err_set(gcclInvalidArgument, "gpu_compressor_encode: src is NULL");
  GCCL_CHECK(launch_encode(g, src, st));
  CUDA_CHECK(cudaMemcpyAsync(g->h_counters, g->counters, sizeof(unsigned long long), cudaMemcpyDeviceToHost, st),
             "reading the exception count");
  CUDA_CHECK(cudaStreamSynchronize(st), "the encode kernels");
  struct frame_header h = g->last;
  size_t entry = frame_exception_bytes(c->dt), nexc = 0;
  if (g->h_counters[CNT_EXC_SIGNAL] > 0) { /* list the exceptions, in index order */
    CUDA_CHECK(gk_exceptions_select(src, c->dt, s->ef ? g->residual : NULL, n, exception_key(s), s->bucket,
                                    g->bucket_bad, g->exc, g->counters + CNT_EXC, g->scratch, g->scratch_bytes, st),
               "selecting exceptions");
    CUDA_CHECK(cudaMemcpyAsync(g->h_counters + CNT_EXC, g->counters + CNT_EXC, sizeof(unsigned long long),
                               cudaMemcpyDeviceToHost, st),
               "reading the exception count");
    CUDA_CHECK(cudaStreamSynchronize(st), "selecting exceptions");
    nexc = (size_t)g->h_counters[CNT_EXC];
  }
  size_t bytes;
  unsigned char* h_body = g->h_frame + FRAME_HEADER_BYTES;
  if (nexc <= (c->bound - FRAME_HEADER_BYTES - h.payload_bytes) / entry) {
    h.exceptions = nexc;
    CUDA_CHECK(gk_exceptions_write(src, c->dt, g->exc, nexc, g->body + h.payload_bytes, st), "writing exceptions");
    bytes = h.payload_bytes + nexc * entry;
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(h_body, g->body, bytes, cudaMemcpyDeviceToHost, st), "copying the frame");
  } else { /* raw fallback, as compressor.c's encode_raw (the codec's header fields stay) */
    h.flags = FRAME_FLAG_RAW;
    h.exceptions = 0;
    h.payload_bytes = bytes = n * dtype_size(c->dt);
    CUDA_CHECK(cudaMemcpyAsync(h_body, src, bytes, cudaMemcpyDeviceToHost, st), "copying the raw frame");
    if (s->ef) CUDA_CHECK(gk_raw_residual(src, c->dt, g->residual, g->work, n, st), "the raw residual");
  }
  CUDA_CHECK(cudaStreamSynchronize(st), "copying the frame");
  if (bytes && frame != g->h_frame) memcpy((unsigned char*)frame + FRAME_HEADER_BYTES, h_body, bytes);
  GCCL_CHECK(frame_header_write(frame, cap, &h));
  GCCL_CHECK(frame_total_bytes(&h, frame_bytes));
  g->staged = s->ef;
  return gcclSuccess;
}

void gpu_compressor_commit(struct gpu_compressor* g) {
  if (g->staged) {
    float* t = g->residual;
    g->residual = g->work;
    g->work = t;
  }
  g->staged = 0;
  g->host->calls++;
}

void gpu_compressor_abort(struct gpu_compressor* g) {
  g->staged = 0;
}

gcclResult_t gpu_compressor_encode(struct gpu_compressor* g, const void* src, void* frame, size_t cap,
                                   size_t* frame_bytes, cudaStream_t st) {
  gcclResult_t res = gpu_compressor_encode_staged(g, src, frame, cap, frame_bytes, st);
  if (res != gcclSuccess) {
    gpu_compressor_abort(g);
    return res;
  }
  gpu_compressor_commit(g);
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

/* topk decode: the high part's word counts and CUB scratch, grown if needed. */
static gcclResult_t decode_topk(struct gpu_compressor* g, const struct frame_header* h, const unsigned char* payload,
                                void* dst, cudaStream_t st) {
  size_t n = (size_t)h->count, k = (size_t)h->k;
  if (k == 0) return gcclSuccess;
  unsigned L = 0;
  size_t low = 0;
  index_code_layout(n, k, &L, &low);
  size_t high = index_code_bytes(n, k) - low, words = (high + 3) / 4;
  if (words > g->tk_words_cap) {
    cudaFree(g->tk_words);
    g->tk_words = NULL;
    g->tk_words_cap = 0;
    CUDA_CHECK(cudaMalloc((void**)&g->tk_words, words * sizeof(unsigned)), "allocating top-k decode scratch");
    g->tk_words_cap = words;
  }
  size_t need = gk_topk_scratch(1, words);
  if (need > g->scratch_bytes) {
    cudaFree(g->scratch);
    g->scratch = NULL;
    g->scratch_bytes = 0;
    CUDA_CHECK(cudaMalloc(&g->scratch, need), "allocating top-k decode scratch");
    g->scratch_bytes = need;
  }
  CUDA_CHECK(gk_topk_decode(payload, k, values_vt(h->values), L, low, high, g->tk_words, g->scratch, g->scratch_bytes,
                            dst, h->dtype, st),
             "the top-k decode kernels");
  return gcclSuccess;
}

/* dst += the payload at `payload` (device) of a frame with header h. */
static gcclResult_t launch_decode(struct gpu_compressor* g, const struct frame_header* h, const unsigned char* payload,
                                  void* dst, cudaStream_t st) {
  size_t n = (size_t)h->count;
  cudaError_t e = cudaSuccess;
  if (h->flags & FRAME_FLAG_RAW || h->codec == CODEC_NONE) {
    e = gk_raw_decode(payload, n, dst, h->dtype, st);
  } else {
    switch (h->codec) {
      case CODEC_FP16:
      case CODEC_BF16:
        e = gk_half_decode(h->codec == CODEC_BF16, payload, n, dst, h->dtype, st);
        break;
      case CODEC_UNIFORM:
        e = gk_uniform_decode(payload, n, h->bucket, h->bits, dst, h->dtype, st);
        break;
      case CODEC_QSGD:
        e = gk_qsgd_decode(payload, n, h->bucket, h->bits, dst, h->dtype, st);
        break;
      case CODEC_SIGN:
        e = gk_sign_decode(payload, n, h->bucket, dst, h->dtype, st);
        break;
      case CODEC_TERNGRAD:
        e = gk_terngrad_decode(payload, n, h->bucket, dst, h->dtype, st);
        break;
      case CODEC_TOPK:
        if (h->flags & FRAME_FLAG_ZSTD)
          return err_set(gcclInvalidUsage, "topk frames with zstd=1 have no GPU decoder yet");
        return decode_topk(g, h, payload, dst, st);
      case CODEC_RANDK:
        e = gk_randk_decode(payload, n, (size_t)h->k, h->rng_key, values_vt(h->values), dst, h->dtype, st);
        break;
      default:
        return err_set(gcclInternalError, "GPU decode of codec %d", (int)h->codec);
    }
  }
  CUDA_CHECK(e, "launching the decode kernel");
  return gcclSuccess;
}

gcclResult_t gpu_compressor_decode_payload(struct gpu_compressor* g, void* dst, cudaStream_t stream) {
  return launch_decode(g, &g->last, g->body, dst, stream);
}

gcclResult_t gpu_compressor_decode(struct gpu_compressor* g, const void* frame, size_t frame_bytes, void* dst,
                                   size_t count, gcclDataType_t dt, cudaStream_t st) {
  if (frame == NULL) return err_set(gcclInvalidArgument, "gpu_compressor_decode: frame is NULL");
  if (dst == NULL && count > 0) return err_set(gcclInvalidArgument, "gpu_compressor_decode: dst is NULL");
  struct frame_header h;
  GCCL_CHECK(frame_check(frame, frame_bytes, count, dt, &h));
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
  GCCL_CHECK(launch_decode(g, &h, g->body, dst, st));
  CUDA_CHECK(gk_exceptions_apply(dst, dt, entries, nexc, g->saved, st), "adding exceptions");
  CUDA_CHECK(cudaStreamSynchronize(st), "the decode kernel");
  return gcclSuccess;
}
