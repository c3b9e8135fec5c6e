/* tuner.c — the one place that chooses an algorithm. */
#include "collectives/tuner.h"

#include <strings.h>

#include "collectives/cost_model.h"
#include "collectives/in_band.h"
#include "compress/spec.h"

/* Latency-bound below this many bytes: log p hops beat 2(p-1) ring steps. */
#define TUNER_TREE_MAX_BYTES (64u << 10)
/* Rabenseifner's halving-doubling moves the ring's volume in 2 log p steps, fewer
 * latencies. Above this size the ring wins on non-powers of two, where rhd pays
 * the fold, and across nodes at any rank count (BENCHMARKS.md): rhd's every step
 * sends and receives over one pair's connection, and over TCP (1 Gbit/s test bed,
 * 4 ranks, 100 MiB) it got 49% of the link, the ring 82%. Within one node (MPI
 * over shared memory) rhd stays ahead on powers of two. */
#define TUNER_RHD_MAX_BYTES (4u << 20)

unsigned tuner_caps(const struct transport* tp) {
  return (tp->shares_address_space ? TUNER_SHARED_ADDRESS : 0u) | (tp->agree_in_band ? TUNER_IN_BAND : 0u);
}

/* Bounds on the crossovers a measurement may set. rhd keeps 512 KiB at least. Up
 * to there, on a link slow enough for the formula below to pick the ring, both
 * move at the link's rate (1 Gbit/s test bed, 4 ranks, reno: both 0.99-1.07x
 * Open MPI's allreduce at 128-512 KiB), so the floor costs nothing there; but with
 * BBR congestion control the ring's steps of about 128 KiB were now and then
 * 1.2-2.3x slower (512 KiB, 4 ranks), and rhd's were not. From 1 MiB the ring won
 * (0.85x and less). Neither crossover moves past the defaults' range. */
#define TUNER_NET_RHD_MIN_BYTES (512u << 10)
#define TUNER_NET_HALVING_MIN_BYTES ((size_t)1 << 10)

/* Over Open MPI's TCP a message longer than its eager limit (64 KiB, its header
 * included) waits for a handshake, whose answer queues behind the peer's own long
 * message (link_probe.c's pieces). At 2 ranks on the 10 Gbit/s test bed a 64 KiB
 * allreduce in band, one whole message each way, took 121 us, 1.36x Open MPI's
 * allreduce, where 62.7 KiB took 70 us. So in band halves above this, a KiB below
 * the limit for the headers, whatever the rank count: halves of at most 32 KiB go
 * at once, for one step more. */
#define TUNER_NET_EAGER_BYTES ((size_t)63 << 10)

/* In band, doubling sends log q messages of n, halving-doubling 2 log q of
 * n/2, n/4, ... (2 (q-1)/q n in all), with the same partners: halving wins once
 *   log q alpha  <  n beta (log q - 2 (q-1)/q).
 * No duplex factor here: a pair's short exchange both ways fits the TCP window
 * and the token bucket's burst, where the long one measured for it does not.
 * (1 Gbit/s test bed, 4 ranks: halving at 4 KiB took 1.7x MPI_Allreduce, doubling
 * at 16 KiB 1.35x; this gives 6-11 KiB there. BENCHMARKS.md.) With 2 ranks halving
 * only adds a step, but for the eager limit above. */
static size_t halving_min_bytes(const struct link_figures* link, int q) {
  if (q < 4) return TUNER_NET_EAGER_BYTES;
  double lq = cost_log2_ceil(q), gain = lq - 2.0 * (q - 1) / q, n = lq * link->alpha / (link->beta * gain);
  return n < TUNER_NET_HALVING_MIN_BYTES ? TUNER_NET_HALVING_MIN_BYTES
         : n > TUNER_NET_EAGER_BYTES     ? TUNER_NET_EAGER_BYTES
                                         : (size_t)n;
}

/* rhd and the ring move the same 2 (p-1)/p n bytes per rank, rhd in 2 log p steps
 * and the ring in 2 (p-1). But each rhd step sends and receives over one pair's
 * connection, which costs `duplex` times a one-way transfer, while the ring sends
 * to one neighbour and receives from the other: rhd wins while
 *   2 (p-1 - log p) alpha  >  2 (p-1)/p n beta (duplex - 1).
 * (1 Gbit/s test bed, 4 ranks: rhd at 1-4 MiB took 1.3-1.6x Open MPI's ring.) */
