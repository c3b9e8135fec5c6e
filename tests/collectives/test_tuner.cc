// test_tuner.cc — the algorithm choices of tuner.c: topology, codec, density, GCCL_ALGO.
#include <gtest/gtest.h>

extern "C" {
#include "collectives/cost_model.h"
#include "collectives/tuner.h"
#include "compress/spec.h"
}

namespace {

struct codec_spec Spec(const char* text) {
  struct codec_spec s;
  EXPECT_EQ(spec_parse(text, &s), gcclSuccess) << text;
  return s;
}

const size_t kLarge = 100u << 20;

// The compressed allreduce's algorithm for a tensor of `count` elements on p ranks, L per node.
enum coll_algo PickCompressed(const struct codec_spec& s, int p, int L, enum coll_algo forced = ALGO_AUTO,
                              size_t count = kLarge / 4) {
  return tuner_choose_compressed(COLL_ALLREDUCE, &s, count, p, L, forced);
}

TEST(Tuner, DenseAllReduceGoesHierarchicalAcrossNodesOnly) {
  // threads sharing an address space read each other's buffers, at any layout
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 8, 4, 1, nullptr, ALGO_AUTO), ALGO_DIRECT);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 8, 4, 0, nullptr, ALGO_AUTO), ALGO_HIER);
  // one node, or one rank per node: flat
  // one node (MPI over shared memory): rhd on powers of two; across nodes: the ring from 3 ranks
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 8, 8, 0, nullptr, ALGO_AUTO), ALGO_RHD);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 6, 6, 0, nullptr, ALGO_AUTO), ALGO_RING);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 8, 1, 0, nullptr, ALGO_AUTO), ALGO_RING);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 6, 1, 0, nullptr, ALGO_AUTO), ALGO_RING);
  // two ranks (or nodes) across nodes: rhd at every size, whatever the measured link says
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 2, 1, 0, nullptr, ALGO_AUTO), ALGO_RHD);
  link_figures bed = {20e-6, 8e-9, 1.4, 1, 0};
  tuner_net two;
  tuner_net_from_link(&two, &bed, 2);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 2, 1, 0, &two, ALGO_AUTO), ALGO_RHD);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 2, 1, 0, &two, ALGO_RING), ALGO_RING);
  // mid sizes: halving-doubling's fewer steps, on any rank count
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 1u << 20, 8, 1, 0, nullptr, ALGO_AUTO), ALGO_RHD);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 1u << 20, 6, 1, 0, nullptr, ALGO_AUTO), ALGO_RHD);
  // latency-bound sizes stay on the tree even across nodes
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 1024, 8, 4, 0, nullptr, ALGO_AUTO), ALGO_TREE);
  // GCCL_ALGO wins when the collective has the algorithm
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, kLarge, 8, 4, 0, nullptr, ALGO_RING), ALGO_RING);
  EXPECT_EQ(tuner_choose(COLL_ALLGATHER, kLarge, 8, 4, 0, nullptr, ALGO_HIER), ALGO_RING);
}

// p not a power of two across nodes: in band up to the limit timed at creation
// (core/in_band_limit.c), split from there to IN_BAND_MAX_BYTES, then as before.
TEST(Tuner, InBandUpToTheTimedLimitThenSplit) {
  tuner_net net = {};
  net.in_band_max_bytes = 8u << 10;
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 8u << 10, 3, 1, TUNER_IN_BAND, &net, ALGO_AUTO), ALGO_IN_BAND);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, (8u << 10) + 4, 3, 1, TUNER_IN_BAND, &net, ALGO_AUTO), ALGO_SPLIT);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 64u << 10, 5, 1, TUNER_IN_BAND, &net, ALGO_AUTO), ALGO_SPLIT);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, (64u << 10) + 4, 3, 1, TUNER_IN_BAND, &net, ALGO_AUTO), ALGO_RHD);
  // no limit timed: in band up to IN_BAND_MAX_BYTES
  tuner_net none = {};
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 64u << 10, 3, 1, TUNER_IN_BAND, &none, ALGO_AUTO), ALGO_IN_BAND);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 64u << 10, 3, 1, TUNER_IN_BAND, nullptr, ALGO_AUTO), ALGO_IN_BAND);
  // without the in-band exchange (inside hier, say) the limit changes nothing
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 16u << 10, 3, 1, 0, &net, ALGO_AUTO), ALGO_TREE);
  // GCCL_ALGO still wins
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 16u << 10, 3, 1, TUNER_IN_BAND, &net, ALGO_TREE), ALGO_TREE);
}

