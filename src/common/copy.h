/* copy.h — bulk copies (and sums) that bypass the cache. */
#ifndef GCCL_COMMON_COPY_H
#define GCCL_COMMON_COPY_H

#include <stddef.h>

/* Copies bytes from src to dst (no overlap) with non-temporal stores where the
 * CPU has them: the destination lines are not read first (no read-for-ownership)
 * and do not evict the caller's working set. Stores are weakly ordered: call
 * copy_stream_fence() before another thread may read dst. */
void copy_stream(void* dst, const void* src, size_t bytes);
void copy_stream_fence(void);

/* dst[i] = a[i] + b[i] for i < n (dst may be a or b, or overlap neither), with
 * the same non-temporal stores: for sums too large to stay in cache, such as
 * input + residual of a whole tensor that the codec then reads once. */
void add_stream_f32(float* dst, const float* a, const float* b, size_t n);

#endif