static double rhd_max_pow2(const struct link_figures* link, double p) {
  if (!(link->duplex > 1.0)) return (double)TUNER_RHD_MAX_BYTES;
  return (p - 1 - cost_log2_ceil((int)p)) * link->alpha / ((p - 1) / p * link->beta * (link->duplex - 1.0));
}

/* p not a power of two, q the power of two below: rhd first folds the extra
 * ranks' whole vectors in and at the end sends the result back, 2 alpha + 2 n beta
 * more, so it wins only while
 *   (2 log q + 2) alpha + (2 (q-1)/q duplex + 2) n beta  <  2 (p-1) alpha + 2 (p-1)/p n beta,
 * that is n < (2 (p-1) - 2 log q - 2) alpha / (beta (2 (q-1)/q duplex + 2 - 2 (p-1)/p)).
 * At 3 ranks never (1 Gbit/s test bed, 128 KiB: rhd 1.83x Open MPI's allreduce, the
 * ring 1.01x; 256 KiB-1 MiB: rhd 0.99-1.04x, the ring 0.40-0.51x). The 512 KiB
 * floor, a guard against BBR on the ring's 128 KiB steps at 4 ranks, does not
 * apply: the fold's 2 n beta costs more. */
static double rhd_max_folded(const struct link_figures* link, int nranks) {
  double p = nranks, q = coll_pow2_floor(nranks), lg = cost_log2_ceil((int)q);
  double d = link->duplex > 1.0 ? link->duplex : 1.0;
  return (2 * (p - 1) - 2 * lg - 2) * link->alpha / (link->beta * (2 * (q - 1) / q * d + 2 - 2 * (p - 1) / p));
}

void tuner_net_from_link(struct tuner_net* net, const struct link_figures* link, int nranks) {
  *net = (struct tuner_net){0};
  if (!(link->alpha > 0) || !(link->beta > 0) || nranks < 2) return;
  int pow2 = coll_pow2_floor(nranks) == nranks;
  double rhd = pow2 ? rhd_max_pow2(link, nranks) : rhd_max_folded(link, nranks);
  /* The tuner never runs rhd at TUNER_TREE_MAX_BYTES or below: that floor means never. */
  double least = pow2 ? TUNER_NET_RHD_MIN_BYTES : TUNER_TREE_MAX_BYTES;
  net->rhd_max_bytes = rhd < least ? (size_t)least : rhd > TUNER_RHD_MAX_BYTES ? TUNER_RHD_MAX_BYTES : (size_t)rhd;
  net->halving_min_bytes = halving_min_bytes(link, coll_pow2_floor(nranks));
}

enum coll_algo tuner_choose(enum coll_kind kind, size_t bytes, int nranks, int local_size, unsigned caps,
                            const struct tuner_net* net, enum coll_algo forced) {
  int shared = (caps & TUNER_SHARED_ADDRESS) != 0;
  if (forced != ALGO_AUTO && coll_has_algo(kind, forced, shared)) return forced;
  /* Threads of one process: every rank reads its peers' buffers once, no copies in
   * flight — the fastest path at every size measured (BENCHMARKS.md). */
  if (shared) return ALGO_DIRECT;
  switch (kind) {
    case COLL_ALLREDUCE: {
      /* Recursive doubling on the agreement's own messages: one exchange in all
       * (in_band.c), where the tree would follow an agreement and precede a barrier. */
      size_t in_band_max = net && net->in_band_max_bytes ? net->in_band_max_bytes : IN_BAND_MAX_BYTES;
      if ((caps & TUNER_IN_BAND) && bytes <= in_band_max) return ALGO_IN_BAND;
      /* Past the limit timed at creation (p not a power of two): split moves
       * 2 (p-1)/p n, as the ring, where the tree, like the in-band fold, moves n
       * several times, and its first round rides the agreement (split.c). */
      if ((caps & TUNER_IN_BAND) && bytes <= IN_BAND_MAX_BYTES) return ALGO_SPLIT;
      /* several nodes: only 1/L of the tensor per rank crosses the slow links */
      if (local_size > 1 && local_size < nranks && bytes > TUNER_TREE_MAX_BYTES) return ALGO_HIER;
      if (bytes <= TUNER_TREE_MAX_BYTES) return ALGO_TREE;
      /* Two ranks: the ring's two neighbours are one peer, so both algorithms send
       * the same bytes both ways over one connection, rhd in one message per
       * direction and step, the ring in one per segment. With BBR the ring's
       * pauses between segments cost it (1 Gbit/s test bed, 2 ranks, 64 MiB:
       * ring 1.40x Open MPI's allreduce, rhd 0.94x). */
      int pow2 = coll_pow2_floor(nranks) == nranks, one_node = local_size >= nranks;
      size_t rhd_max = net && net->rhd_max_bytes ? net->rhd_max_bytes : TUNER_RHD_MAX_BYTES;
      return (bytes <= rhd_max || (pow2 && one_node) || nranks == 2) ? ALGO_RHD : ALGO_RING;
    }
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
      return ALGO_RING;
    default:
      return ALGO_TREE;
  }
}

