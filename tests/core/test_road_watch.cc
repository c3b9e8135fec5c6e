// test_road_watch.cc — the road watch (core/road_watch.h): which sizes it
// watches, when it looks at the other road, and how a settlement swaps a class,
// the slowest rank's times counting alike on every rank.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

extern "C" {
#include "core/road_watch.h"
#include "transport/local.h"
}

namespace {

const size_t k16K = 16 << 10;

// p ranks of the local transport, each with its watch.
class Ranks {
 public:
  explicit Ranks(int p) : tps_(static_cast<size_t>(p), nullptr), watches_(static_cast<size_t>(p)) {
    EXPECT_EQ(local_world_create(&w_, p), gcclSuccess);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(local_transport_create(&tps_[static_cast<size_t>(r)], w_, r, 20000), gcclSuccess);
      road_watch_begin(&watches_[static_cast<size_t>(r)]);
    }
  }
  ~Ranks() {
    for (struct transport* tp : tps_) tp->ops->destroy(tp);
    local_world_unref(w_);
  }
  struct transport* tp(int r) const {
    return tps_[static_cast<size_t>(r)];
  }
  struct road_watch* watch(int r) {
    return &watches_[static_cast<size_t>(r)];
  }

 private:
  struct local_world* w_ = nullptr;
  std::vector<struct transport*> tps_;
  std::vector<struct road_watch> watches_;
};

// `calls` calls of `bytes` on rank r, tuned in band: in band takes `in_band` s,
// split `split` s. The roads the calls took, in order.
std::vector<enum coll_algo> Calls(Ranks& ranks, int r, int calls, size_t bytes, double in_band, double split) {
  std::vector<enum coll_algo> roads;
  for (int i = 0; i < calls; ++i) {
    enum coll_algo road = road_watch_road(ranks.watch(r), bytes, ALGO_IN_BAND);
    roads.push_back(road);
    EXPECT_EQ(
        road_watch_after(ranks.watch(r), ranks.tp(r), bytes, ALGO_IN_BAND, road == ALGO_IN_BAND ? in_band : split),
        gcclSuccess);
  }
  return roads;
}

// The calls (indices) that took split.
std::vector<int> OnSplit(const std::vector<enum coll_algo>& roads) {
  std::vector<int> at;
  for (size_t i = 0; i < roads.size(); ++i)
    if (roads[i] == ALGO_SPLIT) at.push_back(static_cast<int>(i));
  return at;
}

TEST(RoadWatch, WatchesOnlyTheRoadsFrom8To64KiB) {
  struct road_watch off = {};
  EXPECT_EQ(road_watch_road(&off, k16K, ALGO_IN_BAND), ALGO_IN_BAND);  // not begun
  Ranks ranks(1);
  struct road_watch* w = ranks.watch(0);
  for (int i = 0; i < 100; ++i) {  // past the first look: sizes outside are never swapped
    EXPECT_EQ(road_watch_road(w, 8192, ALGO_IN_BAND), ALGO_IN_BAND);
    EXPECT_EQ(road_watch_road(w, 65537, ALGO_RING), ALGO_RING);
    EXPECT_EQ(road_watch_road(w, k16K, ALGO_TREE), ALGO_TREE);
    EXPECT_EQ(road_watch_after(w, ranks.tp(0), 8192, ALGO_IN_BAND, 1.0), gcclSuccess);
    EXPECT_EQ(road_watch_after(w, ranks.tp(0), 65537, ALGO_RING, 1.0), gcclSuccess);
    EXPECT_EQ(road_watch_after(w, ranks.tp(0), k16K, ALGO_TREE, 1.0), gcclSuccess);
  }
  for (int k = 0; k < WATCH_CLASSES; ++k) EXPECT_EQ(w->cls[k].calls, 0u) << "class " << k;
  // 8193, 16 KiB, 16 KiB + 1, 64 KiB: the classes 0, 0, 1, 2
  EXPECT_EQ(road_watch_after(w, ranks.tp(0), 8193, ALGO_IN_BAND, 1.0), gcclSuccess);
  EXPECT_EQ(road_watch_after(w, ranks.tp(0), k16K, ALGO_SPLIT, 1.0), gcclSuccess);
  EXPECT_EQ(road_watch_after(w, ranks.tp(0), k16K + 1, ALGO_IN_BAND, 1.0), gcclSuccess);
  EXPECT_EQ(road_watch_after(w, ranks.tp(0), 64 << 10, ALGO_SPLIT, 1.0), gcclSuccess);
  EXPECT_EQ(w->cls[0].calls, 2u);
  EXPECT_EQ(w->cls[1].calls, 1u);
  EXPECT_EQ(w->cls[2].calls, 1u);
}

