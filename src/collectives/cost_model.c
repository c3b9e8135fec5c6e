/* cost_model.c — the α-β-γ model of an allreduce (see cost_model.h). */
#include "collectives/cost_model.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/tuner.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "common/reduce.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "compress/decode.h"
#include "compress/powersgd.h"

#define DEFAULT_INTER_GBPS 10.0 /* Gbit/s */
#define DEFAULT_INTER_US 20.0
#define DEFAULT_INTRA_BYTES_PER_S 10e9
#define DEFAULT_INTRA_US 1.0

/* The measurements at creation: 1 Mi elements, small enough to take milliseconds
 * (and to fit a communicator's scratch), best of MEASURE_REPS. They stay in a
 * large L3 (32 MiB here), so a memory-bound codec measures faster than it runs on
 * a tensor of 100 MiB; cost_codec_measure_at takes the size to measure at. */
#define MEASURE_COUNT ((size_t)1 << 20)
#define MEASURE_REPS 3
/* ... or two when they took this long (auto:'s probe at creation, link and
 * codec, stays near 50 ms; core/link_probe.c takes at most 30). */
#define MEASURE_BUDGET_NS 15000000LL

/* The value of `name` as a positive decimal number, or 0 when unset or invalid
 * (an invalid value is reported). */
static double env_positive(const char* name) {
  const char* v = env_str(name);
  if (!v) return 0.0;
  char* end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || *end || !(x > 0.0) || !isfinite(x)) {
    GCCL_WARN("ignoring %s=%s: not a positive number", name, v);
    return 0.0;
  }
  return x;
}

/* The first positive value among the variables, else fallback. */
static double env_first(const char* sim_name, const char* user_name, double fallback) {
  double x = env_positive(sim_name);
  if (x == 0.0) x = env_positive(user_name);
  return x > 0.0 ? x : fallback;
}

/* ---- measurement buffers ------------------------------------------------------- */

/* `need` bytes for a measurement: the caller's workspace when it holds them
 * (a communicator's scratch, touched already: an MPI rank's first communicator
 * paid ~25 ms of first-touch page faults for buffers of its own), else allocated
 * (*owned set; NULL when out of memory). */
static unsigned char* measure_buffers(struct cost_workspace ws, size_t need, int* owned) {
  *owned = ws.bytes < need;
  return *owned ? malloc(need) : ws.p;
}

/* ---- the dense reduction rate, once per process -------------------------------- */

static pthread_mutex_t reduce_mu = PTHREAD_MUTEX_INITIALIZER;
static double reduce_rate; /* seconds per byte of dst; 0 until measured */

static double measure_reduce(size_t count, struct cost_workspace ws) {
  int owned = 0;
  float* a = (float*)measure_buffers(ws, 2 * count * sizeof(float), &owned);
  double best = 0.0;
  if (a) {
    float* b = a + count;
    for (size_t i = 0; i < count; i++) a[i] = b[i] = (float)(i & 1023);
    for (int r = 0; r < MEASURE_REPS; r++) {
      int64_t t0 = clock_now_ns();
      reduce_2(a, a, b, count, gcclFloat32, gcclSum);
      double s = (double)(clock_now_ns() - t0) * 1e-9;
      if (r == 0 || s < best) best = s;
    }
  }
  if (owned) free(a);
  /* Out of memory: assume memory speed (~18 GB/s, DESIGN.md). */
  return best > 0.0 ? best / (double)(count * sizeof(float)) : 1.0 / 18e9;
}

double cost_reduce_rate_at(size_t count) {
  return measure_reduce(count, (struct cost_workspace){NULL, 0});
}

double cost_reduce_rate(struct cost_workspace ws) {
  pthread_mutex_lock(&reduce_mu);
  if (reduce_rate == 0.0) reduce_rate = measure_reduce(MEASURE_COUNT, ws);
  double rate = reduce_rate;
  pthread_mutex_unlock(&reduce_mu);
  return rate;
}

int cost_model_link_from_env(void) {
  return env_positive("GCCL_SIM_LINK_GBPS") > 0.0 || env_positive("GCCL_LINK_GBPS") > 0.0;
}

