// test_in_band_limit.cc — in_band_limit_fit: the in-band limit that the timed sizes contradict least.
#include <gtest/gtest.h>

extern "C" {
#include "core/in_band_limit.h"
}

namespace {

const size_t kLeast = 8 << 10;
const size_t kBytes[3] = {64 << 10, 32 << 10, 16 << 10};

// The limit, and how many of the three sizes it contradicts in *against.
size_t Fit(double ib64, double sp64, double ib32, double sp32, double ib16, double sp16, int* against = nullptr) {
  const double in_band[3] = {ib64, ib32, ib16}, split[3] = {sp64, sp32, sp16};
  return in_band_limit_fit(kBytes, in_band, split, 3, kLeast, against);
}

TEST(InBandLimitFit, MonotoneTimesGiveTheCrossover) {
  int against = -1;
  EXPECT_EQ(Fit(1100, 740, 550, 370, 280, 190, &against), kLeast);  // split wins everywhere (3 ranks on the bed)
  EXPECT_EQ(against, 0);
  EXPECT_EQ(Fit(1100, 740, 550, 370, 200, 300, &against), 16u << 10);  // in band wins at 16 KiB
  EXPECT_EQ(against, 0);
  EXPECT_EQ(Fit(1480, 1020, 520, 960, 300, 700, &against), 32u << 10);  // 5 ranks
  EXPECT_EQ(against, 0);
  EXPECT_EQ(Fit(100, 200, 50, 120, 25, 70, &against), 64u << 10);  // a fast link: in band everywhere
  EXPECT_EQ(against, 0);
}

TEST(InBandLimitFit, SplitMustWinByTheMargin) {
  EXPECT_EQ(Fit(1000, 960, 500, 480, 250, 240), 64u << 10);  // 4% faster is not enough
  EXPECT_EQ(Fit(1000, 940, 500, 470, 250, 235), kLeast);     // 6% is
}

TEST(InBandLimitFit, OneHiccupDoesNotMoveTheLimit) {
  int against = -1;
  // split timed slow once at 64 KiB (a creation on the bed kept 64 KiB, and 32 KiB took 1.5x)
  EXPECT_EQ(Fit(1100, 2400, 550, 370, 280, 190, &against), kLeast);
  EXPECT_EQ(against, 1);
  // in band timed slow once at 16 KiB, where it won at 32
  EXPECT_EQ(Fit(1480, 1020, 520, 960, 900, 700, &against), 32u << 10);
  EXPECT_EQ(against, 1);
}

TEST(InBandLimitFit, TiesGoByTheRatiosThenToTheLargerLimit) {
  int against = -1;
  // split, in band, split from 64 KiB down: 8 KiB contradicts 32, 32 KiB contradicts 16
  EXPECT_EQ(Fit(1100, 740, 550, 1000, 280, 260, &against), 32u << 10);  // 16 KiB's was the narrower win
  EXPECT_EQ(against, 1);
  EXPECT_EQ(Fit(1100, 740, 550, 560, 280, 100), kLeast);  // 32 KiB's was
  // in band, split, in band: 16 KiB contradicts 64, 64 KiB contradicts 32
  EXPECT_EQ(Fit(1100, 1200, 550, 100, 280, 400), 16u << 10);
  // exactly even (in band twice as fast at 32 KiB, split at 16): the larger limit
  const size_t two[2] = {32 << 10, 16 << 10};
  const double in_band[2] = {100, 100}, even[2] = {100 * 0.95 * 2, 100 * 0.95 * 0.5};
  EXPECT_EQ(in_band_limit_fit(two, in_band, even, 2, kLeast, &against), 32u << 10);
  EXPECT_EQ(against, 1);
}

TEST(InBandLimitFit, NoSizeTimedKeepsTheLeast) {
  int against = -1;
  EXPECT_EQ(in_band_limit_fit(kBytes, nullptr, nullptr, 0, kLeast, &against), kLeast);
  EXPECT_EQ(against, 0);
}

}  // namespace
