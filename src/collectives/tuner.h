/* tuner.h — the one place that chooses a collective's algorithm (tuner.c). */
#ifndef GCCL_COLLECTIVES_TUNER_H
#define GCCL_COLLECTIVES_TUNER_H

#include "collectives/coll.h"

/* The algorithm for a call: `forced` (from GCCL_ALGO) when the collective has it,
 * else chosen by size, rank count and topology (local_size ranks per node; pass
 * nranks for one node). Deterministic: the same on every rank. */
enum coll_algo tuner_choose(enum coll_kind kind, size_t bytes, int nranks, int local_size, int shares_address_space,
                            enum coll_algo forced);
/* The same for a call with a compressor of spec `spec` on a tensor of `count`
 * elements: by codec, rank count, topology (local_size ranks per node), for fp16
 * and bf16 by count, and for top-k by density and `global`. */
struct codec_spec;
enum coll_algo tuner_choose_compressed(enum coll_kind kind, const struct codec_spec* spec, size_t count, int nranks,
                                       int local_size, enum coll_algo forced);

#endif