void cost_model_links(struct cost_model* m, int nranks, int local_size) {
  memset(m, 0, sizeof *m);
  m->nranks = nranks;
  m->local_size = local_size > 0 && local_size <= nranks ? local_size : nranks;
  double gbps = env_first("GCCL_SIM_LINK_GBPS", "GCCL_LINK_GBPS", DEFAULT_INTER_GBPS);
  double us = env_first("GCCL_SIM_LINK_US", "GCCL_LINK_US", DEFAULT_INTER_US);
  m->inter.beta = 8.0 / (gbps * 1e9);
  m->inter.alpha = us * 1e-6;
  m->sends_overlap_compute = env_positive("GCCL_SIM_LINK_GBPS") > 0.0;
  m->intra.beta = 1.0 / DEFAULT_INTRA_BYTES_PER_S;
  m->intra.alpha = DEFAULT_INTRA_US * 1e-6;
}

void cost_model_init(struct cost_model* m, int nranks, int local_size) {
  cost_model_links(m, nranks, local_size);
  m->reduce_s_per_byte = cost_reduce_rate((struct cost_workspace){NULL, 0});
}

/* ---- codec rates, once per spec and process ------------------------------------- */

#define CODEC_CACHE_SLOTS 16

struct codec_cache_slot {
  char spec[SPEC_FORMAT_MAX];
  struct cost_codec rates;
};

static pthread_mutex_t codec_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct codec_cache_slot codec_cache[CODEC_CACHE_SLOTS];
static size_t codec_cache_used;

/* Gaussian-like data (sum of four 16-bit uniforms, all from one draw: the
 * measurement is part of communicator creation), the same on every run. */
static void fill_gaussian(float* x, size_t n) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = s ^ (s >> 29);
    float acc = (float)(r & 0xffff) + (float)(r >> 16 & 0xffff) + (float)(r >> 32 & 0xffff) + (float)(r >> 48);
    x[i] = acc * (1.0f / 65536.0f) - 2.0f;
  }
}

/* powersgd has no frames: its cost is its three steps on one rank (the sums
 * between them are the model's dense allreduces), as encode time; its wire
 * bytes come from its shape (cost_allreduce), not from a per-element rate. */
static gcclResult_t measure_powersgd(struct gcclCompressor* c, const float* src, size_t count, float* out_buf,
                                     struct cost_codec* out) {
  struct powersgd_state* st = c->state;
  gcclResult_t res = gcclSuccess;
  double best = 0.0;
  for (int r = 0; r < MEASURE_REPS && res == gcclSuccess; r++) {
    int64_t t0 = clock_now_ns();
    res = powersgd_compute_p(c, src, gcclFloat32, st->p);
    if (res == gcclSuccess) {
      powersgd_compute_q(c, st->p, st->q_next);
      powersgd_compute_output(c, st->q_next, out_buf, gcclFloat32, 1);
    }
    int64_t t1 = clock_now_ns();
    compressor_abort(c); /* a measurement, not a call: residual and Q stay as made */
    double t = (double)(t1 - t0) * 1e-9;
    if (r == 0 || t < best) best = t;
  }
  out->encode_s_per_elem = best / (double)count;
  out->decode_s_per_elem = 0.0;
  out->wire_bytes_per_elem = 0.0;
  return res;
}

