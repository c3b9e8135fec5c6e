/* spec.h — the compressor spec string "codec[:key=value[,key=value...]]", parsed and printed. */
#ifndef GCCL_COMPRESS_SPEC_H
#define GCCL_COMPRESS_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "gccl.h"

/* Codec ids. The values travel in frame headers, so they never change; new codecs
 * are appended before CODEC_COUNT. */
enum codec_id {
  CODEC_NONE = 0,
  CODEC_FP16 = 1,
  CODEC_BF16 = 2,
  CODEC_UNIFORM = 3,
  CODEC_QSGD = 4,
  CODEC_SIGN = 5,
  CODEC_TERNGRAD = 6,
  CODEC_TOPK = 7,
  CODEC_RANDK = 8,
  CODEC_POWERSGD = 9, /* low rank: no frames, its own allreduce (collectives/powersgd.c) */
  CODEC_COUNT
};

enum spec_round { SPEC_ROUND_NEAREST = 0, SPEC_ROUND_STOCHASTIC = 1 };

/* How sparse codecs (topk, randk) carry their values on the wire. Values also
 * travel in frame headers. */
enum spec_values { SPEC_VALUES_FP32 = 0, SPEC_VALUES_FP16 = 1, SPEC_VALUES_BF16 = 2 };

#define SPEC_BITS_MIN 1
#define SPEC_BITS_MAX 8
#define SPEC_BUCKET_MAX (1u << 24) /* keeps bucket * bits within 32 bits */
#define SPEC_BUCKET_DEFAULT 512u   /* CGX's default bucket size */
#define SPEC_BITS_DEFAULT 4u       /* 8x smaller than fp32 with little accuracy loss (CGX) */
#define SPEC_RATIO_DEFAULT 0.01    /* DGC-style 1% density */
#define SPEC_RANK_DEFAULT 4u       /* powersgd: PyTorch's users' common choice, ~250x fewer bytes at 100 MiB */
#define SPEC_RANK_MAX 256u

/* Room spec_format needs for any spec (the longest canonical form is ~110 chars). */
#define SPEC_FORMAT_MAX 192

/* A parsed spec. Every field holds a value, the codec's default where the spec
 * did not name the key; fields a codec does not use are zero (ratio 0.0). */
struct codec_spec {
  enum codec_id codec;
  uint32_t bits;           /* uniform, qsgd: 1..8 */
  uint32_t bucket;         /* uniform, qsgd, sign, terngrad: 1..2^24 */
  enum spec_round round;   /* uniform */
  double ratio;            /* topk, randk: (0, 1] */
  int approx;              /* topk: 1 samples a threshold (DGC) instead of exact selection */
  enum spec_values values; /* topk, randk */
  int ef;                  /* every codec but none: error feedback */
  uint64_t seed;           /* codecs that draw random numbers */
  int zstd;                /* topk: indices through zstd */
  int global;              /* topk: the sparse allreduces keep only ~k entries of
                              the sum (Ok-Topk / gTop-k); the rest returns to the
                              residual */
  uint32_t rank;           /* powersgd: 1..SPEC_RANK_MAX */
  uint64_t cols;           /* powersgd: the matrix's width; 0 = near-square */
};

/* Keys as bits, for the table of which keys a codec accepts. */
enum spec_key {
  SPEC_KEY_BITS = 1 << 0,
  SPEC_KEY_BUCKET = 1 << 1,
  SPEC_KEY_ROUND = 1 << 2,
  SPEC_KEY_RATIO = 1 << 3,
  SPEC_KEY_APPROX = 1 << 4,
  SPEC_KEY_VALUES = 1 << 5,
  SPEC_KEY_EF = 1 << 6,
  SPEC_KEY_SEED = 1 << 7,
  SPEC_KEY_ZSTD = 1 << 8,
  SPEC_KEY_GLOBAL = 1 << 9,
  SPEC_KEY_RANK = 1 << 10,
  SPEC_KEY_COLS = 1 << 11,
};

/* The keys codec accepts (a mask of enum spec_key); 0 for an unknown codec. */
unsigned spec_codec_keys(enum codec_id codec);

/* "topk", "uniform", ...; "invalid" for an unknown id. */
const char* spec_codec_name(enum codec_id codec);

/* Parses text into *out. On error returns gcclInvalidArgument, with an err_set
 * message naming the spec and the offending codec, key or value, and leaves *out
 * unchanged. Errors: NULL arguments, unknown codec or key, a key the codec does
 * not use, an empty/malformed/duplicate key or value, a value out of range.
 * Thread-safe; no allocation. */
gcclResult_t spec_parse(const char* text, struct codec_spec* out);

/* Writes the canonical spec of s into buf (cap bytes, NUL-terminated): the codec
 * and then every key it accepts, in a fixed order, so two specs are equal exactly
 * when their canonical strings are (ranks compare these). topk's global is
 * printed only when set, so specs without it keep the canonical text they always
 * had. spec_parse of the result gives *s back. gcclInvalidArgument for NULL
 * arguments, an unknown codec or cap too small (SPEC_FORMAT_MAX always
 * suffices). */
gcclResult_t spec_format(const struct codec_spec* s, char* buf, size_t cap);

#endif