// The crossovers from a measured link: the test bed's (1 Gbit/s, 20 us, a pair's
// exchange both ways 1.4x one way) moves rhd's limit down to its floor, 512 KiB,
// and in-band halving up to ~10 KB at 4 ranks; a full-duplex link keeps rhd's
// default; 2 ranks halve only above 63 KiB, where a whole message would wait for
// Open MPI's handshake; no figures, no crossovers.
TEST(Tuner, NetworkCrossoversFollowTheMeasuredLink) {
  link_figures bed = {20e-6, 8e-9, 1.4, 1, 0};
  tuner_net net;
  tuner_net_from_link(&net, &bed, 4);
  EXPECT_EQ(net.rhd_max_bytes, size_t{512} << 10);
  EXPECT_NEAR(double(net.halving_min_bytes), 10000.0, 1.0);  // log q alpha / (beta (log q - 2 (q-1)/q))
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 256u << 10, 4, 1, 0, &net, ALGO_AUTO), ALGO_RHD);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 1u << 20, 4, 1, 0, &net, ALGO_AUTO), ALGO_RING);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 1u << 20, 4, 1, 0, nullptr, ALGO_AUTO), ALGO_RHD);  // the default
  // a slow link's long latency keeps rhd further: (p-1-log p) alpha / ((p-1)/p beta (duplex-1))
  link_figures far = {2e-3, 8e-9, 1.4, 1, 0};
  tuner_net_from_link(&net, &far, 4);
  EXPECT_NEAR(double(net.rhd_max_bytes), 2e-3 / (0.75 * 8e-9 * 0.4), 1.0);
  link_figures full_duplex = {20e-6, 8e-9, 1.0, 1, 0};
  tuner_net_from_link(&net, &full_duplex, 8);
  EXPECT_EQ(net.rhd_max_bytes, size_t{4} << 20);
  EXPECT_GT(net.halving_min_bytes, size_t{0});
  tuner_net_from_link(&net, &bed, 2);
  EXPECT_EQ(net.halving_min_bytes, size_t{63} << 10);  // 2 ranks: doubling up to the eager limit
  link_figures slow = {1e-3, 8e-9, 1.4, 1, 0};         // 4 ranks on a long latency: the eager limit caps it
  tuner_net_from_link(&net, &slow, 4);
  EXPECT_EQ(net.halving_min_bytes, size_t{63} << 10);
  // p not a power of two: rhd's fold and unfold cost 2 n beta more. At 3 ranks it never
  // wins; at 7 on a fast link it keeps sizes up to
  // (2 (p-1) - 2 log q - 2) alpha / (beta (2 (q-1)/q duplex + 2 - 2 (p-1)/p)).
  tuner_net_from_link(&net, &bed, 3);
  EXPECT_EQ(net.rhd_max_bytes, size_t{64} << 10);  // the tree's limit: rhd never runs
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, (64u << 10) + 4, 3, 1, 0, &net, ALGO_AUTO), ALGO_RING);
  tuner_net_from_link(&net, &bed, 5);
  EXPECT_EQ(net.rhd_max_bytes, size_t{64} << 10);
  link_figures fast = {5e-6, 8e-11, 1.4, 1, 0};  // 100 Gbit/s, 5 us
  tuner_net_from_link(&net, &fast, 7);
  double want = (12.0 - 4 - 2) * 5e-6 / (8e-11 * (2 * 0.75 * 1.4 + 2 - 2 * 6.0 / 7));
  EXPECT_NEAR(double(net.rhd_max_bytes), want, 1.0);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 128u << 10, 7, 1, 0, &net, ALGO_AUTO), ALGO_RHD);
  EXPECT_EQ(tuner_choose(COLL_ALLREDUCE, 256u << 10, 7, 1, 0, &net, ALGO_AUTO), ALGO_RING);
  link_figures none = {0, 0, 1, 0, 0};
  tuner_net_from_link(&net, &none, 4);
  EXPECT_EQ(net.rhd_max_bytes, 0u);
  EXPECT_EQ(net.halving_min_bytes, 0u);
}

