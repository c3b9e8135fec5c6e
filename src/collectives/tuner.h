/* tuner.h — the one place that chooses a collective's algorithm (tuner.c). */
#ifndef GCCL_COLLECTIVES_TUNER_H
#define GCCL_COLLECTIVES_TUNER_H

#include "collectives/coll.h"

/* What the transport offers the tuner: bits of tuner_caps. */
enum {
  TUNER_SHARED_ADDRESS = 1, /* ranks read each other's buffers: the direct algorithms */
  TUNER_IN_BAND = 2,        /* a user's call may run as ALGO_IN_BAND (never a call inside another) */
};
/* The caps of a user's call on transport tp. */
unsigned tuner_caps(const struct transport* tp);

/* The algorithm for a call: `forced` (from GCCL_ALGO) when the collective has it,
 * else chosen by size, rank count, topology (local_size ranks per node; pass
 * nranks for one node), the transport's caps and the network's crossovers (net;
 * NULL for the defaults). Deterministic: the same on every rank. */
enum coll_algo tuner_choose(enum coll_kind kind, size_t bytes, int nranks, int local_size, unsigned caps,
                            const struct tuner_net* net, enum coll_algo forced);

/* The same for a call with a compressor of spec `spec` on a tensor of `count`
 * elements: by codec, rank count, topology (local_size ranks per node), for fp16
 * and bf16 by count, and for top-k by density and `global`. */
struct codec_spec;
enum coll_algo tuner_choose_compressed(enum coll_kind kind, const struct codec_spec* spec, size_t count, int nranks,
                                       int local_size, enum coll_algo forced);

/* The crossovers for nranks ranks on the network between nodes that `link`
 * describes (cost_model.h; measured by core/link_probe.c: the latency, seconds
 * per byte, and how much longer a pair's exchange both ways takes than one way). */
struct link_figures;
void tuner_net_from_link(struct tuner_net* net, const struct link_figures* link, int nranks);

#endif
