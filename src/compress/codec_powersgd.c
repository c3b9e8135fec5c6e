/* codec_powersgd.c — the powersgd codec: its matrix shape, its state (the
 * matrix, the factors, the warm-started Q) and its refusal of frames.
 *
 * What the codec computes is in powersgd_steps.c, run by its allreduce
 * (collectives/powersgd.c) or by the gcclPowerSgd* calls: the factors are
 * summed between its steps, so there is no frame a rank could encode alone,
 * and gcclEncode refuses the spec. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "common/result.h"
#include "compress/blas.h"
#include "compress/codec.h"
#include "compress/powersgd.h"
#include "compress/rng.h"

struct powersgd_shape powersgd_shape_of(const struct codec_spec* s, size_t n) {
  struct powersgd_shape sh;
  size_t cols = (size_t)s->cols;
  if (cols == 0) {
    cols = (size_t)ceil(sqrt((double)n));
    while (cols > 1 && (cols - 1) * (cols - 1) >= n) cols--; /* sqrt's rounding */
    while (cols * cols < n) cols++;
  }
  if (cols == 0 || cols > n) cols = n ? n : 1; /* n = 0: a 1 x 1 matrix of padding */
  sh.cols = cols;
  sh.rows = n ? (n + cols - 1) / cols : 1;
  size_t r = s->rank;
  if (r > sh.rows) r = sh.rows;
  if (r > sh.cols) r = sh.cols;
  sh.rank = r ? r : 1;
  return sh;
}

/* Bytes a call moves per rank: the two factors, fp32 (what gccl-bench's ratio
 * and the cost model count; no frame carries them). */
static size_t powersgd_payload_bound(const struct codec_spec* s, size_t n) {
  struct powersgd_shape sh = powersgd_shape_of(s, n);
  return (sh.rows + sh.cols) * sh.rank * sizeof(float);
}

/* Q's first value: uniform in [-1, 1) from the seed alone, the same on every rank. */
static void q_init(const struct codec_spec* s, float* q, size_t len) {
  uint64_t key = rng_key(s->seed, 0, 0x9057u);
  for (size_t i = 0; i < len; i++) q[i] = 2.0f * rng_uniform(key, i) - 1.0f;
}

static void powersgd_state_destroy(void* state) {
  struct powersgd_state* st = state;
  if (!st) return;
  struct powersgd_shape sh = st->shape;
  arena_free(st->m, sh.rows * sh.cols * sizeof(float));
  arena_free(st->p, sh.rows * sh.rank * sizeof(float));
  arena_free(st->q, sh.cols * sh.rank * sizeof(float));
  arena_free(st->q_next, sh.cols * sh.rank * sizeof(float));
  arena_free(st->block, powersgd_block_rows(sh) * sh.cols * sizeof(float));
  free(st);
}

static gcclResult_t powersgd_state_create(const struct codec_spec* s, size_t n, void** state) {
  struct powersgd_shape sh = powersgd_shape_of(s, n);
  if (sh.rows > INT_MAX || sh.cols > INT_MAX) /* CBLAS takes int dimensions */
    return err_set(gcclInvalidArgument, "powersgd: a %zu x %zu matrix is beyond CBLAS's int dimensions (cols=%llu)",
                   sh.rows, sh.cols, (unsigned long long)s->cols);
  const struct blas_api* blas = NULL;
  GCCL_CHECK(blas_get(&blas));
  struct powersgd_state* st = calloc(1, sizeof *st);
  if (!st) return err_set(gcclSystemError, "powersgd: out of memory for its state");
  st->shape = sh;
  st->blas = blas;
  gcclResult_t res = arena_alloc((void**)&st->m, sh.rows * sh.cols * sizeof(float));
  if (res == gcclSuccess) res = arena_alloc((void**)&st->p, sh.rows * sh.rank * sizeof(float));
  if (res == gcclSuccess) res = arena_alloc((void**)&st->q, sh.cols * sh.rank * sizeof(float));
  if (res == gcclSuccess) res = arena_alloc((void**)&st->q_next, sh.cols * sh.rank * sizeof(float));
  if (res == gcclSuccess) res = arena_alloc((void**)&st->block, powersgd_block_rows(sh) * sh.cols * sizeof(float));
  if (res != gcclSuccess) {
    powersgd_state_destroy(st);
    return res;
  }
  q_init(s, st->q, sh.cols * sh.rank);
  *state = st;
  return gcclSuccess;
}

static void powersgd_abort(void* state) {
  struct powersgd_state* st = state;
  st->staged = 0;
  st->step = POWERSGD_IDLE;
}

static void powersgd_commit(void* state) {
  struct powersgd_state* st = state;
  if (!st->staged) return;
  float* t = st->q;
  st->q = st->q_next;
  st->q_next = t;
  st->staged = 0;
  st->step = POWERSGD_IDLE;
}

static float* powersgd_carried(void* state, size_t* n) {
  struct powersgd_state* st = state;
  *n = st->shape.cols * st->shape.rank;
  return st->q;
}

static gcclResult_t powersgd_encode(struct encode_ctx* ctx, const float* x, float* resid, size_t n,
                                    unsigned char* payload, size_t* payload_bytes, struct frame_header* h) {
  (void)ctx, (void)x, (void)resid, (void)n, (void)payload, (void)payload_bytes, (void)h;
  return err_set(gcclInvalidUsage,
                 "powersgd has no frames: its factors are summed between its steps, so it runs only inside "
                 "gcclAllReduceCompressed");
}

static gcclResult_t powersgd_validate(const struct frame_header* h, const unsigned char* payload) {
  (void)h, (void)payload;
  return err_set(gcclCorruptData, "frame names codec powersgd, which has no frames");
}

static gcclResult_t powersgd_decode(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                    size_t nexc, void* dst) {
  (void)h, (void)payload, (void)exc, (void)nexc, (void)dst;
  return err_set(gcclCorruptData, "frame names codec powersgd, which has no frames");
}

const struct codec_ops codec_powersgd_ops = {
    .payload_bound = powersgd_payload_bound,
    .state_create = powersgd_state_create,
    .state_destroy = powersgd_state_destroy,
    .state_commit = powersgd_commit,
    .state_abort = powersgd_abort,
    .state_carried = powersgd_carried,
    .encode = powersgd_encode,
    .validate = powersgd_validate,
    .decode_accumulate = powersgd_decode,
};