TEST(Tuner, CompressedAllReduceByCodecRanksAndDensity) {
  struct codec_spec u8 = Spec("uniform:bits=8"), randk = Spec("randk:ratio=0.01");
  struct codec_spec topk = Spec("topk:ratio=0.01"), global = Spec("topk:ratio=0.01,global=1");
  struct codec_spec dense_topk = Spec("topk:ratio=0.3");
  EXPECT_EQ(PickCompressed(u8, 8, 8), ALGO_SRA);
  EXPECT_EQ(PickCompressed(randk, 8, 8), ALGO_RANDK);
  // top-k: allgather for few ranks, split-reduce for many
  EXPECT_EQ(PickCompressed(topk, 2, 2), ALGO_SPARSE_AG);
  EXPECT_EQ(PickCompressed(topk, 4, 4), ALGO_SPARSE_AG);
  EXPECT_EQ(PickCompressed(topk, 8, 8), ALGO_SPARSE_SR);
  // ... and the split-reduce whenever its ranges carry less: global, or dense sums
  EXPECT_EQ(PickCompressed(global, 3, 3), ALGO_SPARSE_SR);
  EXPECT_EQ(PickCompressed(dense_topk, 3, 3), ALGO_SPARSE_SR);
  EXPECT_EQ(PickCompressed(global, 2, 2), ALGO_SPARSE_AG);
  // several nodes: hierarchical for every codec
  EXPECT_EQ(PickCompressed(topk, 8, 4), ALGO_HIER);
  EXPECT_EQ(PickCompressed(u8, 8, 4), ALGO_HIER);
  // allgather and reduce-scatter have one schedule
  EXPECT_EQ(tuner_choose_compressed(COLL_ALLGATHER, &topk, kLarge / 4, 8, 4, ALGO_AUTO), ALGO_SRA);
  // half precision: the ring when every rank is on its own node, else sra (or hier)
  for (const char* half : {"fp16", "bf16"}) {
    struct codec_spec h = Spec(half);
    EXPECT_EQ(PickCompressed(h, 4, 1), ALGO_RING_REQUANT) << half;
    EXPECT_EQ(PickCompressed(h, 2, 1), ALGO_RING_REQUANT) << half;
    EXPECT_EQ(PickCompressed(h, 4, 4), ALGO_SRA) << half;
    EXPECT_EQ(PickCompressed(h, 1, 1), ALGO_SRA) << half;
    EXPECT_EQ(PickCompressed(h, 8, 4), ALGO_HIER) << half;
    EXPECT_EQ(PickCompressed(h, 4, 1, ALGO_SRA), ALGO_SRA) << half;
    // below 2^20 elements sra's one phase of concurrent sends beats the ring's 2(p-1) steps
    EXPECT_EQ(PickCompressed(h, 4, 1, ALGO_AUTO, 1u << 20), ALGO_RING_REQUANT) << half;
    EXPECT_EQ(PickCompressed(h, 4, 1, ALGO_AUTO, (1u << 20) - 1), ALGO_SRA) << half;
  }
  // quantizers keep sra across nodes: requantizing at every hop adds up their errors
  EXPECT_EQ(PickCompressed(u8, 4, 1), ALGO_SRA);
}

TEST(Tuner, ForcedCompressedAlgorithmMustFitTheCodec) {
  struct codec_spec u8 = Spec("uniform:bits=8"), topk = Spec("topk:ratio=0.01"), randk = Spec("randk:ratio=0.01");
  EXPECT_EQ(PickCompressed(u8, 8, 8, ALGO_RING_REQUANT), ALGO_RING_REQUANT);
  EXPECT_EQ(PickCompressed(topk, 8, 8, ALGO_SPARSE_AG), ALGO_SPARSE_AG);
  EXPECT_EQ(PickCompressed(topk, 8, 8, ALGO_HIER), ALGO_HIER);
  // misfits fall back to the automatic choice
  EXPECT_EQ(PickCompressed(u8, 8, 8, ALGO_SPARSE_SR), ALGO_SRA);
  EXPECT_EQ(PickCompressed(topk, 8, 8, ALGO_SRA), ALGO_SPARSE_SR);
  EXPECT_EQ(PickCompressed(randk, 8, 8, ALGO_SPARSE_AG), ALGO_RANDK);
  // a dense algorithm is not a compressed one
  EXPECT_EQ(PickCompressed(u8, 8, 8, ALGO_RING), ALGO_SRA);
}

TEST(Tuner, AlgorithmNamesRoundTrip) {
  for (int a = 0; a < ALGO_COUNT; a++)
    EXPECT_EQ(algo_from_name(algo_name(static_cast<enum coll_algo>(a))), a)
        << algo_name(static_cast<enum coll_algo>(a));
  EXPECT_EQ(algo_from_name("SPARSE-SR"), ALGO_SPARSE_SR);
  EXPECT_EQ(algo_from_name("nope"), ALGO_AUTO);
  EXPECT_EQ(algo_from_name(nullptr), ALGO_AUTO);
}

}  // namespace
