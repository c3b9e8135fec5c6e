// test_powersgd.cc — the powersgd codec's allreduce (collectives/powersgd.c) on
// p = 1..8 thread ranks: a sum of rank <= R comes back within fp32 rounding on
// every rank, bit-identical across ranks; error feedback telescopes over calls;
// the warm start improves a slowly changing input; a non-finite input gives NaN on
// every rank and keeps the state; bad keys and the codec-only API are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/harness.h"
#include "gccl.h"

namespace {

// Rank r's input: a rank-`rk` matrix rows x cols (row-major, n = rows * cols
// minus `short_by` elements), u_k(i) v_k(j) with small integers.
std::vector<float> LowRank(int r, size_t cols, int rk, size_t n) {
  std::vector<float> x(n);
  for (size_t e = 0; e < n; e++) {
    size_t i = e / cols, j = e % cols;
    float s = 0;
    for (int k = 0; k < rk; k++) s += float((i * 7 + size_t(k) * 3 + size_t(r)) % 5) * float((j * 3 + size_t(k)) % 4);
    x[e] = s;
  }
  return x;
}

std::string Spec(int rank, size_t cols, bool ef) {
  return "powersgd:rank=" + std::to_string(rank) + ",cols=" + std::to_string(cols) + ",ef=" + (ef ? "1" : "0");
}

// Every rank's output of one allreduce, or an empty vector on failure.
std::vector<std::vector<float>> AllReduceOnce(int p, const std::string& spec, const std::vector<std::vector<float>>& in,
                                              gcclRedOp_t op) {
  size_t n = in[0].size();
  std::vector<std::vector<float>> out(static_cast<size_t>(p), std::vector<float>(n));
  std::vector<gcclResult_t> rc(static_cast<size_t>(p), gcclInternalError);
  gcclResult_t res = gh::RunRanks(p, [&](int r, gcclComm_t comm) {
    gcclCompressor_t c = nullptr;
    gcclResult_t e = gcclCompressorCreate(&c, spec.c_str(), n, gcclFloat32);
    if (e == gcclSuccess)
      e = gcclAllReduceCompressed(in[size_t(r)].data(), out[size_t(r)].data(), n, gcclFloat32, op, c, comm, nullptr);
    rc[size_t(r)] = e;
    gcclCompressorDestroy(c);
  });
  EXPECT_EQ(res, gcclSuccess);
  for (int r = 0; r < p; r++)
    EXPECT_EQ(rc[size_t(r)], gcclSuccess) << "rank " << r << ": " << gcclGetLastError(nullptr);
  return out;
}

TEST(PowerSgd, LowRankSumComesBackOnEveryRankBitIdentical) {
  const size_t rows = 13, cols = 11;
  for (int p = 1; p <= 8; p++) {
    for (size_t short_by : {size_t(0), size_t(5)}) {  // a padded last row too
      SCOPED_TRACE("p " + std::to_string(p) + " short_by " + std::to_string(short_by));
      size_t n = rows * cols - short_by;
      std::vector<std::vector<float>> in;
      std::vector<double> sum(n, 0.0);
      for (int r = 0; r < p; r++) {
        in.push_back(LowRank(r, cols, 1, n));  // the sum over ranks has rank <= 2: u_r varies by r
        for (size_t e = 0; e < n; e++) sum[e] += in.back()[e];
      }
      auto out = AllReduceOnce(p, Spec(2, cols, true), in, gcclSum);
      double scale = 0;
      for (double s : sum) scale = std::max(scale, std::fabs(s));
      for (size_t e = 0; e < n; e++) EXPECT_NEAR(out[0][e], sum[e], 1e-4 * scale + 1e-5) << "element " << e;
      for (int r = 1; r < p; r++) EXPECT_EQ(0, std::memcmp(out[0].data(), out[size_t(r)].data(), n * sizeof(float)));
    }
  }
}

// Counts 0, 1, primes and below p, on p = 1..8: matrices of at most 4 x 4, whose
// rank 4 holds any sum, so every rank gets the exact sum within rounding.
TEST(PowerSgd, SmallAndOddCountsOnEveryRankCount) {
  for (int p = 1; p <= 8; p++)
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(5), size_t(7), size_t(13)}) {
      SCOPED_TRACE("p " + std::to_string(p) + " n " + std::to_string(n));
      std::vector<std::vector<float>> in;
      std::vector<float> sum(n, 0.0f);
      for (int r = 0; r < p; r++) {
        in.emplace_back(n);
        for (size_t e = 0; e < n; e++) sum[e] += in.back()[e] = float((e * 5 + size_t(r) * 3) % 7) - 3.0f;
      }
      auto out = AllReduceOnce(p, "powersgd:rank=4", in, gcclSum);
      for (size_t e = 0; e < n; e++) EXPECT_NEAR(out[0][e], sum[e], 1e-4 * (1 + std::fabs(sum[e])));
      for (int r = 1; r < p && n > 0; r++)  // memcmp takes no null pointers, even for 0 bytes
        EXPECT_EQ(0, std::memcmp(out[0].data(), out[size_t(r)].data(), n * sizeof(float)));
    }
}

