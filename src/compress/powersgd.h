/* powersgd.h — the state of a powersgd compressor (codec_powersgd.c), which the
 * low-rank allreduce (collectives/powersgd.c) runs on.
 *
 * PowerSGD (Vogels et al., NeurIPS 2019) reads a tensor of n elements as a
 * row-major matrix M of `cols` columns (the last row zero-padded) and sends two
 * thin factors instead of it: P = M Q (rows x rank) and Q = M^T P (cols x rank),
 * each summed over ranks by a dense allreduce, with P orthonormalised between
 * the two. Q carries over from call to call (a warm start: one power iteration
 * per call refines the last call's subspace). There are no frames: the codec
 * exists as a spec, a residual and this state. */
#ifndef GCCL_COMPRESS_POWERSGD_H
#define GCCL_COMPRESS_POWERSGD_H

#include <stddef.h>
#include <stdint.h>

#include "compress/spec.h"
#include "gccl.h"

struct powersgd_shape {
  size_t rows, cols, rank; /* rank = min(spec rank, rows, cols) */
};

/* The matrix of n > 0 elements: spec cols, or near-square (cols = ceil(sqrt(n)),
 * as PyTorch's batched_powerSGD_hook). */
struct powersgd_shape powersgd_shape_of(const struct codec_spec* s, size_t n);

/* Floats of M a product takes at a time (powersgd_steps.c): 128 KiB, in L2 with
 * the block of P Q'^T made from them. */
#define POWERSGD_BLOCK_FLOATS ((size_t)1 << 15)

/* Rows of M in a block (at least one). */
static inline size_t powersgd_block_rows(struct powersgd_shape sh) {
  size_t block = POWERSGD_BLOCK_FLOATS / sh.cols ? POWERSGD_BLOCK_FLOATS / sh.cols : 1;
  return block < sh.rows ? block : sh.rows;
}

/* Where a call is between its steps (powersgd_steps.c). */
enum powersgd_step { POWERSGD_IDLE, POWERSGD_HAS_P, POWERSGD_HAS_Q };

struct blas_api;

struct powersgd_state {
  struct powersgd_shape shape;
  const struct blas_api* blas; /* its products' CBLAS (blas.h) */
  float* m;                    /* rows x cols: input + residual, padded */
  float* p;                    /* rows x rank */
  float* q;                    /* cols x rank: the committed Q, the next call's start */
  float* q_next;               /* cols x rank: this call's Q, current after commit */
  float* block;                /* powersgd_block_rows x cols: a block of the output */
  int staged;                  /* q_next holds a Q that the compressor's commit makes current */
  enum powersgd_step step;
};

/* One rank's steps of a call (powersgd_steps.c), with the sums over ranks
 * between them left to the caller; c is a powersgd compressor.
 * compute_p: M = src (c->count elements of dt) + residual; p (rows x rank) = M Q.
 * compute_q: p_sum (p summed over ranks) copied into the state's p unless it
 *   is that one, orthonormalised there; q (cols x rank) = M^T p, or all NaN
 *   when p_sum is not finite.
 * compute_output: dst (c->count elements of dt) = p q^T, the sum over nranks
 *   ranks (not divided); residual M - dst / nranks and q staged for the
 *   compressor's commit; NaN everywhere and the old residual when q (summed) is
 *   not finite. */
struct gcclCompressor;
gcclResult_t powersgd_compute_p(struct gcclCompressor* c, const void* src, gcclDataType_t dt, float* p);
void powersgd_compute_q(struct gcclCompressor* c, const float* p_sum, float* q);
void powersgd_compute_output(struct gcclCompressor* c, const float* q, void* dst, gcclDataType_t dt, int nranks);

#endif