/* Top-k schedules. Bytes each rank receives (e ~ 5 bytes per entry: a value and
 * its Elias-Fano offset; selections of different ranks rarely overlap):
 *   sparse-ag: (p-1) k e, one phase;
 *   sparse-sr: ~k e in phase 1, then p-1 ranges of the sum, each up to k entries,
 *   or dense (4 count / p bytes) once that is smaller; with global only k / p.
 * The split-reduce wins with global (p > 2) and once its ranges go dense
 * (density e p > 4). Otherwise the volumes match and compute decides: measured
 * at 100 MiB, 1% and 1 Gbit/s (BENCHMARKS.md), the allgather is faster up to
 * p = 4 and the split-reduce from p = 8 on. */
#define TUNER_TOPK_ENTRY_BYTES 5.0
#define TUNER_SPARSE_AG_MAX_RANKS 4

static enum coll_algo topk_algo(const struct codec_spec* s, int nranks) {
  if (nranks <= 2) return ALGO_SPARSE_AG;
  if (s->global || s->ratio * TUNER_TOPK_ENTRY_BYTES * nranks > 4.0) return ALGO_SPARSE_SR;
  return nranks <= TUNER_SPARSE_AG_MAX_RANKS ? ALGO_SPARSE_AG : ALGO_SPARSE_SR;
}

/* From this many elements on (2 MiB of fp16 frames), fp16 and bf16 go round
 * ring-requant across nodes. On the 1 Gbit/s test bed (4 ranks, fp16 on fp32
 * tensors, x Open MPI's ring; BENCHMARKS.md): 1 MiB sra 1.52-1.90, the ring
 * 1.36-1.61 (its 2(p-1) steps in turn); 4 MiB sra 1.99-2.00, the ring 2.17-2.25;
 * 100 MiB sra 1.77-1.87, the ring 1.94-2.01. */
#define TUNER_HALF_RING_MIN_COUNT ((size_t)1 << 20)

enum coll_algo tuner_choose_compressed(enum coll_kind kind, const struct codec_spec* s, size_t count, int nranks,
                                       int local_size, enum coll_algo forced) {
  if (kind != COLL_ALLREDUCE) return ALGO_SRA; /* allgather and reduce-scatter have one schedule each */
  /* powersgd has one schedule: low rank on whole tensors, whatever the topology
   * (its factors are dense allreduces, which pick their own algorithms). */
  if (s->codec == CODEC_POWERSGD) return ALGO_POWERSGD;
  int sparse = s->codec == CODEC_TOPK, randk = s->codec == CODEC_RANDK;
  if (forced != ALGO_AUTO && coll_has_compressed_algo(kind, forced)) {
    /* A forced algorithm must fit the codec: sparse paths need top-k frames,
     * randk's needs shared indices, sra and ring-requant need dense frames. */
    int fits = forced == ALGO_HIER || (forced == ALGO_SPARSE_AG || forced == ALGO_SPARSE_SR ? sparse
                                       : forced == ALGO_RANDK                               ? randk
                                                                                            : !sparse && !randk);
    if (fits) return forced;
  }
  if (local_size > 1 && local_size < nranks) return ALGO_HIER;
  if (sparse) return topk_algo(s, nranks);
  if (randk) return ALGO_RANDK;
  /* Half precision, large, every rank on its own node: the ring's one flow per
   * link beats sra's p-1 flows out of every host, and p roundings at 2^-11 (bf16
   * 2^-8) are what NCCL's half-precision ring does (ring_requant.c). Quantizers
   * keep sra: their errors grow with every requantization. */
  int half = s->codec == CODEC_FP16 || s->codec == CODEC_BF16;
  if (half && local_size == 1 && nranks > 1 && count >= TUNER_HALF_RING_MIN_COUNT) return ALGO_RING_REQUANT;
  return ALGO_SRA;
}
