/* reduce.h — vectorised element-wise reduction kernels for every datatype and op. */
#ifndef GCCL_COMMON_REDUCE_H
#define GCCL_COMMON_REDUCE_H

#include <stddef.h>

#include "gccl.h"

/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], for i < count,
 * combined strictly in the order of srcs (so results are reproducible).
 * gcclAvg reduces as gcclSum here: the caller divides once at the end with
 * reduce_divide. fp16 and bf16 accumulate all nsrc inputs in fp32 and round once.
 * dst may be the same pointer as any of srcs (every source element i is read
 * before dst[i] is written); other overlaps are not allowed. nsrc >= 1.
 * Integer sums and products wrap (computed unsigned, no undefined behaviour).
 * Floating max/min propagate NaN. Arguments are trusted (checked by callers). */
void reduce_n(void* dst, const void* const* srcs, int nsrc, size_t count, gcclDataType_t dt, gcclRedOp_t op);

/* dst[i] = a[i] op b[i]: reduce_n with two sources. */
void reduce_2(void* dst, const void* a, const void* b, size_t count, gcclDataType_t dt, gcclRedOp_t op);

/* buf[i] /= divisor, in place: the final step of gcclAvg (integer division,
 * truncating, for integer types; fp16/bf16 divide in fp32 and round once). */
void reduce_divide(void* buf, size_t count, gcclDataType_t dt, int divisor);

#endif
