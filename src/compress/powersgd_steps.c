/* powersgd_steps.c — PowerSGD's arithmetic between its two sums, for one rank:
 * the low-rank allreduce (collectives/powersgd.c) runs these with its own dense
 * allreduces between them, the public gcclPowerSgd* calls (core/lowrank_api.c)
 * with the caller's (torch.distributed's, say). Products through CBLAS (blas.h).
 *
 *   compute_p       M = input + residual;  P = M Q             (then P summed)
 *   compute_q       P (summed) kept and orthonormalised; Q' = M^T P  (then Q' summed)
 *   compute_output  out = P Q'^T;          e = M - out / p     (Q' the next Q)
 *
 * Every rank gets the same bits: P and Q' are identical after their sums, and
 * each step after a sum computes the same thing from the same data (BLAS on
 * hosts of one CPU type; kernels chosen per CPU type could differ). A
 * non-finite value in any rank's M makes the summed P non-finite everywhere:
 * compute_q then hands on an all-NaN Q', whose sum is NaN on every rank, and
 * compute_output writes NaN and stages the old residual and no new Q. So the
 * sums always run (the caller need not know) and nothing is dropped silently. */
#include "compress/powersgd.h"

#include <math.h>
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/blas.h"
#include "compress/compressor.h"

static int all_finite(const float* x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return 0;
  return 1;
}

/* Orthonormal columns of the rows x r row-major P: Gram-Schmidt with every
 * projection done twice ("twice is enough", Giraud et al. 2005). Once is not:
 * a column that is nearly a combination of the earlier ones (a sum of rank
 * below r) keeps, after one pass, rounding noise with a large part along them,
 * and normalised that noise breaks P P^T M = M. A column that cancels to below
 * 2^-20 of its norm carries no direction and becomes 0. */
static void orthonormalise(const struct blas_api* blas, float* p, size_t rows, size_t r) {
  for (size_t j = 0; j < r; j++) {
    float before = blas->snrm2((int)rows, p + j, (int)r);
    for (int pass = 0; pass < 2; pass++)
      for (size_t i = 0; i < j; i++) {
        float d = blas->sdot((int)rows, p + i, (int)r, p + j, (int)r);
        blas->saxpy((int)rows, -d, p + i, (int)r, p + j, (int)r);
      }
    float norm = blas->snrm2((int)rows, p + j, (int)r);
    blas->sscal((int)rows, norm > before * 0x1p-20f ? 1.0f / norm : 0.0f, p + j, (int)r);
  }
}

/* Each product goes over M a block of rows at a time (powersgd_block_rows), so
 * that the block is in cache while BLAS packs and multiplies it: the input and
 * residual become M and P in one pass over memory, Q' in one more, and the
 * output and new residual in a third. Blocks this small also keep OpenBLAS on
 * the calling thread (it spreads only larger products over its own threads),
 * which the caller's ranks already occupy. */

gcclResult_t powersgd_compute_p(struct gcclCompressor* c, const void* src, gcclDataType_t dt, float* p) {
  struct powersgd_state* st = c->state;
  struct powersgd_shape sh = st->shape;
  size_t n = c->count, cols = sh.cols, r = sh.rank, block = powersgd_block_rows(sh);
  for (size_t row = 0; row < sh.rows; row += block) {
    size_t nr = sh.rows - row < block ? sh.rows - row : block, at = row * cols;
    size_t len = at + nr * cols <= n ? nr * cols : n - at;
    /* every element's residual is restaged by compute_output */
    GCCL_CHECK(compressor_stage_input(c, src, dt, at, len, st->m));
    memset(st->m + at + len, 0, (nr * cols - len) * sizeof(float)); /* the last row's padding */
    st->blas->sgemm(BLAS_ROW_MAJOR, BLAS_NO_TRANS, BLAS_NO_TRANS, (int)nr, (int)r, (int)cols, 1.0f, st->m + at,
                    (int)cols, st->q, (int)r, 0.0f, p + row * r, (int)r);
  }
  st->step = POWERSGD_HAS_P;
  return gcclSuccess;
}

void powersgd_compute_q(struct gcclCompressor* c, const float* p_sum, float* q) {
  struct powersgd_state* st = c->state;
  struct powersgd_shape sh = st->shape;
  size_t cols = sh.cols, r = sh.rank, block = powersgd_block_rows(sh);
  float* p = st->p;
  if (p_sum != p) memcpy(p, p_sum, sh.rows * r * sizeof(float));
  st->step = POWERSGD_HAS_Q;
  if (!all_finite(p, sh.rows * r)) {
    for (size_t i = 0; i < cols * r; i++) q[i] = NAN;
    return;
  }
  orthonormalise(st->blas, p, sh.rows, r);
  for (size_t row = 0; row < sh.rows; row += block) { /* Q' = sum over blocks of M_b^T P_b */
    size_t nr = sh.rows - row < block ? sh.rows - row : block;
    st->blas->sgemm(BLAS_ROW_MAJOR, BLAS_TRANS, BLAS_NO_TRANS, (int)cols, (int)r, (int)nr, 1.0f, st->m + row * cols,
                    (int)cols, p + row * r, (int)r, row ? 1.0f : 0.0f, q, (int)r);
  }
}

/* The output when some rank's input was not finite: NaN everywhere, the old
 * residual staged, no new Q. */
static void non_finite_out(struct gcclCompressor* c, void* dst, gcclDataType_t dt) {
  float nan = NAN;
  size_t size = dtype_size(dt);
  for (size_t i = 0; i < c->count; i++) f32_store((unsigned char*)dst + i * size, dt, &nan, 1);
  if (c->spec.ef) memcpy(c->work, c->residual, c->count * sizeof(float));
}

void powersgd_compute_output(struct gcclCompressor* c, const float* q, void* dst, gcclDataType_t dt, int nranks) {
  struct powersgd_state* st = c->state;
  struct powersgd_shape sh = st->shape;
  const float* p = st->p;
  size_t n = c->count, rows = sh.rows, cols = sh.cols, r = sh.rank;
  st->step = POWERSGD_IDLE;
  if (!all_finite(q, cols * r)) {
    non_finite_out(c, dst, dt);
    return;
  }
  /* each block of out = P Q'^T goes to dst (in its dtype) and into the residual
   * while still in cache, instead of three passes over a tensor-sized out */
  size_t block = powersgd_block_rows(sh);
  float share = 1.0f / (float)nranks, *out = st->block;
  size_t size = dtype_size(dt);
  for (size_t row = 0; row < rows; row += block) {
    size_t nr = rows - row < block ? rows - row : block, at = row * cols;
    size_t len = at + nr * cols <= n ? nr * cols : n - at; /* the padding is not written */
    st->blas->sgemm(BLAS_ROW_MAJOR, BLAS_NO_TRANS, BLAS_TRANS, (int)nr, (int)cols, (int)r, 1.0f, p + row * r, (int)r, q,
                    (int)r, 0.0f, out, (int)cols);
    if (c->spec.ef)
      for (size_t i = 0; i < len; i++) c->work[at + i] = st->m[at + i] - out[i] * share;
    f32_store((unsigned char*)dst + at * size, dt, out, len);
  }
  if (q != st->q_next) memcpy(st->q_next, q, cols * r * sizeof(float));
  st->staged = 1; /* Q' becomes the next call's Q when the compressor commits */
}
