/* frame.h — the self-describing, checksummed frame every codec writes and validates. */
#ifndef GCCL_COMPRESS_FRAME_H
#define GCCL_COMPRESS_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "compress/spec.h"
#include "gccl.h"

/* A frame is a fixed 64-byte header, the codec's payload, then an exceptions list
 * that carries non-finite inputs verbatim (so inf/NaN survive lossy codecs). All
 * integers are little-endian; reserved bytes are zero.
 *
 *   offset  0        4    5    6    7    8                  16                 24
 *           +--------+----+----+----+----+------------------+------------------+
 *           | magic  |ver |codc|dtyp|flag| count       u64  | payload_bytes u64|
 *           +--------+----+----+----+----+------------------+------------------+
 *          24                 32   33   34        36        40
 *           +------------------+----+----+---------+---------+
 *           | exceptions  u64  |bits|vals| rsvd u16| bucket  |
 *           +------------------+----+----+---------+---------+
 *          40                 48                 56        60        64
 *           +------------------+------------------+---------+---------+
 *           | k           u64  | rng_key     u64  | rsvd u32| crc32c  |
 *           +------------------+------------------+---------+---------+
 *          64                    64 + payload_bytes
 *           +--------------------+------------------------------------------+
 *           | payload            | exceptions x (index u64, raw value dtype) |
 *           +--------------------+------------------------------------------+
 *
 * magic    "GCCF" (bytes 47 43 43 46).
 * ver      FRAME_VERSION; a receiver rejects any other.
 * codec    enum codec_id; dtype: gcclDataType_t of the tensor (float types only for
 *          lossy codecs).
 * flags    FRAME_FLAG_*; unknown bits are corrupt.
 * count    elements of the tensor; must equal the receiver's count.
 * bits     uniform, qsgd: 1..8; else 0.
 * values   topk, randk: enum spec_values of the carried values; else 0.
 * bucket   uniform, qsgd, sign, terngrad: elements per bucket, 1..2^24; else 0.
 * k        topk, randk: elements kept, <= count (the exact number, not the ratio,
 *          so sender and receiver never disagree on rounding ratio * count); else 0.
 * rng_key  randk: the key that regenerates the shared indices (from seed and call
 *          number), any value; else 0.
 * crc32c   CRC32C of bytes [64, end) followed by header bytes [0, 60) and four zero
 *          bytes: the body first, so an encoder can checksum payload while it
 *          is still in cache and finish with the header it only knows at the end.
 * Each exception is 8 + dtype_size(dtype) bytes, indices < count and increasing
 * (checked by the decoder that reads them). The frame is exactly
 * 64 + payload_bytes + exceptions * (8 + dtype_size) bytes. */

#define FRAME_MAGIC 0x46434347u /* "GCCF" read as a little-endian u32 */
#define FRAME_VERSION 1
#define FRAME_HEADER_BYTES 64
#define FRAME_CRC_OFFSET 60

/* Indices of topk are zstd-compressed. */
#define FRAME_FLAG_ZSTD 0x01u
/* The payload is the tensor verbatim (count elements of dtype) and there are no
 * exceptions: what an encoder sends when the codec's frame plus its exceptions
 * would be larger, so no frame exceeds 64 bytes + the raw tensor (by much; see
 * gcclEncodeBound). Legal for every codec. */
#define FRAME_FLAG_RAW 0x02u
#define FRAME_FLAGS_KNOWN (FRAME_FLAG_ZSTD | FRAME_FLAG_RAW)

/* The header as numbers. version and crc are filled in by frame_header_write and
 * by frame_validate. */
struct frame_header {
  uint8_t version;
  enum codec_id codec;
  gcclDataType_t dtype;
  uint8_t flags;
  uint64_t count;
  uint64_t payload_bytes;
  uint64_t exceptions;
  uint8_t bits;
  uint8_t values;
  uint32_t bucket;
  uint64_t k;
  uint64_t rng_key;
  uint32_t crc;
};

/* Bytes of one exception entry for dtype dt (0 for an invalid dt): u64 index, value. */
size_t frame_exception_bytes(gcclDataType_t dt);
/* The same for fp32 frames, as a constant for the collectives' loops. */
#define FRAME_EXCEPTION_BYTES_F32 (8 + sizeof(float))

/* *frame_bytes = total size of a frame with header h; gcclInvalidArgument if the
 * sizes overflow size_t or dtype is invalid. */
gcclResult_t frame_total_bytes(const struct frame_header* h, size_t* frame_bytes);

/* Writes h as the header at frame[0, 64) and the CRC over the whole frame, so it is
 * called last, once payload and exceptions are in place after the header. cap is
 * the buffer size. Returns gcclInvalidArgument if h breaks any rule frame_validate
 * checks or the frame does not fit in cap; nothing is written then. */
gcclResult_t frame_header_write(void* frame, size_t cap, const struct frame_header* h);

/* The same, given body_crc = crc32c(0, frame + 64, total - 64) already computed
 * by the caller (an encoder that checksums its payload while writing it). */
gcclResult_t frame_header_write_crc(void* frame, size_t cap, const struct frame_header* h, uint32_t body_crc);

/* The CRC field value of a frame of `total` bytes (header at frame[0, 64)). */
uint32_t frame_crc(const void* frame, size_t total);

/* Checks every header field and the CRC before any decoder reads the payload:
 * magic, version, codec known, dtype valid (and a float type unless codec is none),
 * count == expect_count, dtype == expect_dt, flags and parameters legal for the
 * codec, 64 + payload + exceptions == frame_bytes exactly (overflow-checked), CRC.
 * On success fills *out (may be NULL) and returns gcclSuccess; otherwise returns
 * gcclCorruptData with an err_set message naming the field, and *out is untouched.
 * Never reads past frame + frame_bytes. Thread-safe. */
gcclResult_t frame_validate(const void* frame, size_t frame_bytes, size_t expect_count, gcclDataType_t expect_dt,
                            struct frame_header* out);

#endif
