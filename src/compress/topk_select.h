/* topk_select.h — which elements top-k keeps (topk_select.c), apart from how its
 * frame carries them (codec_topk.c). The rule is in topk_select.c's module
 * comment; the frame's in codec_topk.c's. */
#ifndef GCCL_COMPRESS_TOPK_SELECT_H
#define GCCL_COMPRESS_TOPK_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "compress/codec.h"
#include "compress/spec.h"
#include "gccl.h"

/* The key of x: its fp32 bits with the sign cleared, which orders finite |x|
 * exactly as integers. */
#define TOPK_KEY_MASK 0x7FFFFFFFu

/* The selection's scratch, made once per compressor for tensors of up to n
 * elements. */
struct topk_scratch {
  size_t n;   /* the largest tensor this scratch serves */
  size_t cap; /* candidate capacity; 0 disables the candidate path */
  uint64_t* cand_idx;
  uint32_t* cand_bits; /* raw fp32 bits, so the sign needs no second look at x */
  uint32_t* tmp;       /* radix-select scratch: max(cap, the sample's size) */
  uint32_t* sample;    /* the sample's keys */
  size_t* hist;        /* for the radix select over all of x */
};

/* Allocates s's buffers for tensors of up to n elements keeping k of them.
 * Returns 0 when out of memory (s then holds what was allocated: free it with
 * topk_scratch_free). */
int topk_scratch_init(struct topk_scratch* s, size_t n, size_t k);
/* Frees s's buffers (s may be partly allocated, or zeroed). */
void topk_scratch_free(struct topk_scratch* s);

/* What to keep: keys > T, then the first need_eq with key == T (in index
 * order), kept in all; from the scratch's c candidates (cand_idx, cand_bits, in
 * index order) or, when from_candidates is 0, from a scan of x. */
struct topk_selection {
  int from_candidates;
  size_t c;
  size_t kept;
  uint32_t T;
  size_t need_eq;
};

/* Chooses the k (or, with s->approx, about k) elements of x[0, n) to keep,
 * n <= st->n, and pushes the exceptions (keys >= exc_key, increasing) onto
 * exc. gcclSystemError if exc cannot grow. */
gcclResult_t topk_select(struct topk_scratch* st, const struct codec_spec* s, const float* x, size_t n, size_t k,
                         uint32_t exc_key, struct exc_list* exc, struct topk_selection* out);

#endif