static gcclResult_t measure_codec(const char* spec_text, size_t count, struct cost_codec* out,
                                  struct cost_workspace ws) {
  int64_t start = clock_now_ns();
  struct codec_spec spec;
  GCCL_CHECK(spec_parse(spec_text, &spec));
  struct gcclCompressor* c = NULL;
  GCCL_CHECK(compressor_create(&c, &spec, count, gcclFloat32));
  gcclResult_t res = gcclSuccess;
  /* The tensor, the sums, then the frame (or powersgd's output). */
  size_t cap = compressor_bound_f32(c, count), vec = count * sizeof(float);
  int owned = 0;
  unsigned char* mem = measure_buffers(ws, 2 * vec + (cap > vec ? cap : vec), &owned);
  if (!mem) {
    res = err_set(gcclSystemError, "measuring codec %s: out of memory", spec_text);
    goto done;
  }
  float* src = (float*)mem;
  float* sum = (float*)(mem + vec);
  void* frame = mem + 2 * vec;
  memset(sum, 0, vec);
  fill_gaussian(src, count);
  if (spec.codec == CODEC_POWERSGD) {
    res = measure_powersgd(c, src, count, frame, out);
    goto done;
  }
  double best_enc = 0.0, best_dec = 0.0;
  size_t bytes = 0;
  int64_t loop = clock_now_ns();
  for (int r = 0; r < MEASURE_REPS && res == gcclSuccess; r++) {
    /* The first repetition touches the frame's pages: two at least, then within the budget. */
    if (r > 1 && clock_now_ns() - loop > MEASURE_BUDGET_NS) break;
    int64_t t0 = clock_now_ns();
    res = compressor_encode_f32(c, src, gcclFloat32, 0, count, EF_ADD, 0, frame, cap, &bytes);
    int64_t t1 = clock_now_ns();
    compressor_abort(c); /* a measurement, not a call: the residual stays zero */
    if (res != gcclSuccess) break;
    res = frame_decode_accumulate(frame, bytes, sum, count, gcclFloat32);
    int64_t t2 = clock_now_ns();
    double enc = (double)(t1 - t0) * 1e-9, dec = (double)(t2 - t1) * 1e-9;
    if (r == 0 || enc < best_enc) best_enc = enc;
    if (r == 0 || dec < best_dec) best_dec = dec;
  }
  if (res == gcclSuccess) {
    out->encode_s_per_elem = best_enc / (double)count;
    out->decode_s_per_elem = best_dec / (double)count;
    out->wire_bytes_per_elem = (double)bytes / (double)count;
    GCCL_INFO(LOG_TUNING,
              "codec %s measured in %.1f ms: encode %.2f GB/s, decode-accumulate %.2f GB/s, %.3f wire bytes/element",
              spec_text, (double)(clock_now_ns() - start) * 1e-6, 4e-9 / fmax(out->encode_s_per_elem, 1e-15),
              4e-9 / fmax(out->decode_s_per_elem, 1e-15), out->wire_bytes_per_elem);
  }
done:
  if (owned) free(mem);
  compressor_destroy(c);
  return res;
}

gcclResult_t cost_codec_measure(const char* spec_text, struct cost_codec* out, struct cost_workspace ws) {
  /* Held through the measurement: ranks of one process that ask together wait
   * for the first one's numbers instead of measuring (and disagreeing) each. */
  pthread_mutex_lock(&codec_cache_mu);
  size_t used = codec_cache_used < CODEC_CACHE_SLOTS ? codec_cache_used : CODEC_CACHE_SLOTS;
  for (size_t i = 0; i < used; i++)
    if (strcmp(codec_cache[i].spec, spec_text) == 0) {
      *out = codec_cache[i].rates;
      pthread_mutex_unlock(&codec_cache_mu);
      return gcclSuccess;
    }
  struct cost_codec rates;
  gcclResult_t res = measure_codec(spec_text, MEASURE_COUNT, &rates, ws);
  if (res == gcclSuccess) {
    /* More specs than slots in one process: the oldest is measured again later. */
    struct codec_cache_slot* slot = &codec_cache[codec_cache_used++ % CODEC_CACHE_SLOTS];
    snprintf(slot->spec, sizeof slot->spec, "%s", spec_text);
    slot->rates = rates;
    *out = rates;
  }
  pthread_mutex_unlock(&codec_cache_mu);
  return res;
}

gcclResult_t cost_codec_measure_at(const char* spec_text, size_t count, struct cost_codec* out) {
  if (count == 0) return err_set(gcclInvalidArgument, "measuring codec %s on no elements", spec_text);
  return measure_codec(spec_text, count, out, (struct cost_workspace){NULL, 0});
}

/* ---- the formulas ------------------------------------------------------------------ */

double cost_log2_ceil(int p) {
  int l = 0;
  while ((1 << l) < p) l++;
  return (double)l;
}

/* Dense ring allreduce of `bytes` over p ranks on link k. */
static double dense_ring(int p, double bytes, struct cost_link k, double gr) {
  if (p <= 1) return 0.0;
  double f = (double)(p - 1) / p;
  return 2.0 * (p - 1) * k.alpha + 2.0 * f * bytes * k.beta + f * bytes * gr;
}

