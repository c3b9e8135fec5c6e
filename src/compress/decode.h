/* decode.h — the codec-agnostic decoder (decode.c): a received frame is validated
 * whole before a byte of the tensor changes, then added into it, written over it,
 * or decoded a range at a time. Any codec's frame, from any compressor. */
#ifndef GCCL_COMPRESS_DECODE_H
#define GCCL_COMPRESS_DECODE_H

#include <stddef.h>

#include "compress/frame.h"
#include "gccl.h"

/* Validates a whole frame (header, CRC, payload, exceptions list) for a tensor
 * of count elements of dt and fills *h; gcclCorruptData on any inconsistency.
 * What frame_decode_accumulate checks first; the GPU decoder checks with it
 * before it copies a frame to the device. */
gcclResult_t frame_check(const void* frame, size_t frame_bytes, size_t count, gcclDataType_t dt,
                         struct frame_header* h);

/* The codec-agnostic decoder: validates the whole frame (header, CRC, payload,
 * exceptions) and only then adds it into dst (count elements of dt).
 * gcclCorruptData on any inconsistency, dst untouched. */
gcclResult_t frame_decode_accumulate(const void* frame, size_t frame_bytes, void* dst, size_t count, gcclDataType_t dt);

/* The accumulate half of frame_decode_accumulate, for a frame that frame_check
 * accepted (for dt) and whose header it filled in *h. */
gcclResult_t frame_accumulate_checked(const struct frame_header* h, const void* frame, void* dst, gcclDataType_t dt);

/* Ranges of a checked fp32 frame: elements [from, from + len) decoded into
 * dst[0, len), added (store = 0) or written as 0.0f + decoded (store = 1): the
 * bits that decoding the whole frame gives there. from is a multiple of
 * frame_range_granule(h), and so is len unless the range ends the tensor. The
 * granule is 0 for frames that cannot be decoded by ranges (top-k, random-k,
 * qsgd, terngrad, none), 1 for raw frames and fp16/bf16, else the bucket. */
size_t frame_range_granule(const struct frame_header* h);
gcclResult_t frame_decode_range(const struct frame_header* h, const void* frame, size_t from, size_t len, float* dst,
                                int store);

/* Writes an fp32 frame's n decoded elements to out (dtype dt): straight into out
 * when dt is fp32, else decoded into the fp32 area `stage` and rounded once by
 * f32_store, so every collective rounds its outputs alike. */
gcclResult_t frame_decode_f32_to(const void* frame, size_t frame_bytes, void* out, gcclDataType_t dt, size_t n,
                                 float* stage);

#endif
