/* dropin.c — GCCL_COMPRESS: which plain allreduce calls run compressed, and the
 * bounded table of their error-feedback state (see dropin.h). */
#include "core/dropin.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/cost_model.h"
#include "collectives/tuner.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "common/env.h"
#include "common/log.h"
#include "common/result.h"
#include "compress/compressor.h"
#include "core/comm.h"
#include "transport/transport.h"

struct dropin_entry {
  const void* buf; /* the key: send buffer, count, datatype */
  size_t count;
  gcclDataType_t dt;
  gcclCompressor_t comp;
  uint64_t last_use; /* the table's clock at the entry's latest call */
};

struct dropin {
  int auto_mode; /* GCCL_COMPRESS=auto:SPEC */
  struct codec_spec spec;
  char spec_text[SPEC_FORMAT_MAX]; /* canonical */
  size_t min_bytes;
  size_t bound; /* entries kept while the communicator is idle */
  struct cost_model model;
  struct cost_codec rates; /* auto mode */

  /* Counted without the lock: a dense call's only work here (each small call
   * pays it, and on one node under auto: every call). */
  _Atomic uint64_t dense_calls;

  pthread_mutex_t mu; /* guards what follows */
  struct dropin_entry* table;
  size_t entries, capacity;
  uint64_t clock;
  struct dropin_stats stats;
};

#define AUTO_PREFIX "auto:"

gcclResult_t dropin_create(struct dropin** out, int nranks, int local_size, int measure) {
  *out = NULL;
  const char* env = env_str("GCCL_COMPRESS");
  if (!env) return gcclSuccess;
  int auto_mode = strncmp(env, AUTO_PREFIX, strlen(AUTO_PREFIX)) == 0;
  const char* spec = auto_mode ? env + strlen(AUTO_PREFIX) : env;
  /* A compressor of no elements checks everything a real one will need (the
   * spec, zstd support) at no cost, and gives the canonical text. */
  gcclCompressor_t probe;
  if (compressor_handle_create(&probe, spec, 0, gcclFloat32) != gcclSuccess) {
    GCCL_WARN("ignoring GCCL_COMPRESS=%s: %s; allreduce stays dense", env, err_last());
    return gcclSuccess;
  }
  struct codec_spec parsed = probe->spec;
  char text[SPEC_FORMAT_MAX];
  snprintf(text, sizeof text, "%s", probe->spec_text);
  compressor_handle_destroy(probe);
  if (parsed.codec == CODEC_NONE) {
    GCCL_INFO(LOG_INIT, "GCCL_COMPRESS=%s: codec none, allreduce stays dense", env);
    return gcclSuccess;
  }

  struct dropin* d = calloc(1, sizeof *d);
  if (!d) return err_set(gcclSystemError, "out of memory allocating the GCCL_COMPRESS table");
  d->auto_mode = auto_mode;
  d->spec = parsed;
  memcpy(d->spec_text, text, sizeof text);
  d->min_bytes = (size_t)env_int("GCCL_COMPRESS_MIN_BYTES", (int64_t)DROPIN_MIN_BYTES_DEFAULT);
  int64_t bound = env_int("GCCL_COMPRESS_TABLE", DROPIN_TABLE_DEFAULT);
  if (bound < 1) {
    GCCL_WARN("ignoring GCCL_COMPRESS_TABLE=%lld: the table needs room for one buffer at least", (long long)bound);
    bound = DROPIN_TABLE_DEFAULT;
  }
  d->bound = (size_t)bound;
  cost_model_links(&d->model, nranks, local_size);
  if (auto_mode && measure) {
    d->model.reduce_s_per_byte = cost_reduce_rate((struct cost_workspace){NULL, 0});
    if (cost_codec_measure(d->spec_text, &d->rates, (struct cost_workspace){NULL, 0}) != gcclSuccess) {
      GCCL_WARN("ignoring GCCL_COMPRESS=%s: measuring the codec failed (%s); allreduce stays dense", env, err_last());
      free(d);
      return gcclSuccess;
    }
  }
  pthread_mutex_init(&d->mu, NULL);
  GCCL_INFO(LOG_INIT, "GCCL_COMPRESS: allreduce of float tensors >= %zu bytes with sum/avg %s %s; table of %zu buffers",
            d->min_bytes, auto_mode ? "compressed where the model predicts a gain, with" : "compressed with",
            d->spec_text, d->bound);
  *out = d;
  return gcclSuccess;
}