TEST(RoadWatch, LooksAwayFourCallsAfterFourAndSwapsWhereTheOtherRoadWins) {
  Ranks ranks(1);
  // split 30% faster: looks at 32-39 (split 36-39) and 72-79 (split 76-79); swapped after 79
  std::vector<enum coll_algo> roads = Calls(ranks, 0, 100, k16K, 300e-6, 200e-6);
  std::vector<int> want = {36, 37, 38, 39, 76, 77, 78, 79};
  for (int i = 80; i < 100; ++i) want.push_back(i);
  EXPECT_EQ(OnSplit(roads), want);
  EXPECT_TRUE(ranks.watch(0)->cls[0].swapped);
  // Swapped, it looks at in band again WATCH_FIRST calls later: 112-115 split, 116-119 in band.
  roads = Calls(ranks, 0, 40, k16K, 300e-6, 200e-6);
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(roads[static_cast<size_t>(i)], i >= 16 && i < 20 ? ALGO_IN_BAND : ALGO_SPLIT) << "call " << 100 + i;
  EXPECT_EQ(ranks.watch(0)->cls[1].calls, 0u);  // other classes untouched
}

TEST(RoadWatch, KeepsTheRoadByTheMarginAndLooksLessOften) {
  Ranks ranks(1);
  // split 4% faster: not enough. Looks at 32 and 72, then 64 calls apart: 144, 216; then 128 apart: 352.
  std::vector<enum coll_algo> roads = Calls(ranks, 0, 400, k16K, 250e-6, 240e-6);
  std::vector<int> want;
  for (int look : {32, 72, 144, 216, 352})
    for (int i = 4; i < 8; ++i) want.push_back(look + i);
  EXPECT_EQ(OnSplit(roads), want);
  EXPECT_FALSE(ranks.watch(0)->cls[0].swapped);
  EXPECT_TRUE(road_watch_swaps(250e-6, 237e-6));
  EXPECT_FALSE(road_watch_swaps(250e-6, 238e-6));
}

TEST(RoadWatch, TheFirstCallOfARunDoesNotCount) {
  Ranks ranks(1);
  struct road_watch* w = ranks.watch(0);
  // Split's runs (36-39, 76-79) take 100, 400, 100, 400 us against in band's 300:
  // the median of the last three is 400, so the class keeps in band. Were the first
  // counted instead of the last, the median would be 100, and it would swap.
  for (int i = 0; i < 80; ++i) {
    enum coll_algo road = road_watch_road(w, k16K, ALGO_IN_BAND);
    double t = road == ALGO_IN_BAND ? 300e-6 : (i % 4 == 0 || i % 4 == 2) ? 100e-6 : 400e-6;
    ASSERT_EQ(road_watch_after(w, ranks.tp(0), k16K, ALGO_IN_BAND, t), gcclSuccess);
  }
  EXPECT_FALSE(w->cls[0].swapped);
}

// `calls` calls on both ranks of `ranks` at once, each rank with its own times
// (in band, split); the roads each took.
std::vector<std::vector<enum coll_algo>> OnTwoRanks(Ranks& ranks, int calls, const double times[2][2]) {
  std::vector<std::vector<enum coll_algo>> roads(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { roads[r] = Calls(ranks, r, calls, k16K, times[r][0], times[r][1]); });
  for (std::thread& t : threads) t.join();
  return roads;
}

TEST(RoadWatch, TheSlowestRankDecidesAlikeOnEveryRank) {
  // Rank 0 sees split faster, rank 1 sees it slower: each road's slowest rank
  // counts (in band 300 us, split 400 us), so neither swaps.
  Ranks ranks(2);
  const double split_slower_on_one[2][2] = {{300e-6, 100e-6}, {250e-6, 400e-6}};
  std::vector<std::vector<enum coll_algo>> roads = OnTwoRanks(ranks, 100, split_slower_on_one);
  EXPECT_EQ(roads[0], roads[1]);
  EXPECT_FALSE(ranks.watch(0)->cls[0].swapped);
  EXPECT_FALSE(ranks.watch(1)->cls[0].swapped);
  // Both see split faster, by different amounts: both swap, at the settlement after
  // the looks at 144 and 216.
  const double split_faster_on_both[2][2] = {{300e-6, 100e-6}, {250e-6, 200e-6}};
  roads = OnTwoRanks(ranks, 200, split_faster_on_both);
  EXPECT_EQ(roads[0], roads[1]);
  EXPECT_TRUE(ranks.watch(0)->cls[0].swapped);
  EXPECT_TRUE(ranks.watch(1)->cls[0].swapped);
}

}  // namespace
