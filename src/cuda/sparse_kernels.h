/* sparse_kernels.h — launchers of the sparse codecs' kernels (topk_kernels.cu,
 * randk_kernels.cu), called from C; conventions as gpu_kernels.h. */
#ifndef GCCL_CUDA_SPARSE_KERNELS_H
#define GCCL_CUDA_SPARSE_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "compress/topk_sample.h"
#include "gccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the top-k select leaves on the device: T = prefix (the K-th largest
 * eligible key), K = kept, the ties at T still to keep (remaining), and the
 * index below which ties at T are kept. */
typedef struct {
  uint32_t prefix;
  unsigned long long kept, remaining, cutoff;
} gk_topk_state;

/* Bins of the select's histogram (unsigned each). */
#define GK_TOPK_BINS 2048

/* Device scratch bytes the CUB steps of top-k need for n elements, and for
 * decoding a high part of high_words 32-bit words. */
size_t gk_topk_scratch(size_t n, size_t high_words);

/* approx=1's sample: the first element of each chunk (topk_sample_start). */
typedef struct {
  size_t start[TOPK_SAMPLE_CHUNKS];
} gk_topk_sample_starts;

/* keys[c * TOPK_SAMPLE_LEN + j] = key of x[start[c] + j], x = src (+ resid_in). */
cudaError_t gk_topk_sample(const void* src, gcclDataType_t dt, const float* resid_in,
                           const gk_topk_sample_starts* starts, uint32_t* keys, cudaStream_t s);

/* Top-k of x = src (+ resid_in), K = min(k, #{eligible, key >= floor}) (floor 0:
 * exact top-k): kept[0, K) = the kept indices, increasing;
 * counts[0] = exceptions (key >= exc_key), counts[1] = ties at T, counts[2] = K;
 * resid_out (if not NULL) = x, 0 at exceptions (gk_topk_write then fixes the kept
 * ones). ties: n entries; kept: min(k, n) entries. */
cudaError_t gk_topk_select(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out, size_t n,
                           size_t k, uint32_t exc_key, uint32_t floor, gk_topk_state* st, unsigned* hist,
                           unsigned long long* ties, unsigned long long* kept, unsigned long long* counts,
                           void* scratch, size_t scratch_bytes, cudaStream_t s);

/* The frame's values (vt: 0 fp32, 1 fp16, 2 bf16) at `values`, the Elias-Fano
 * section (L low bits, low part of low_bytes, section_bytes in all) at `section`
 * (4-byte aligned; zeroed here), and resid_out at kept indices. */
cudaError_t gk_topk_write(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                          const unsigned long long* kept, size_t count, int vt, unsigned L, size_t low_bytes,
                          size_t section_bytes, unsigned char* values, unsigned* section, cudaStream_t s);

/* dst += a validated top-k payload of k entries (values, then the section);
 * counts: (high_bytes + 3) / 4 unsigned of scratch. */
cudaError_t gk_topk_decode(const unsigned char* payload, size_t k, int vt, unsigned L, size_t low_bytes,
                           size_t high_bytes, unsigned* counts, void* scratch, size_t scratch_bytes, void* dst,
                           gcclDataType_t dt, cudaStream_t s);

/* random-k: resid_out (if not NULL) = x, 0 where key >= exc_key; counts[0] =
 * exceptions; then the k values at randk_index(key, n, k, j) (0 for exceptions)
 * and resid_out there = x - decoded. */
cudaError_t gk_randk_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out, size_t n,
                            size_t k, uint64_t key, int vt, uint32_t exc_key, unsigned char* values,
                            unsigned long long* counts, cudaStream_t s);
/* dst[randk_index(key, n, k, j)] += value j. */
cudaError_t gk_randk_decode(const unsigned char* values, size_t n, size_t k, uint64_t key, int vt, void* dst,
                            gcclDataType_t dt, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
