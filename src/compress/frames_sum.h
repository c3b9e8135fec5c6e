/* frames_sum.h — several checked frames summed, in order, into a fresh fp32 tensor. */
#ifndef GCCL_COMPRESS_FRAMES_SUM_H
#define GCCL_COMPRESS_FRAMES_SUM_H

#include <stddef.h>

#include "compress/frame.h"
#include "gccl.h"

/* dst[i] = ((0.0f + F0[i]) + F1[i]) + ... for i < n, where F_r is frames[r]
 * decoded and frame r adds nothing where it keeps nothing: the bits of clearing
 * dst (host memory) and frame_decode_accumulate'ing each frame in turn. Every
 * frame must be one that frame_check accepted as an fp32 frame of n elements,
 * with h[r] the header it filled in (so callers check each frame as it
 * arrives). Top-k and raw frames are summed a block of dst at a time, frames of
 * other codecs one after the other. gcclSystemError when out of memory;
 * gcclCorruptData only from a zstd index section that does not inflate. */
gcclResult_t frames_sum_f32(const unsigned char* const* frames, const struct frame_header* h, int nframes, float* dst,
                            size_t n);

#endif