TEST(PowerSgd, AvgDividesBySize) {
  const size_t rows = 9, cols = 7, n = rows * cols;
  const int p = 3;
  std::vector<std::vector<float>> in;
  std::vector<double> sum(n, 0.0);
  for (int r = 0; r < p; r++) {
    in.push_back(LowRank(0, cols, 1, n));  // the same on every rank: rank 1
    for (size_t e = 0; e < n; e++) sum[e] += in.back()[e];
  }
  auto out = AllReduceOnce(p, Spec(1, cols, false), in, gcclAvg);
  for (size_t e = 0; e < n; e++) EXPECT_NEAR(out[1][e], sum[e] / p, 1e-4 * std::fabs(sum[e]) + 1e-4);
}

// sum_t out_t + sum_r residual_r = sum_t sum_r g_t,r, with a full-rank input.
TEST(PowerSgd, ErrorFeedbackTelescopes) {
  const int p = 4, calls = 5;
  const size_t n = 200;
  std::vector<double> total(n, 0.0), got(n, 0.0), resid(n, 0.0);
  gcclResult_t res = gh::RunRanks(p, [&](int r, gcclComm_t comm) {
    gcclCompressor_t c = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&c, "powersgd:rank=2", n, gcclFloat32), gcclSuccess);
    std::vector<float> g(n), out(n);
    for (int t = 0; t < calls; t++) {
      for (size_t e = 0; e < n; e++) g[e] = float(int((e * 31 + size_t(t) * 7 + size_t(r) * 13) % 17) - 8);
      ASSERT_EQ(gcclAllReduceCompressed(g.data(), out.data(), n, gcclFloat32, gcclSum, c, comm, nullptr), gcclSuccess);
      if (r == 0)
        for (size_t e = 0; e < n; e++) got[e] += out[e];
      static std::mutex mu;
      std::lock_guard<std::mutex> lk(mu);
      for (size_t e = 0; e < n; e++) total[e] += g[e];
    }
    std::vector<float> e(n);
    ASSERT_EQ(gcclCompressorGetResidual(c, e.data()), gcclSuccess);
    {
      static std::mutex mu2;
      std::lock_guard<std::mutex> lk(mu2);
      for (size_t i = 0; i < n; i++) resid[i] += e[i];
    }
    gcclCompressorDestroy(c);
  });
  ASSERT_EQ(res, gcclSuccess);
  for (size_t e = 0; e < n; e++) EXPECT_NEAR(got[e] + resid[e], total[e], 1e-3 * (1 + std::fabs(total[e])));
}

// Rank r's input at call t: a rank-6 matrix whose leading directions are strong,
// drifting slowly with t.
std::vector<float> Drifting(int t, int r, size_t rows, size_t cols) {
  std::vector<float> g(rows * cols);
  for (size_t e = 0; e < g.size(); e++) {
    size_t i = e / cols, j = e % cols;
    double v = 0;
    for (int k = 0; k < 6; k++)
      v += std::pow(0.3, k) * std::sin(0.1 * double(i * size_t(k + 1)) + 0.01 * t + 0.1 * r) *
           std::cos(0.2 * double(j * size_t(k + 1)));
    g[e] = float(v);
  }
  return g;
}

// Without error feedback, call t's error against the exact average falls as Q
// warms up: one power iteration per call from the last call's Q (here from 0.19
// to 0.094, the best rank-2 error of this input; a cold start stays at the first).
TEST(PowerSgd, WarmStartImprovesTheError) {
  const int p = 2, calls = 6;
  const size_t rows = 40, cols = 30, n = rows * cols;
  std::vector<double> err(calls, 0.0);
  gcclResult_t res = gh::RunRanks(p, [&](int r, gcclComm_t comm) {
    gcclCompressor_t c = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&c, Spec(2, cols, false).c_str(), n, gcclFloat32), gcclSuccess);
    std::vector<float> out(n);
    for (int t = 0; t < calls; t++) {
      std::vector<float> g = Drifting(t, r, rows, cols);
      ASSERT_EQ(gcclAllReduceCompressed(g.data(), out.data(), n, gcclFloat32, gcclAvg, c, comm, nullptr), gcclSuccess);
      if (r != 0) continue;
      std::vector<float> other = Drifting(t, 1, rows, cols);
      double e2 = 0, x2 = 0;
      for (size_t e = 0; e < n; e++) {
        double exact = (double(g[e]) + double(other[e])) / 2;
        e2 += (out[e] - exact) * (out[e] - exact);
        x2 += exact * exact;
      }
      err[size_t(t)] = std::sqrt(e2 / x2);
    }
    gcclCompressorDestroy(c);
  });
  ASSERT_EQ(res, gcclSuccess);
  EXPECT_LT(err[calls - 1], 0.6 * err[0]) << "relative error: first call " << err[0] << ", last " << err[calls - 1];
}

