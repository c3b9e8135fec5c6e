/* topk_sample.h — approx=1's sampled threshold (topk_select.c's module comment
 * says what is kept), shared with the GPU encoder so that both read the same
 * threshold off the same sample. The sample is TOPK_SAMPLE_CHUNKS chunks of
 * TOPK_SAMPLE_LEN elements. */
#ifndef GCCL_COMPRESS_TOPK_SAMPLE_H
#define GCCL_COMPRESS_TOPK_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define TOPK_SAMPLE_CHUNKS 256
#define TOPK_SAMPLE_LEN 256

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when approx=1 reads its threshold off the sample for n elements with k
 * kept; otherwise approx=1 keeps what exact top-k keeps. */
int topk_approx_samples(size_t n, size_t k);
/* The first element of sample chunk s (< TOPK_SAMPLE_CHUNKS) of n elements. */
size_t topk_sample_start(size_t s, size_t n);
/* The threshold t (0: keep every eligible element) from the m eligible keys
 * (key < topk_exc_key) of the sample, in sample order; kept = top(min(k, #{key
 * >= t})). tmp: m entries, hist: 2048 of scratch. */
uint32_t topk_approx_threshold(const uint32_t* keys, size_t m, size_t n, size_t k, uint32_t* tmp, size_t* hist);

#ifdef __cplusplus
}
#endif

#endif