void dropin_destroy(struct dropin* d) {
  if (!d) return;
  for (size_t i = 0; i < d->entries; i++) compressor_handle_destroy(d->table[i].comp);
  free(d->table);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

/* ---- the decision ------------------------------------------------------------------ */

/* Why a call stays dense before the model is asked; NULL when it may compress. */
static const char* dense_reason(const struct dropin* d, const struct coll_args* a) {
  if (!dtype_is_float(a->dt)) return "not a float datatype";
  if (a->op != gcclSum && a->op != gcclAvg) return "op is neither sum nor avg";
  if (a->count * dtype_size(a->dt) < d->min_bytes) return "smaller than GCCL_COMPRESS_MIN_BYTES";
  size_t es = dtype_size(a->dt);
  if ((uintptr_t)a->sendbuff % es || (uintptr_t)a->recvbuff % es) return "buffers not aligned to their elements";
  return NULL;
}

/* auto:SPEC — whether the model predicts the compressed call faster than the best
 * dense one. Every input is equal on every rank (cost_model.h). Never within one
 * node: nothing crosses a slow link there, and compressing cost 1.23-1.29x at
 * 64-128 KiB on shared memory (issue 30). */
static int model_says_compress(const struct dropin* d, gcclComm_t comm, const struct coll_args* a) {
  size_t es = dtype_size(a->dt), bytes = a->count * es;
  if (comm->ctx.local_size >= comm->nranks || comm->tp->shares_address_space) {
    GCCL_INFO(LOG_TUNING, "AllReduce drop-in auto: %zu bytes %s: every rank on one node: stay dense", bytes,
              dtype_name(a->dt));
    return 0;
  }
  enum coll_algo calgo = tuner_choose_compressed(COLL_ALLREDUCE, &d->spec, a->count, comm->nranks, comm->ctx.local_size,
                                                 comm->forced_algo);
  enum coll_algo dalgo;
  double dense = cost_best_dense_allreduce(&d->model, a->count, es, &dalgo);
  double comp = cost_allreduce(&d->model, calgo, a->count, es, &d->spec, &d->rates, 1);
  int compress = comp >= 0.0 && comp < dense;
  GCCL_INFO(LOG_TUNING, "AllReduce drop-in auto: %zu bytes %s: %s %s predicted %.3f ms, dense %s %.3f ms: %s", bytes,
            dtype_name(a->dt), algo_name(calgo), d->spec_text, comp * 1e3, algo_name(dalgo), dense * 1e3,
            compress ? "compress" : "stay dense");
  return compress;
}

/* ---- auto: rank 0's figures ------------------------------------------------------------ */

/* What every rank's model takes from rank 0. */
struct dropin_figures {
  struct cost_codec rates;
  double reduce_s_per_byte;
};
_Static_assert(sizeof(struct dropin_figures) <= TP_SMALL_MAX, "rank 0's figures travel by allgather_small");

int dropin_measures(gcclComm_t comm) {
  return comm->dropin && comm->dropin->auto_mode;
}

/* Rank 0's host figures, in the communicator's scratch (no call runs yet). A
 * codec that cannot be measured is taken as infinitely slow: auto: stays dense. */
static void measure_host(gcclComm_t comm, struct dropin_figures* mine) {
  struct dropin* d = comm->dropin;
  struct cost_workspace ws = {comm->ctx.scratch, comm->ctx.scratch_bytes};
  mine->reduce_s_per_byte = cost_reduce_rate(ws);
  if (cost_codec_measure(d->spec_text, &mine->rates, ws) != gcclSuccess) {
    GCCL_WARN("GCCL_COMPRESS=auto:%s: measuring the codec failed (%s); allreduce stays dense", d->spec_text,
              err_last());
    mine->rates.encode_s_per_elem = INFINITY;
  }
}

gcclResult_t dropin_measure(gcclComm_t comm) {
  struct dropin* d = comm->dropin;
  if (!dropin_measures(comm)) return gcclSuccess;
  int64_t start = clock_now_ns();
  struct dropin_figures mine = {d->rates, d->model.reduce_s_per_byte};
  /* On one node auto: never compresses, so nothing is measured there; across
   * nodes only rank 0's figures count, so only rank 0 times this host. */
  int spans_nodes = comm->ctx.local_size < comm->nranks;
  if (spans_nodes && comm->rank == 0) measure_host(comm, &mine);
  struct dropin_figures all[comm->nranks];
  GCCL_CHECK(tp_allgather_small(comm->tp, &mine, sizeof mine, all));
  if (spans_nodes) /* link_measure's figures: rank 0's, or the environment's, on every rank */
    d->model.inter = (struct cost_link){comm->link.alpha, comm->link.beta};
  d->model.reduce_s_per_byte = all[0].reduce_s_per_byte;
  d->rates = all[0].rates;
  if (spans_nodes)
    GCCL_INFO(LOG_INIT,
              "GCCL_COMPRESS=auto:%s: the link between nodes %s %.3g Gbit/s, %.3g us (rank 0's figures; %.1f ms)",
              d->spec_text, comm->link.measured ? "measured at" : "set by the environment to",
              8e-9 / d->model.inter.beta, d->model.inter.alpha * 1e6, (double)(clock_now_ns() - start) * 1e-6);
  else
    GCCL_INFO(LOG_INIT, "GCCL_COMPRESS=auto:%s: every rank on one node: calls stay dense", d->spec_text);
  return gcclSuccess;
}

/* ---- the table --------------------------------------------------------------------- */

static int comm_idle(gcclComm_t comm) {
  return atomic_load(&comm->pending) == 0;
}

/* Destroys least recently used entries down to the bound. Only while no call is
 * queued or running: those may hold any entry's compressor. */
static void trim(struct dropin* d, gcclComm_t comm) {
  if (d->entries <= d->bound || !comm_idle(comm)) return;
  while (d->entries > d->bound) {
    size_t lru = 0;
    for (size_t i = 1; i < d->entries; i++)
      if (d->table[i].last_use < d->table[lru].last_use) lru = i;
    GCCL_INFO(LOG_COLL, "AllReduce drop-in: evicting the state of buffer %p (%zu %s)", d->table[lru].buf,
              d->table[lru].count, dtype_name(d->table[lru].dt));
    compressor_handle_destroy(d->table[lru].comp);
    d->table[lru] = d->table[--d->entries];
    d->stats.evictions++;
  }
}

/* The entry of a's key, made when missing. Called with d->mu held. */
static gcclResult_t acquire(struct dropin* d, gcclComm_t comm, const struct coll_args* a, gcclCompressor_t* out) {
  struct dropin_entry* e = NULL;
  for (size_t i = 0; i < d->entries && !e; i++) {
    struct dropin_entry* x = &d->table[i];
    if (x->buf == a->sendbuff && x->count == a->count && x->dt == a->dt) e = x;
  }
  if (!e) {
    if (d->entries == d->capacity) {
      size_t cap = d->capacity ? 2 * d->capacity : (d->bound < 16 ? d->bound : 16);
      struct dropin_entry* grown = realloc(d->table, cap * sizeof *grown);
      if (!grown) return err_set(gcclSystemError, "gcclAllReduce: out of memory growing the GCCL_COMPRESS table");
      d->table = grown;
      d->capacity = cap;
    }
    gcclCompressor_t c;
    GCCL_CHECK(compressor_handle_create(&c, d->spec_text, a->count, a->dt));
    e = &d->table[d->entries++];
    *e = (struct dropin_entry){a->sendbuff, a->count, a->dt, c, 0};
  }
  e->last_use = ++d->clock;
  *out = e->comp;
  trim(d, comm); /* after last_use: the entry just used is the newest, never the one evicted */
  return gcclSuccess;
}

gcclResult_t dropin_route(gcclComm_t comm, const struct coll_args* a, gcclCompressor_t* comp) {
  *comp = NULL;
  struct dropin* d = comm->dropin;
  if (!d) return gcclSuccess;
  log_set_rank(comm->rank);
  const char* why = dense_reason(d, a);
  int compress = !why && (!d->auto_mode || model_says_compress(d, comm, a));
  if (!compress) {
    atomic_fetch_add_explicit(&d->dense_calls, 1, memory_order_relaxed);
    GCCL_INFO(LOG_COLL, "AllReduce drop-in: %zu %s %s at %p stays dense: %s", a->count, dtype_name(a->dt),
              op_name(a->op), a->sendbuff, why ? why : "the model predicts dense faster");
    return gcclSuccess;
  }
  pthread_mutex_lock(&d->mu);
  gcclResult_t res = acquire(d, comm, a, comp);
  if (res == gcclSuccess) d->stats.compressed++;
  pthread_mutex_unlock(&d->mu);
  if (res == gcclSuccess)
    GCCL_INFO(LOG_COLL, "AllReduce drop-in: %zu %s %s at %p compressed with %s", a->count, dtype_name(a->dt),
              op_name(a->op), a->sendbuff, d->spec_text);
  return res;
}

/* ---- for tests ------------------------------------------------------------------------ */

int dropin_get_stats(gcclComm_t comm, struct dropin_stats* out) {
  memset(out, 0, sizeof *out);
  struct dropin* d = comm->dropin;
  if (!d) return 0;
  pthread_mutex_lock(&d->mu);
  *out = d->stats;
  out->dense = atomic_load_explicit(&d->dense_calls, memory_order_relaxed);
  out->entries = d->entries;
  pthread_mutex_unlock(&d->mu);
  return 1;
}

gcclCompressor_t dropin_compressor_for(gcclComm_t comm, const void* buf, size_t count, gcclDataType_t dt) {
  struct dropin* d = comm->dropin;
  gcclCompressor_t c = NULL;
  if (!d) return NULL;
  pthread_mutex_lock(&d->mu);
  for (size_t i = 0; i < d->entries && !c; i++)
    if (d->table[i].buf == buf && d->table[i].count == count && d->table[i].dt == dt) c = d->table[i].comp;
  pthread_mutex_unlock(&d->mu);
  return c;
}

gcclResult_t dropin_reload(gcclComm_t comm) {
  struct dropin* fresh;
  GCCL_CHECK(dropin_create(&fresh, comm->nranks, comm->ctx.local_size, 1));
  dropin_destroy(comm->dropin);
  comm->dropin = fresh;
  return gcclSuccess;
}
