/* cost_model.h — the α-β-γ model of an allreduce: predicted seconds of the dense
 * algorithms and of the compressed ones, so that GCCL_COMPRESS=auto:SPEC
 * compresses only where compressing is predicted to pay (Agarwal et al., MLSys
 * 2022: mostly it does not).
 *
 * α: seconds per message, β: seconds per byte on the wire, per level (intra-node,
 * inter-node); γ: seconds per element (codec encode, decode-accumulate) or per
 * byte (dense reduction), measured on this machine once per process. powersgd,
 * which has no frames, is measured as its three steps (as encode time) and sends
 * its two factors, whose sizes come from its shape.
 *
 * Links (read by cost_model_init):
 *   inter-node: GCCL_SIM_LINK_GBPS / GCCL_SIM_LINK_US when set (the link model of
 *   the local transport), else GCCL_LINK_GBPS / GCCL_LINK_US (a real network the
 *   user describes), else 10 Gbit/s and 20 µs, which an MPI communicator replaces
 *   with what it measures at creation (core/link_probe.c);
 *   intra-node: 10 GB/s and 1 µs (memory copies between threads or processes).
 * Under the link model, sends also overlap the sender's compute (sends_overlap_compute).
 * Values are decimal numbers (Gbit/s, microseconds); a malformed or non-positive
 * one is reported (WARN) and the next source is used.
 *
 * Every rank must reach the same decision, so every input must be equal on every
 * rank: the environment (read per rank) and the measured rates. Thread ranks share
 * the process and so its one measurement. Ranks in separate processes (the MPI
 * transport) measure differently: there rank 0's link, cost_codec and reduce rate
 * reach every rank at communicator creation (dropin_measure). */
#ifndef GCCL_COLLECTIVES_COST_MODEL_H
#define GCCL_COLLECTIVES_COST_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/coll.h"
#include "compress/spec.h"

struct cost_link {
  double alpha; /* seconds per message */
  double beta;  /* seconds per byte */
};

struct cost_model {
  int nranks;
  int local_size; /* ranks per node (coll_ctx.local_size) */
  struct cost_link intra, inter;
  double reduce_s_per_byte; /* dense reduction dst += src, per byte of dst */
  /* The transport moves a posted message while its sender computes: the link
   * model's virtual NICs do (set with GCCL_SIM_LINK_GBPS). MPI over TCP moves a
   * large message only inside MPI calls, and sra's encodes make none (sra.c). */
  int sends_overlap_compute;
};

/* The network between nodes as an MPI communicator measured it at creation
 * (core/link_probe.h): rank 0's figures, or the environment's, on every rank. */
struct link_figures {
  double alpha;        /* seconds per message: half a small round trip */
  double beta;         /* seconds per byte of a long message */
  double duplex;       /* a pair's long exchange both ways over one way, >= 1 */
  int32_t measured;    /* timed, not named by GCCL_LINK_GBPS nor the default */
  int32_t piece_bytes; /* messages between nodes go in pieces of this size (link_probe.c); 0: whole */
};

/* A codec's measured rates, for fp32 tensors (collective frames carry fp32). */
struct cost_codec {
  double encode_s_per_elem;   /* compressor_encode_f32 with error feedback, per element */
  double decode_s_per_elem;   /* frame_decode_accumulate into fp32 sums, per element of the range */
  double wire_bytes_per_elem; /* frame bytes / elements, on Gaussian data */
};

/* Memory a measurement may use instead of allocating its own: a communicator's
 * scratch, touched already, spares it first-touch page faults (~11 us a page).
 * Too small, or {NULL, 0}: the measurement allocates. */
struct cost_workspace {
  void* p;
  size_t bytes;
};

/* Fills *m for nranks ranks, local_size per node: links from the environment and
 * the dense reduction rate (cost_reduce_rate). */
void cost_model_init(struct cost_model* m, int nranks, int local_size);
/* The same without the reduction rate, left 0 for the caller to fill. */
void cost_model_links(struct cost_model* m, int nranks, int local_size);
/* Seconds per byte of dst of the dense reduction dst += src on fp32, measured on
 * the first call in the process (in ws where it fits) and cached. */
double cost_reduce_rate(struct cost_workspace ws);

/* Whether the environment names the link between nodes (GCCL_SIM_LINK_GBPS or
 * GCCL_LINK_GBPS): then it is not measured (dropin_measure). */
int cost_model_link_from_env(void);

/* The rates of the spec whose canonical text is spec_text (one that a compressor
 * of fp32 accepts: the drop-in's, checked when it was made), measured on the
 * first call for that spec in the process and cached: encode and decode-
 * accumulate of a 1 Mi-element fp32 buffer, best of a few repetitions. Callers of
 * one process get the same numbers. Its buffers come from ws where they fit.
 * Errors: gcclSystemError (out of memory), the codec's own. */
gcclResult_t cost_codec_measure(const char* spec_text, struct cost_codec* out, struct cost_workspace ws);

/* The same rates, and the reduction's, measured now on `count` elements and not
 * cached: 1 Mi elements stay in this machine's caches, and a memory-bound codec
 * (random-k's error feedback) ran 1.6x slower per element on 100 MiB
 * (gccl-project measures at the size it projects). Errors: as cost_codec_measure,
 * gcclInvalidArgument for count 0. */
gcclResult_t cost_codec_measure_at(const char* spec_text, size_t count, struct cost_codec* out);
double cost_reduce_rate_at(size_t count);

/* Predicted seconds of an allreduce of `count` elements of `elem_bytes` bytes:
 * dense with algorithm `algo` (ring, rhd, tree, hier), or compressed with codec
 * rates c and spec s with algorithm `algo` (sra, ring-requant, sparse-ag,
 * sparse-sr, randk, hier). c and s are ignored for dense algorithms. A negative
 * value means the model does not cover that algorithm. */
double cost_allreduce(const struct cost_model* m, enum coll_algo algo, size_t count, size_t elem_bytes,
                      const struct codec_spec* s, const struct cost_codec* c, int compressed);

/* ceil(log2 p): the steps of a doubling schedule over p ranks. */
double cost_log2_ceil(int p);

/* The fastest dense allreduce the model knows for this call; *algo names it. */
double cost_best_dense_allreduce(const struct cost_model* m, size_t count, size_t elem_bytes, enum coll_algo* algo);

#endif