/* What every formula needs about one call. */
struct call_terms {
  int p, nodes, L;
  int overlap;           /* sends move while the sender computes (cost_model.sends_overlap_compute) */
  struct cost_link flat; /* the link a flat algorithm is bound by: inter-node when there are several nodes */
  struct cost_link intra, inter;
  double n;                                /* dense bytes of the tensor */
  double m;                                /* elements */
  double gr;                               /* dense reduction, s/byte */
  double e, d, w;                          /* codec: encode s/elem, decode-accumulate s/elem, wire bytes/elem */
  double lowrank_p_bytes, lowrank_q_bytes; /* powersgd: its factors' bytes for this call */
};

/* Compressed allreduce of m elements over p ranks on link k with the codec's
 * usual schedule (the one tuner_choose_compressed picks for a flat call). */
static double compressed_flat(const struct call_terms* t, enum coll_algo algo, int p, double m, struct cost_link k) {
  if (p <= 1) return t->e * m + t->d * m; /* one rank still encodes and decodes its own tensor */
  double f = (double)(p - 1) / p, frame = m * t->w;
  switch (algo) {
    /* sra: scatter p-1 frames of m/p, allgather p-1 reduced frames; every rank
     * encodes its tensor once, its owner chunk decodes p-1 frames, re-encodes
     * the reduced chunk once, and decodes all chunks at the end. */
    case ALGO_SRA: {
      double x = 2.0 * (p - 1) * k.alpha + 2.0 * f * frame * k.beta + t->e * m + t->d * f * m + t->e * m / p + t->d * m;
      /* Phase 1 sends each chunk as soon as it is encoded. Where the transport
       * moves it meanwhile, encodes and sends form a pipeline of p-1 stages,
       * which saves (p-2) min(encode, send) of one chunk. */
      if (t->overlap) x -= (p - 2) * fmin(t->e * m / p, frame / p * k.beta);
      return x;
    }
    /* ring-requant: the same traffic, but every reduce-scatter hop decodes,
     * adds and re-encodes a chunk. */
    case ALGO_RING_REQUANT:
      return 2.0 * (p - 1) * k.alpha + 2.0 * f * frame * k.beta + t->e * m / p + (p - 1) * (t->e + t->d) * m / p +
             t->d * m;
    /* sparse-ag: every rank receives the p-1 other frames whole and sums all p
     * (decoding a frame costs as its entries); the dense sum is zeroed first. */
    case ALGO_SPARSE_AG:
      return (p - 1) * k.alpha + (p - 1) * frame * k.beta + t->e * m + p * t->d * m + m * 4.0 * t->gr;
    /* sparse-sr: each owner receives its range of every frame ((p-1)/p of a
     * frame), sums them; the reduced ranges (at most p k entries in all, dense
     * once denser: SparCML's switch) are allgathered and decoded. */
    case ALGO_SPARSE_SR: {
      double reduced = fmin((double)p * frame, m * 4.0);
      return 2.0 * (p - 1) * k.alpha + f * frame * k.beta + f * reduced * k.beta + t->e * m + f * t->d * m +
             fmin((double)p * t->d * m, m * 4.0 * t->gr) + m * 4.0 * t->gr;
    }
    /* randk: only the k values travel, through a dense ring allreduce of k
     * values; gathering and scattering them costs an encode and a decode, and
     * the output is cleared whole first (a pass over the dense tensor: without
     * it the model fell 23-32% short of measured times). */
    case ALGO_RANDK:
      return dense_ring(p, frame, k, t->gr) + t->e * m + t->d * m + m * 4.0 * t->gr;
    /* powersgd: its products (measured as encode time), and dense allreduces of
     * its factors P (rows x rank) and Q (cols x rank). */
    case ALGO_POWERSGD:
      return t->e * m + dense_ring(p, t->lowrank_p_bytes, k, t->gr) + dense_ring(p, t->lowrank_q_bytes, k, t->gr);
    default:
      return -1.0;
  }
}

/* The codec's schedule among the nodes of hier, as hier.c asks the tuner for it:
 * p ranks, each on its own node, each with a share of m elements. */
static enum coll_algo flat_algo_for(const struct codec_spec* s, int p, double m) {
  return tuner_choose_compressed(COLL_ALLREDUCE, s, (size_t)m, p, 1, ALGO_AUTO);
}

