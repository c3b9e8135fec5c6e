/* copy.h — bulk copies that bypass the cache for data another core will read. */
#ifndef GCCL_COMMON_COPY_H
#define GCCL_COMMON_COPY_H

#include <stddef.h>

/* Copies bytes from src to dst (no overlap) with non-temporal stores where the
 * CPU has them: the destination lines are not read first (no read-for-ownership)
 * and do not evict the caller's working set. Stores are weakly ordered: call
 * copy_stream_fence() before another thread may read dst. */
void copy_stream(void* dst, const void* src, size_t bytes);
void copy_stream_fence(void);

#endif