// Residual and Q saved after two calls and restored into fresh compressors: the
// third call's output is bit-identical to the uninterrupted run's.
TEST(PowerSgd, CheckpointOfResidualAndStateResumesBitIdentical) {
  const int p = 3;
  const size_t rows = 20, cols = 15, n = rows * cols;
  const std::string spec = Spec(3, cols, true);
  std::vector<std::vector<float>> third(static_cast<size_t>(p), std::vector<float>(n)), resumed = third;
  gcclResult_t res = gh::RunRanks(p, [&](int r, gcclComm_t comm) {
    gcclCompressor_t c = nullptr, d = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&c, spec.c_str(), n, gcclFloat32), gcclSuccess);
    std::vector<float> out(n);
    for (int t = 0; t < 2; t++) {
      std::vector<float> g = Drifting(t, r, rows, cols);
      ASSERT_EQ(gcclAllReduceCompressed(g.data(), out.data(), n, gcclFloat32, gcclSum, c, comm, nullptr), gcclSuccess);
    }
    size_t bytes = 0;
    ASSERT_EQ(gcclCompressorGetState(c, nullptr, 0, &bytes), gcclSuccess);
    ASSERT_EQ(bytes, cols * 3 * sizeof(float));  // Q: cols x rank
    std::vector<float> q(bytes / sizeof(float)), e(n);
    EXPECT_EQ(gcclCompressorGetState(c, q.data(), bytes - 1, &bytes), gcclInvalidArgument);
    ASSERT_EQ(gcclCompressorGetState(c, q.data(), bytes, &bytes), gcclSuccess);
    ASSERT_EQ(gcclCompressorGetResidual(c, e.data()), gcclSuccess);
    std::vector<float> g = Drifting(2, r, rows, cols);
    ASSERT_EQ(gcclAllReduceCompressed(g.data(), third[size_t(r)].data(), n, gcclFloat32, gcclSum, c, comm, nullptr),
              gcclSuccess);
    ASSERT_EQ(gcclCompressorCreate(&d, spec.c_str(), n, gcclFloat32), gcclSuccess);
    EXPECT_EQ(gcclCompressorSetState(d, q.data(), bytes + 4), gcclInvalidArgument);
    ASSERT_EQ(gcclCompressorSetState(d, q.data(), bytes), gcclSuccess);
    ASSERT_EQ(gcclCompressorSetResidual(d, e.data()), gcclSuccess);
    ASSERT_EQ(gcclAllReduceCompressed(g.data(), resumed[size_t(r)].data(), n, gcclFloat32, gcclSum, d, comm, nullptr),
              gcclSuccess);
    gcclCompressorDestroy(c);
    gcclCompressorDestroy(d);
  });
  ASSERT_EQ(res, gcclSuccess);
  for (int r = 0; r < p; r++)
    EXPECT_EQ(0, std::memcmp(third[size_t(r)].data(), resumed[size_t(r)].data(), n * sizeof(float))) << "rank " << r;
}

TEST(PowerSgd, NonFiniteInputGivesNanOnEveryRank) {
  const int p = 3;
  const size_t n = 60;
  std::vector<std::vector<float>> in(size_t(p), std::vector<float>(n, 1.0f));
  in[1][17] = std::nanf("");
  auto out = AllReduceOnce(p, "powersgd:rank=2", in, gcclSum);
  for (int r = 0; r < p; r++)
    for (size_t e = 0; e < n; e++) EXPECT_TRUE(std::isnan(out[size_t(r)][e])) << "rank " << r << " element " << e;
}

TEST(PowerSgd, BadKeysAndTheCodecOnlyApiAreRefused) {
  gcclCompressor_t c = nullptr;
  EXPECT_EQ(gcclCompressorCreate(&c, "powersgd:rank=0", 100, gcclFloat32), gcclInvalidArgument);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("rank=0"), std::string::npos);
  EXPECT_EQ(gcclCompressorCreate(&c, "powersgd:rank=4,bits=4", 100, gcclFloat32), gcclInvalidArgument);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("bits"), std::string::npos);
  EXPECT_EQ(gcclCompressorCreate(&c, "powersgd:cols=x", 100, gcclFloat32), gcclInvalidArgument);
  ASSERT_EQ(gcclCompressorCreate(&c, "powersgd", 100, gcclFloat32), gcclSuccess);
  std::vector<float> x(100, 1.0f);
  std::vector<unsigned char> frame(4096);
  size_t bytes = 0;
  EXPECT_EQ(gcclEncode(c, x.data(), frame.data(), frame.size(), &bytes), gcclInvalidUsage);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("powersgd"), std::string::npos);
  gcclCompressorDestroy(c);
}

}  // namespace