double cost_allreduce(const struct cost_model* mdl, enum coll_algo algo, size_t count, size_t elem_bytes,
                      const struct codec_spec* s, const struct cost_codec* c, int compressed) {
  struct call_terms t = {0};
  t.p = mdl->nranks;
  t.L = mdl->local_size;
  t.nodes = (t.p + t.L - 1) / t.L;
  t.intra = mdl->intra;
  t.inter = mdl->inter;
  t.flat = t.nodes > 1 ? mdl->inter : mdl->intra;
  t.m = (double)count;
  t.n = (double)count * (double)elem_bytes;
  t.gr = mdl->reduce_s_per_byte;
  t.overlap = mdl->sends_overlap_compute;
  if (compressed) {
    if (!s || !c) return -1.0;
    t.e = c->encode_s_per_elem;
    t.d = c->decode_s_per_elem;
    t.w = c->wire_bytes_per_elem;
    if (s->codec == CODEC_POWERSGD) {
      struct powersgd_shape sh = powersgd_shape_of(s, count);
      t.lowrank_p_bytes = (double)(sh.rows * sh.rank * sizeof(float));
      t.lowrank_q_bytes = (double)(sh.cols * sh.rank * sizeof(float));
    }
  }
  int p = t.p;
  double f = p > 1 ? (double)(p - 1) / p : 0.0, lg = cost_log2_ceil(p);
  if (!compressed) switch (algo) {
      /* ring: 2(p-1)α + 2(p-1)/p nβ + (p-1)/p nγ */
      case ALGO_RING:
        return dense_ring(p, t.n, t.flat, t.gr);
      /* rhd: 2 log p α + 2(p-1)/p nβ + (p-1)/p nγ; p not a power of two adds the
       * fold and unfold of the extra ranks' whole vectors: 2α + 2nβ + nγ. */
      case ALGO_RHD: {
        double x = 2.0 * lg * t.flat.alpha + 2.0 * f * t.n * t.flat.beta + f * t.n * t.gr;
        if (p > 1 && (p & (p - 1)) != 0) x += 2.0 * t.flat.alpha + 2.0 * t.n * t.flat.beta + t.n * t.gr;
        return x;
      }
      /* tree: reduce up and broadcast down a binomial tree of whole vectors:
       * 2 log p (α + nβ) + log p nγ. */
      case ALGO_TREE:
        return 2.0 * lg * (t.flat.alpha + t.n * t.flat.beta) + lg * t.n * t.gr;
      /* hier: intra-node reduce-scatter and allgather ((L-1)α + (L-1)/L nβ each,
       * memory speed), a ring allreduce of n/L among the nodes. */
      case ALGO_HIER: {
        if (t.nodes <= 1 || t.L <= 1) return -1.0;
        double fl = (double)(t.L - 1) / t.L;
        return 2.0 * ((t.L - 1) * t.intra.alpha + fl * t.n * t.intra.beta) + fl * t.n * t.gr +
               dense_ring(t.nodes, t.n / t.L, t.inter, t.gr);
      }
      default:
        return -1.0;
    }
  if (algo != ALGO_HIER) return compressed_flat(&t, algo, p, t.m, t.flat);
  /* hier compressed: the dense intra-node steps of dense hier, and the codec's
   * flat schedule on m/L elements among the nodes at the inter-node link. */
  if (t.nodes <= 1 || t.L <= 1) return -1.0;
  double fl = (double)(t.L - 1) / t.L;
  return 2.0 * ((t.L - 1) * t.intra.alpha + fl * t.n * t.intra.beta) + fl * t.n * t.gr +
         compressed_flat(&t, flat_algo_for(s, t.nodes, t.m / t.L), t.nodes, t.m / t.L, t.inter);
}

double cost_best_dense_allreduce(const struct cost_model* m, size_t count, size_t elem_bytes, enum coll_algo* algo) {
  static const enum coll_algo dense[] = {ALGO_RING, ALGO_RHD, ALGO_TREE, ALGO_HIER};
  double best = -1.0;
  *algo = ALGO_RING;
  for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) {
    double x = cost_allreduce(m, dense[i], count, elem_bytes, NULL, NULL, 0);
    if (x >= 0.0 && (best < 0.0 || x < best)) {
      best = x;
      *algo = dense[i];
    }
  }
  return best;
}
